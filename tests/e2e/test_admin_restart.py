"""Management actions are durable: after a restart (clean or kill -9 once the action
answered) nothing purged, deleted or moved comes back, and nothing moved is lost."""

from __future__ import annotations

import contextlib
import threading

import pytest
from admin_http import browse, call, ok, path_of
from brokerproc import wait_until
from test_paging_helpers import assert_paging, numbered, page_files, send_all, take, wait_frames

from pagemq.core.admin import MOVE_BATCH

CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "zero.#": {"max-size-bytes": 0},
        "dead.#": {"max-delivery-attempts": 1, "dead-letter-address": "dead.DLQ"},
    },
}


@pytest.mark.parametrize("kill", [False, True], ids=["clean", "kill-9"])
def test_every_action_keeps_its_result_across_a_restart(start_broker, stomp_client, kill):
    broker = start_broker(CONFIG)
    producer = stomp_client(broker)
    send_all(producer, "/queue/zero.purged", numbered("p", 150))
    send_all(producer, "/queue/memory.purged", numbered("p", 5))
    send_all(producer, "/queue/zero.moved", numbered("m", 150))
    send_all(producer, "/queue/zero.deleted", numbered("d", 50))
    send_all(producer, "/queue/gone.address", numbered("g", 5))
    send_all(producer, "/queue/zero.gone", numbered("z", 40))
    send_all(producer, "/queue/dead.retried", ["r0", "r1"])
    nacker = stomp_client(broker)
    nacker.subscribe("/queue/dead.retried", ack="client-individual")
    for frame in wait_frames(nacker, 2):
        nacker.nack(frame, receipt=True)
    nacker.disconnect()
    wait_until(lambda: broker.queue("dead.DLQ")["messages"] == 2)
    assert_paging(broker, "zero.purged")
    producer.disconnect()

    assert ok(broker, "POST", path_of("queues", "zero.purged", "purge"))["purged"] == 150
    assert ok(broker, "POST", path_of("queues", "memory.purged", "purge"))["purged"] == 5
    assert ok(broker, "POST", path_of("queues", "zero.moved", "move"), {"to": "moved.here"})["moved"] == 150
    ok(broker, "DELETE", path_of("queues", "zero.deleted"))
    ok(broker, "DELETE", path_of("addresses", "gone.address"))
    ok(broker, "DELETE", path_of("addresses", "zero.gone"))
    wait_until(lambda: not page_files(broker, "zero.gone"))
    assert ok(broker, "POST", path_of("queues", "dead.DLQ", "retry"))["retried"] == 2

    if kill:
        broker.kill()
        broker.start()
    else:
        broker.restart()

    for name in ("zero.purged", "memory.purged", "zero.moved"):
        queue = broker.queue(name)
        assert queue["messages"] == 0, queue
    wait_until(lambda: not page_files(broker, "zero.purged") and not page_files(broker, "zero.moved"))
    for kind, name in (("queues", "zero.deleted"), ("queues", "gone.address"), ("addresses", "gone.address"),
                       ("addresses", "zero.gone")):
        assert call(broker, "GET", path_of(kind, name))[0] == 404, (kind, name)
    assert not [line for line in broker.current_log if "WARNING" in line and "zero.gone" in line]
    assert broker.queue("dead.DLQ")["messages"] == 0
    assert [m["body_preview"][:2] for m in browse(broker, "dead.retried")["messages"]] == ["r0", "r1"]
    consumer = stomp_client(broker)
    consumer.subscribe("/queue/moved.here", ack="client-individual")
    assert take(consumer, 150, timeout=20) == numbered("m", 150)


def test_a_move_killed_midway_loses_nothing(start_broker, stomp_client):
    broker = start_broker(CONFIG)
    send_all(stomp_client(broker), "/queue/zero.source", numbered("m", 3000), timeout=60)

    def move() -> None:
        with contextlib.suppress(OSError):  # the broker is killed under it
            call(broker, "POST", path_of("queues", "zero.source", "move"), {"to": "target"})

    mover = threading.Thread(target=move, daemon=True)
    mover.start()
    # More than MOVE_BATCH in the target: at least two batches were routed (a batch is at
    # most MOVE_BATCH, maybe fewer), and a batch is routed only once the copies before it
    # are durable, so the target must keep some across the kill.
    wait_until(lambda: call(broker, "GET", path_of("queues", "target"))[0] == 200
               and broker.queue("target")["messages"] > MOVE_BATCH, timeout=20, interval=0.005)
    broker.kill()
    mover.join(10)
    broker.start()

    source = broker.queue("zero.source")["messages"]
    target = broker.queue("target")["messages"]
    assert target > 0 and source + target >= 3000, (source, target)
    seen: list[str] = []
    for name, count in (("target", target), ("zero.source", source)):
        consumer = stomp_client(broker)
        consumer.subscribe(f"/queue/{name}", ack="client-individual")
        seen += take(consumer, count, timeout=30)
    assert set(seen) == set(numbered("m", 3000))  # at least once each; a copy may be doubled

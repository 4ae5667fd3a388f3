"""Expiry by timers: due refs leave queues nobody consumes, acknowledged ones are not kept
alive by their timer entries, and the per-tick cost does not grow with messages that do not
expire (the heap holds only those that do)."""

from __future__ import annotations

import gc
import time
import weakref

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode, Consumer, MessageRef
from pagemq.core.expiry import COMPACT_FLOOR, ExpiryTimers
from pagemq.core.settings import AddressSettingsRepository


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[MessageRef, int]] = []

    def deliver(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        self.got.append((ref, tag))


def _broker(**settings: object) -> Broker:
    repository = AddressSettingsRepository()
    repository.add("#", settings)
    return Broker(repository)


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_due_refs_of_a_queue_without_consumers_move_to_the_expiry_address() -> None:
    broker = _broker(**{"expiry-address": "expired"})
    broker.ensure_queue(broker.ensure_address("expired", "anycast"), "expired", "anycast")
    soon = _now_ms() - 1
    broker.send("orders", "anycast", {"n": "1"}, b"a", expiration=soon)
    broker.send("orders", "anycast", {"n": "2"}, b"b")
    broker.send("orders", "anycast", {"n": "3"}, b"c", expiration=_now_ms() + 3_600_000)
    assert len(broker.expiry) == 2
    assert broker.expire_due() == 1
    assert broker.queue_info("orders")["messages"] == 2
    assert broker.queue_info("orders")["messages_expired"] == 1
    moved = list(broker.queues["expired"])
    assert [r.message.headers["n"] for r in moved] == ["1"]
    assert moved[0].message.headers["original-destination"] == "orders"


def test_a_delivered_ref_is_not_expired_by_its_timer() -> None:
    broker = _broker()
    queue = broker.ensure_queue(broker.ensure_address("q", "anycast"), "q", "anycast")
    sink = Sink()
    broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
    broker.send("q", "anycast", {}, b"a", expiration=_now_ms() + 20)
    assert len(sink.got) == 1
    time.sleep(0.03)
    assert broker.expire_due() == 0
    assert broker.queue_info("q")["messages_delivering"] == 1


def test_an_acknowledged_message_is_not_kept_alive_by_its_timer_entry() -> None:
    broker = _broker()
    queue = broker.ensure_queue(broker.ensure_address("q", "anycast"), "q", "anycast")
    sink = Sink()
    consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
    broker.send("q", "anycast", {}, b"a", expiration=_now_ms() + 3_600_000)
    ref, tag = sink.got.pop()
    message = weakref.ref(ref.message)
    broker.acknowledge(queue, [consumer.take(tag)])
    del ref
    gc.collect()
    assert message() is None


def test_entries_of_gone_refs_are_swept_once_they_dominate() -> None:
    broker = _broker()
    queue = broker.ensure_queue(broker.ensure_address("q", "anycast"), "q", "anycast")
    sink = Sink()
    consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=-1)
    later = _now_ms() + 3_600_000
    for _ in range(3 * COMPACT_FLOOR):
        broker.send("q", "anycast", {}, b"a", expiration=later)
    broker.acknowledge(queue, [consumer.take(tag) for _ref, tag in sink.got])
    sink.got.clear()
    gc.collect()
    broker.expire_due()  # nothing due; the sweep runs at the tick
    assert len(broker.expiry) == 0


def test_timers_pop_in_due_order_and_skip_deleted_queues() -> None:
    broker = _broker()
    keep = broker.ensure_queue(broker.ensure_address("k", "anycast"), "k", "anycast")
    gone = broker.ensure_queue(broker.ensure_address("g", "anycast"), "g", "anycast")
    refs = [MessageRef(broker.router.route("k", "anycast", {}, b"", False, 4, due)[1])  # type: ignore[index]
            for due in (30, 10, 20)]
    timers = ExpiryTimers()
    for ref in refs:
        timers.add(keep, ref)
    timers.add(gone, refs[0])
    broker.delete_queue(gone)
    due = timers.due(25)
    assert [r.message.expiration for r in due[keep]] == [10, 20]
    assert gone not in due
    assert len(timers) == 2  # both due at 30, not yet popped

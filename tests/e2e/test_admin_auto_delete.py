"""Address settings auto-delete-queues / auto-delete-addresses (Artemis' names and
semantics): auto-created queues and addresses go once empty and unused for their delay;
configured ones, queues with messages and durable subscriptions stay; bad values exit 2."""

from __future__ import annotations

import time

import pytest
from admin_http import call, path_of
from brokerproc import HOST, free_port, run_cli, to_toml, unique, wait_until
from test_paging_helpers import send_all, take

BROKER_CONFIG = {
    "address-settings": {
        "auto.#": {"auto-delete-queues": True, "auto-delete-queues-delay": "1500ms",
                   "auto-delete-addresses": True, "auto-delete-addresses-delay": 0},
        "autokeep.#": {"auto-delete-queues": True, "auto-delete-queues-message-count": 2},
        "autoall.#": {"auto-delete-queues": True, "auto-delete-queues-message-count": -1},
    },
    "addresses": [{"name": "auto.configured", "routing-type": "anycast"}],
}


def _exists(broker, kind: str, name: str) -> bool:
    return call(broker, "GET", path_of(kind, name))[0] == 200


def test_an_auto_created_queue_and_address_go_once_empty_and_unused_for_the_delay(broker, stomp_client):
    name = "auto." + unique("q")
    send_all(stomp_client(broker), f"/queue/{name}", ["one"])
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual")
    assert take(consumer, 1) == ["one"]
    consumer.disconnect()
    left = time.monotonic()

    time.sleep(0.8)
    assert _exists(broker, "queues", name)  # not before its delay
    wait_until(lambda: not _exists(broker, "queues", name), timeout=6)
    assert time.monotonic() - left >= 1.5
    wait_until(lambda: not _exists(broker, "addresses", name), timeout=4)
    # a client may use the name again
    send_all(stomp_client(broker), f"/queue/{name}", ["again"])
    assert broker.queue(name)["messages"] == 1


def test_configured_queues_queues_holding_messages_and_durable_subscriptions_stay(broker, stomp_client):
    held = "auto." + unique("held")
    send_all(stomp_client(broker), f"/queue/{held}", ["kept"])
    subscriber = stomp_client(broker, client_id=unique("cid"))
    topic = "auto." + unique("topic")
    subscriber.subscribe(f"/topic/{topic}", headers={"durable-subscription-name": "sub"})
    subscriber.disconnect()
    time.sleep(3.5)
    assert _exists(broker, "queues", "auto.configured")
    assert _exists(broker, "addresses", "auto.configured")
    assert broker.queue(held)["messages"] == 1
    assert _exists(broker, "addresses", topic)


def test_the_message_count_setting_lets_queues_with_a_few_messages_go(broker, stomp_client):
    few, many, anything = "autokeep." + unique("few"), "autokeep." + unique("many"), "autoall." + unique("q")
    producer = stomp_client(broker)
    send_all(producer, f"/queue/{few}", ["a", "b"])
    send_all(producer, f"/queue/{many}", ["a", "b", "c"])
    send_all(producer, f"/queue/{anything}", [f"m{n}" for n in range(20)])
    wait_until(lambda: not _exists(broker, "queues", few), timeout=5)
    wait_until(lambda: not _exists(broker, "queues", anything), timeout=5)
    assert broker.queue(many)["messages"] == 3


@pytest.mark.parametrize(("key", "value"), [("auto-delete-queues", "yes"),
                                            ("auto-delete-addresses-delay", "soon"),
                                            ("auto-delete-queues-message-count", "x"),
                                            ("auto-delete-queue", True)])
def test_a_bad_auto_delete_setting_exits_2_naming_the_key(tmp_path, key, value):
    config = tmp_path / "pagemq.toml"
    config.write_text(to_toml({"address-settings": {"#": {key: value}}}))
    result = run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path / "data"),
                     "--stomp", f"{HOST}:{free_port()}", "--http", f"{HOST}:{free_port()}",
                     cwd=tmp_path, timeout=20)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and key in lines[0], result.stderr

"""Durability: what a RECEIPT promises survives SIGKILL; acknowledged messages stay gone;
non-persistent messages do not outlive the process."""

from __future__ import annotations

from brokerproc import bodies, unique

PERSISTENT = {"persistent": "true"}


def _consume_all(proc, stomp_client, queue, expected: int):
    """Subscribe (client-individual), take `expected` messages, check nothing more comes."""
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    frames = consumer.wait_for(expected) if expected else []
    consumer.listener.assert_no_more(expected)
    return consumer, frames


def test_persistent_messages_with_receipts_survive_sigkill(start_broker, stomp_client):
    proc, queue = start_broker(), unique("durable")
    producer = stomp_client(proc)
    for n in range(20):
        producer.send(f"/queue/{queue}", f"p{n}", headers=PERSISTENT, receipt=True)
    proc.restart(kill=True)
    assert proc.queue(queue)["messages"] == 20
    _, frames = _consume_all(proc, stomp_client, queue, 20)
    assert bodies(frames) == [f"p{n}" for n in range(20)]


def test_persistent_messages_survive_a_clean_restart(start_broker, stomp_client):
    proc, queue = start_broker(), unique("durable")
    producer = stomp_client(proc)
    for n in range(5):
        producer.send(f"/queue/{queue}", f"p{n}", headers={**PERSISTENT, "mark": str(n)}, receipt=True)
    producer.disconnect()
    proc.restart()
    _, frames = _consume_all(proc, stomp_client, queue, 5)
    assert bodies(frames) == [f"p{n}" for n in range(5)]
    assert [f.headers["mark"] for f in frames] == [str(n) for n in range(5)]


def test_acked_messages_are_not_delivered_again_after_sigkill(start_broker, stomp_client):
    proc, queue = start_broker(), unique("acked")
    producer = stomp_client(proc)
    for n in range(10):
        producer.send(f"/queue/{queue}", f"p{n}", headers=PERSISTENT, receipt=True)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    frames = consumer.wait_for(10)
    for frame in frames[:6]:
        consumer.ack(frame, receipt=True)
    proc.restart(kill=True)
    _, again = _consume_all(proc, stomp_client, queue, 4)
    assert bodies(again) == [f"p{n}" for n in range(6, 10)]


def test_acked_messages_are_not_delivered_again_after_a_clean_restart(start_broker, stomp_client):
    proc, queue = start_broker(), unique("acked")
    client = stomp_client(proc)
    for n in range(4):
        client.send(f"/queue/{queue}", f"p{n}", headers=PERSISTENT, receipt=True)
    client.subscribe(f"/queue/{queue}", ack="client")
    frames = client.wait_for(4)
    client.ack(frames[1])  # cumulative: p0 and p1
    client.disconnect()
    proc.restart()
    _, again = _consume_all(proc, stomp_client, queue, 2)
    assert bodies(again) == ["p2", "p3"]


def test_delivered_but_unacked_messages_come_back_after_sigkill(start_broker, stomp_client):
    proc, queue = start_broker(), unique("unacked")
    client = stomp_client(proc)
    client.subscribe(f"/queue/{queue}", ack="client-individual")
    for n in range(3):
        client.send(f"/queue/{queue}", f"p{n}", headers=PERSISTENT, receipt=True)
    client.wait_for(3)
    proc.restart(kill=True)
    _, again = _consume_all(proc, stomp_client, queue, 3)
    assert bodies(again) == ["p0", "p1", "p2"]


def test_non_persistent_messages_do_not_survive_a_restart(start_broker, stomp_client):
    proc, queue = start_broker(), unique("transient")
    producer = stomp_client(proc)
    for n in range(5):
        producer.send(f"/queue/{queue}", f"t{n}", receipt=True)
    producer.send(f"/queue/{queue}", "kept", headers=PERSISTENT, receipt=True)
    producer.send(f"/queue/{queue}", "explicitly transient", headers={"persistent": "false"}, receipt=True)
    assert proc.queue(queue)["messages"] == 7
    producer.disconnect()
    proc.restart()
    assert proc.queue(queue)["messages"] == 1
    _, frames = _consume_all(proc, stomp_client, queue, 1)
    assert bodies(frames) == ["kept"]


def test_restart_twice_without_traffic_keeps_messages_once(start_broker, stomp_client):
    proc, queue = start_broker(), unique("twice")
    stomp_client(proc).send(f"/queue/{queue}", "only once", headers=PERSISTENT, receipt=True)
    proc.restart(kill=True)
    proc.restart()
    proc.restart(kill=True)
    _, frames = _consume_all(proc, stomp_client, queue, 1)
    assert bodies(frames) == ["only once"]

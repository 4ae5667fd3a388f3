"""Bursts of frames on several connections at once do not hold the event loop (issue 14).

The loop's lag sampler (`GET /api/broker?since=`, `event_loop`) counts *busy* stalls: 50 ms
or more between two ticks of its 10 ms timer that the loop thread spent running, not waiting
for a CPU. That figure does not depend on how loaded the machine is, only on how much work
one loop turn does, which is what these tests are about.
"""

from __future__ import annotations

import threading
import time

from brokerproc import RawStomp, encode_frame, unique

CONSUMERS = 4
PER_QUEUE = 5_000


def _fill(broker, queues: list[str]) -> None:
    with RawStomp(broker.stomp_port, timeout=60) as producer:
        producer.connect()
        for queue in queues:
            frames = b"".join(encode_frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true"},
                                           f"m{n}") for n in range(PER_QUEUE - 1))
            last = encode_frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true",
                                         "receipt": queue}, "last")
            producer.send_while_reading(frames + last)
            producer.read_until_receipt(queue, timeout=60)
    for queue in queues:
        broker.wait_queue(queue, timeout=60, messages=PER_QUEUE)


def _take_all(consumer: RawStomp, queue: str, count: int) -> list[str]:
    consumer.connect()
    consumer.send_frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "s", "ack": "client-individual",
                                      "activemq.prefetchSize": str(count + 10)})
    ids: list[str] = []
    while len(ids) < count:
        frame = consumer.read_frame(timeout=60)
        assert frame is not None and frame.command == "MESSAGE", f"expected MESSAGE, got {frame}"
        ids.append(frame.headers["ack"])
    return ids


def test_ack_bursts_on_four_connections_at_once_leave_no_busy_stall(start_broker):
    """Four consumers each send 5,000 ACKs in one write, at the same moment: the broker
    reads ~1,000 frames per socket read, so one loop turn used to carry out ~4,000 ACKs (each a
    journal delete and a release), ~80-200 ms. Now a turn gives the frames of all connections
    together ~10 ms and the rest follows in later turns: every ACK is carried out, and no
    stretch of 50 ms passes without the loop's timer running."""
    broker = start_broker()
    queues = [unique("burst") for _ in range(CONSUMERS)]
    _fill(broker, queues)
    consumers = [RawStomp(broker.stomp_port, timeout=60) for _ in queues]
    try:
        acks = [b"".join(encode_frame("ACK", {"id": ack_id}) for ack_id in _take_all(c, q, PER_QUEUE))
                for c, q in zip(consumers, queues, strict=True)]
        since = float(int(time.time()) + 1)  # the lag figures are per whole second: start at the next
        time.sleep(since - time.time())
        senders = [threading.Thread(target=c.sock.sendall, args=(burst,)) for c, burst in zip(consumers, acks,
                                                                                             strict=True)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(60)
        for queue in queues:  # every ACK was carried out
            broker.wait_queue(queue, timeout=60, messages_acknowledged=PER_QUEUE)
        time.sleep(0.1)  # the sampler's next ticks, after the last ACK
        status, view = broker.http_get(f"/api/broker?since={since:.3f}")
        assert status == 200
        loop = view["event_loop"]
        assert loop["samples"] > 0
        assert loop["busy_stalls"] == 0, f"the loop ran 50 ms or more without a break: {loop}"
    finally:
        for consumer in consumers:
            consumer.close()

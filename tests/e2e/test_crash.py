"""Crash test: a pipelined producer of persistent messages while the broker is SIGKILLed at
random moments, ten times. After each restart every receipted message is there, nothing
acknowledged comes back, nothing is delivered twice, nothing appears that was never sent.

Set PAGEMQ_CRASH_SEED to replay a run; the seed is in every failure message.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid

import pytest
import stomp
from brokerproc import WAIT, StompClient

ROUNDS = 10
IN_FLIGHT = 200  # unreceipted SENDs a producer may have outstanding (pipelining)
PREFETCH = 1_000_000


class Ledger:
    """What the test knows about every message it ever sent."""

    def __init__(self) -> None:
        self.sent: set[str] = set()
        self.receipted: set[str] = set()  # durable: a RECEIPT came back
        self.acked: set[str] = set()  # an ACK with a RECEIPT came back
        self.lost: set[str] = set()  # sent, never receipted, absent after a restart

    @property
    def must_be_there(self) -> set[str]:
        return self.receipted - self.acked


class Producer(threading.Thread):
    """Sends persistent messages, at most IN_FLIGHT unreceipted, until stopped or cut off."""

    def __init__(self, port: int, queue: str, round_no: int, ledger: Ledger) -> None:
        super().__init__(daemon=True)
        self.client = StompClient(port).connect()
        self.queue, self.round_no, self.ledger = queue, round_no, ledger
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        listener = self.client.listener
        n = 0
        try:
            while not self.stopping.is_set() and self.client.is_connected:
                body = f"r{self.round_no}-{n}"
                self.ledger.sent.add(body)
                self.client.conn.send(
                    f"/queue/{self.queue}", body, headers={"persistent": "true", "receipt": body}
                )
                n += 1
                listener.wait_quietly(self._room(n), 1.0)
        except (OSError, stomp.exception.StompException):
            pass  # the broker was killed under us: expected
        except Exception as exc:
            self.error = exc

    def _room(self, sent: int):
        listener = self.client.listener
        return lambda: sent - len(listener.receipts) < IN_FLIGHT or listener.disconnected

    def finish(self) -> set[str]:
        """Stop, close, return the bodies whose RECEIPT arrived."""
        self.stopping.set()
        self.join(WAIT)
        assert not self.is_alive(), "producer thread did not stop"
        assert self.error is None, f"producer failed: {self.error!r}"
        self.client.drop()
        return set(self.client.listener.receipts)


def _none(bodies: set[str], what: str, context: str) -> None:
    assert not bodies, f"{len(bodies)} {what} {context}: {sorted(bodies)[:10]}"


def _drain(proc, queue: str, ledger: Ledger, seed: int, round_no: int) -> StompClient:
    """After a restart: take everything the queue holds, check it against the ledger."""
    context = f"(seed {seed}, round {round_no})"
    consumer = StompClient(proc.stomp_port).connect()
    consumer.subscribe(f"/queue/{queue}", ack="client-individual",
                       headers={"activemq.prefetchSize": PREFETCH})
    listener = consumer.listener
    expected = ledger.must_be_there

    def received() -> set[str]:
        return {frame.body for frame in listener.messages}

    missing: set[str] = set()

    def all_there() -> bool:
        missing.clear()
        missing.update(expected - received())
        return not missing

    deadline = time.monotonic() + 15
    while not all_there() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not missing, (
        f"{len(missing)} receipted messages missing after restart {context}: {sorted(missing)[:10]}"
    )
    queue_info = proc.wait_queue(queue, timeout=10, messages_delivering=proc.queue(queue)["messages"])
    listener.assert_no_more(len(listener.messages), within=0.2)

    got = [frame.body for frame in listener.messages]
    seen = set(got)
    _none({b for b in seen if got.count(b) > 1}, "delivered twice", context)
    _none(seen & ledger.acked, "acknowledged messages came back", context)
    _none(seen - ledger.sent, "never-sent messages delivered", context)
    _none(seen & ledger.lost, "messages absent after an earlier restart came back", context)
    held = queue_info["messages"]
    assert held == len(got), f"queue holds {held} messages, {len(got)} delivered {context}"
    # Unreceipted messages that survived are on disk now: they must stay; the others are lost.
    unreceipted = ledger.sent - ledger.receipted - ledger.lost
    ledger.receipted |= unreceipted & seen
    ledger.lost |= unreceipted - seen
    return consumer


def _ack_some(consumer: StompClient, ledger: Ledger, rng: random.Random) -> None:
    frames = [f for f in consumer.listener.messages if rng.random() < 0.5]
    receipt_ids = []
    for frame in frames:
        receipt_id = f"ack-{uuid.uuid4().hex[:10]}"
        consumer.conn.ack(frame.headers["ack"], receipt=receipt_id)
        receipt_ids.append((receipt_id, frame.body))
    for receipt_id, body in receipt_ids:
        consumer.listener.wait_for_receipt(receipt_id, 10)
        ledger.acked.add(body)


@pytest.mark.slow  # make test-slow
def test_receipted_messages_survive_random_sigkills_and_acked_ones_stay_gone(start_broker):
    seed = int(os.environ.get("PAGEMQ_CRASH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    proc = start_broker()
    queue = f"crash-{seed}"
    ledger = Ledger()
    consumer: StompClient | None = None
    for round_no in range(ROUNDS):
        producer = Producer(proc.stomp_port, queue, round_no, ledger)
        producer.start()
        time.sleep(rng.uniform(0.05, 0.6))
        proc.kill()
        ledger.receipted |= producer.finish()
        if consumer is not None:
            consumer.drop()
        proc.start()
        consumer = _drain(proc, queue, ledger, seed, round_no)
        _ack_some(consumer, ledger, rng)

    assert consumer is not None
    consumer.drop()
    proc.restart()
    final = _drain(proc, queue, ledger, seed, ROUNDS)
    assert len(ledger.receipted) > ROUNDS * 10, f"too few messages receipted: {len(ledger.receipted)}"
    for frame in final.listener.messages:
        final.conn.ack(frame.headers["ack"])
    final.disconnect()
    proc.restart()
    assert proc.queue(queue)["messages"] == 0, f"(seed {seed}) queue not empty after acking everything"

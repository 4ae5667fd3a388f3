"""Dead-lettering under restarts and crashes: every message ends up exactly once.

A move to the dead-letter address is a copy, then the original's settlement. Random rounds of
deliveries, NACKs, receipted ACKs, consumers dropping away and the broker stopping (cleanly
or with kill -9) at any point of that, with some of the queue paged; then both queues are
drained. Each message that got a RECEIPT and no receipted ACK must be found exactly once,
in its queue or in the DLQ; one whose ACK got a RECEIPT, nowhere.

(Found this way: a clean stop racing a move left both copies, 2026-11-29.)
"""

from __future__ import annotations

import random

import pytest
from brokerproc import BrokerProcess, StompClient

MESSAGES = 40
ROUNDS = 12
CONFIGS = {
    "in memory": {"address-settings": {"#": {"max-delivery-attempts": 2}}},
    "paged": {"address-settings": {"#": {"max-delivery-attempts": 2, "max-size-messages": 8,
                                         "page-size-bytes": "4KiB"}}},
}


def _take(client: StompClient, count: int, timeout: float = 1.0) -> list:
    """The deliveries that come within `timeout`, at most `count` (fewer is fine)."""
    try:
        return client.wait_for(count, timeout=timeout)
    except AssertionError:
        return list(client.messages)


def _drain(proc: BrokerProcess, stomp_client, destination: str) -> list[str]:
    """Every label left on the queue, each acknowledged with a receipt."""
    client = stomp_client(proc)
    client.subscribe(destination, ack="client-individual", headers={"activemq.prefetchSize": 1000})
    labels = []
    while True:
        frames = _take(client, len(labels) + 1, timeout=1.5)
        new = frames[len(labels):]
        if not new:
            return labels
        for frame in new:
            labels.append(frame.headers["label"])
            client.ack(frame, receipt=True)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", [1, 3])
def test_every_message_ends_once_in_its_queue_or_the_dlq(start_broker, stomp_client, config, seed):
    rnd = random.Random(seed)
    proc = start_broker(CONFIGS[config])
    producer = stomp_client(proc)
    for n in range(MESSAGES):
        producer.send("/queue/work", f"m{n}", headers={"persistent": "true", "label": f"m{n}"}, receipt=True)
    producer.disconnect()
    acked: set[str] = set()
    log = []
    for _round in range(ROUNDS):
        consumer = stomp_client(proc)
        prefetch = rnd.choice([1, 3, 10])
        consumer.subscribe("/queue/work", ack="client-individual",
                           headers={"activemq.prefetchSize": prefetch})
        for frame in _take(consumer, rnd.randint(1, prefetch)):
            label = frame.headers["label"]
            action = rnd.choice(["ack", "nack", "nack", "keep"])
            log.append(f"{label}:{action}")
            if action == "ack":
                consumer.ack(frame, receipt=True)
                acked.add(label)
            elif action == "nack":
                consumer.nack(frame, receipt=rnd.random() < 0.5)
        end = rnd.choice(["disconnect", "drop", "restart", "kill", "stop with it open"])
        log.append(end)
        if end == "disconnect":
            consumer.disconnect()
        elif end == "drop":
            consumer.drop()
        elif end == "restart":
            consumer.drop()
            proc.restart()
        elif end == "kill":
            proc.restart(kill=True)
        else:
            proc.restart()  # the consumer's deliveries and its NACKs' moves meet the stop
    found = _drain(proc, stomp_client, "/queue/work") + _drain(proc, stomp_client, "/queue/DLQ")
    expected = sorted(f"m{n}" for n in range(MESSAGES) if f"m{n}" not in acked)
    twice = sorted({label for label in found if found.count(label) > 1})
    assert not twice, f"found twice: {twice}; history: {log}"
    assert sorted(found) == expected, (
        f"missing {sorted(set(expected) - set(found))}, not expected {sorted(set(found) - set(expected))}; "
        f"history: {log}")

"""The broker's memory as the operating system sees it (RSS), not only as it accounts it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from brokerproc import BrokerProcess, StompClient, wait_until

MIB = 1 << 20
MESSAGES = 3000
BODY = b"m" * 32 * 1024  # 3000 x 32 KiB: about 94 MiB of bodies held, then drained


def test_memory_freed_by_a_drain_goes_back_to_the_os(
    start_broker: Callable[..., BrokerProcess], stomp_client: Callable[..., StompClient], queue_name: str,
) -> None:
    broker = start_broker()
    before = broker.rss_bytes()
    producer = stomp_client(broker)
    for i in range(MESSAGES):
        producer.send(f"/queue/{queue_name}", BODY, receipt=i == MESSAGES - 1)
    broker.wait_queue(queue_name, messages=MESSAGES, timeout=30)
    held = broker.rss_bytes()
    assert held - before > 80 * MIB, f"RSS {before / MIB:.0f} -> {held / MIB:.0f} MiB holding the messages"

    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="auto")
    consumer.listener.wait_for(MESSAGES, timeout=60)
    broker.wait_queue(queue_name, messages=0, timeout=30)

    def back_down() -> Any:
        return broker.rss_bytes() < before + 40 * MIB

    wait_until(back_down, timeout=10, what="RSS to come back after the drain")

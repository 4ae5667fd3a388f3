"""A queue's page cursor reads every record meant for it, whatever happened to the page while
a reader was open: the page grew (a new record was written after the reader was made), or it
rolled under the reader. Found by the model-based test (seed 1003): a selective consumer took
matches ahead, left, and a plain consumer then never got the message sent meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_paging_acks import Collector, paging_broker, run

from pagemq.core.consumer import AckMode


def test_message_paged_after_a_selective_consumer_left_reaches_a_cumulative_acking_consumer(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        broker, _store, _pages = await paging_broker(tmp_path, address_settings={
            "max-size-messages": 4, "page-size-bytes": 4096,
            "max-read-page-messages": 3, "prefetch-page-messages": 3,
        })
        colors = ["green", "blue", "red", "blue", "green", "blue", "green", "red", "blue", "blue"]
        for n, color in enumerate(colors):
            broker.send("q", "anycast", {"color": color, "n": str(n)}, b"x" * 40, persistent=True)
        await asyncio.sleep(0.05)
        queue = broker.queues["q"]
        selective = broker.subscribe(queue, Collector(), ack_mode=AckMode.INDIVIDUAL,
                                     selector="color IN ('blue', 'green')", prefetch=1000)
        await asyncio.sleep(0.05)
        broker.send("q", "anycast", {"color": "red", "n": "late"}, b"x" * 40, persistent=True)
        await asyncio.sleep(0.05)
        broker.close_consumer(queue, selective)

        got = Collector()
        consumer = broker.subscribe(queue, got, ack_mode=AckMode.CLIENT, prefetch=1000)
        for _ in range(40):
            await asyncio.sleep(0.02)
            if consumer.in_flight:
                broker.acknowledge(queue, consumer.take_through(max(consumer.in_flight)))
        received = [ref.message.headers["n"] for _tag, ref in got.delivered]
        assert sorted(received) == sorted([str(n) for n in range(10)] + ["late"])
        assert received[-1] == "late"
        assert queue.cursor is not None and queue.cursor.unread == 0

    run(body)

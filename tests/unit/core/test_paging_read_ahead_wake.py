"""A queue waiting for its page read in the page-I/O worker is dispatched again, even when the
page it was reading is completed meanwhile by a selective consumer's look-ahead.

Found by the model-based test (seed 92034, tests/model/seed-92034-stall.json): every message
pages into 4 KiB pages; a plain auto-ack consumer and an auto-ack consumer selecting
`color <> 'blue'` share a queue; of red, green, green, red, green, blue the last one (on the
next page) stayed paged, counted, never delivered to the plain consumer, which had credit.
The queue's reading had answered "nothing now" (a chunk of page 1 in the worker); the
selective consumer claimed and acknowledged every record of page 1 ahead of it, which
completed the page and closed the read in flight, and with it the wake the queue was waiting
for. The page-I/O seam (`QueuedPageIO`) holds the read so that this happens every time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_paging_acks import Collector, close, paging_broker, run

from pagemq.core.consumer import AckMode
from pagemq.storage.paging.page_io import QueuedPageIO

SETTINGS = {"max-size-bytes": 0, "page-size-bytes": 4096, "prefetch-page-messages": 1}
COLORS = ["red", "green", "green", "red", "green", "blue"]


def colors_of(sink: Collector) -> list[str]:
    return [ref.message.headers["color"] for _tag, ref in sink.delivered]


def test_a_plain_consumer_gets_the_message_after_a_page_a_selective_one_took_while_it_was_read(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        io = QueuedPageIO()
        broker, store, pages = await paging_broker(tmp_path, address_settings=SETTINGS, page_io=io)
        for n, color in enumerate(COLORS):
            future = broker.send("q0", "anycast", {"color": color, "n": str(n)}, b"x" * 700,
                                 persistent=True)
        assert future is not None
        await future  # every record written: the look-ahead reads them all
        queue = broker.queues["q0"]
        assert len(pages[0].pages()) == 2  # the blue one alone on the second page

        plain_sink, selective_sink = Collector(), Collector()
        broker.subscribe(queue, plain_sink, ack_mode=AckMode.AUTO, prefetch=3)
        assert queue.cursor is not None and queue.cursor.book.reading  # page 1 in the worker
        broker.subscribe(queue, selective_sink, ack_mode=AckMode.AUTO, prefetch=2,
                         selector="color <> 'blue'")
        assert colors_of(selective_sink) == COLORS[:5]  # all of page 1, taken ahead

        for _ in range(20):
            io.run()  # the page reads, done when the test says
            await asyncio.sleep(0.005)
        assert colors_of(plain_sink) == ["blue"]
        info = queue.cursor
        assert (info.unread, info.in_memory, queue.pending) == (0, 0, 0)
        await close(broker, store, pages)

    run(body)


def test_a_queue_whose_read_page_completes_under_a_read_in_flight_reads_the_next_page(
    tmp_path: Path,
) -> None:
    """The same with the reads running in the real page-I/O worker, as the broker runs them:
    whatever the interleaving, the plain consumer gets the blue message."""
    from pagemq.storage.paging.page_io import PageIOWorker

    async def body() -> None:
        worker = PageIOWorker()
        broker, store, pages = await paging_broker(tmp_path, address_settings=SETTINGS, page_io=worker)
        try:
            for attempt in range(10):
                name = f"q{attempt}"
                for n, color in enumerate(COLORS):
                    future = broker.send(name, "anycast", {"color": color, "n": str(n)}, b"x" * 700,
                                         persistent=True)
                assert future is not None
                await future
                queue = broker.queues[name]
                plain_sink, selective_sink = Collector(), Collector()
                broker.subscribe(queue, plain_sink, ack_mode=AckMode.AUTO, prefetch=3)
                broker.subscribe(queue, selective_sink, ack_mode=AckMode.AUTO, prefetch=2,
                                 selector="color <> 'blue'")
                for _ in range(100):
                    if len(plain_sink.delivered) + len(selective_sink.delivered) == len(COLORS):
                        break
                    await asyncio.sleep(0.01)
                got = sorted(colors_of(plain_sink) + colors_of(selective_sink))
                assert got == sorted(COLORS), f"attempt {attempt}"
                assert "blue" in colors_of(plain_sink), f"attempt {attempt}"
        finally:
            await close(broker, store, pages)
            worker.shutdown()

    run(body)

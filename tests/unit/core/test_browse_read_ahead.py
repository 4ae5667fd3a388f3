"""A browser reads page files in the page-I/O worker, not on the loop, and its read-ahead is
charged to the memory budget while it is open (core/browse.py).

The page-I/O seam (`QueuedPageIO`) holds every read until the test runs it, so "nothing was
read on the loop" is observable: the browse is `pending` with nothing shown until a read runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_paging_acks import close, paging_broker, run

from pagemq.core.browse import QueueBrowse
from pagemq.core.memory import BROWSE_PART as PART
from pagemq.storage.paging.page_io import AHEAD, CHUNK_BYTES, QueuedPageIO

SETTINGS = {"max-size-bytes": 0, "page-size-bytes": 4096}
MESSAGES = 40  # 700-byte bodies: several 4 KiB pages


async def _fill(broker: object, count: int) -> None:
    future = None
    for n in range(count):
        future = broker.send("q0", "anycast", {"n": str(n)}, b"x" * 700, persistent=True)  # type: ignore[attr-defined]
    assert future is not None
    await future


def test_a_browse_waits_for_the_page_io_worker_and_shows_every_paged_message_in_order(tmp_path: Path) -> None:
    async def body() -> None:
        io = QueuedPageIO()
        broker, store, pages = await paging_broker(tmp_path, address_settings=SETTINGS, page_io=io)
        await _fill(broker, MESSAGES)
        queue = broker.queues["q0"]
        arrivals: list[int] = []
        browse = QueueBrowse(queue, None, lambda: arrivals.append(1))
        seen = [int(ref.message.headers["n"]) for ref in browse]
        assert seen == [] and browse.pending  # the page is read in the worker, not here
        assert broker.memory.parts[PART] == (1 + AHEAD) * CHUNK_BYTES  # its ranges, while it is open
        turns = 0
        while browse.pending and turns < 200:
            io.run()
            await asyncio.sleep(0.002)  # the hand-back to the loop
            seen.extend(int(ref.message.headers["n"]) for ref in browse)
            turns += 1
        assert seen == list(range(MESSAGES))
        assert arrivals, "the browse was told when its chunks were in"
        assert broker.memory.parts[PART] == 0  # done: released
        assert queue.cursor is not None and queue.cursor.unread == MESSAGES  # nothing taken
        await close(broker, store, pages)

    run(body)


def test_a_browse_given_up_while_its_chunk_is_read_releases_its_charge(tmp_path: Path) -> None:
    async def body() -> None:
        io = QueuedPageIO()
        broker, store, pages = await paging_broker(tmp_path, address_settings=SETTINGS, page_io=io)
        await _fill(broker, 10)
        browse = QueueBrowse(broker.queues["q0"], None, lambda: None)
        assert list(browse) == [] and browse.pending
        assert broker.memory.parts[PART] > 0
        browse.close()  # the browser unsubscribed, or its connection went
        assert broker.memory.parts[PART] == 0 and broker.memory.part_bytes == 0
        io.run()
        await asyncio.sleep(0.01)
        assert list(browse) == []
        await close(broker, store, pages)

    run(body)

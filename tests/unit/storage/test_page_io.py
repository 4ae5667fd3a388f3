"""Page reads off the event loop (storage/paging/page_io.py): a queue's in-order reading of
page files runs in the page-I/O worker, a bounded chunk at a time, one chunk read ahead."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pagemq.storage.api import MemoryStore
from pagemq.storage.fileio import RealFileIO
from pagemq.storage.paging.file_queue_store import FilePagedQueueStore
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.page_io import (
    CHUNK_BYTES,
    InlinePageIO,
    PageIOWorker,
    QueuedPageIO,
    ReadAhead,
    read_chunk,
)
from pagemq.storage.paging.page_store import PageStore
from pagemq.storage.paging.queue_store import CursorRecords

QUEUE = 7


class ThreadNotingFileIO(RealFileIO):
    """Notes which thread read each range of a page file."""

    def __init__(self) -> None:
        self.readers: set[int] = set()

    def read_range(self, path: Path, offset: int, length: int) -> bytes:
        if path.name.endswith(".page"):
            self.readers.add(threading.get_ident())
        return super().read_range(path, offset, length)


class Woken:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def wake(self, queue_id: int) -> None:
        self.event.set()

    def withdrawn(self, queue_ids: list[int]) -> None:
        return None

    def records_lost(self, *_args: Any) -> None:
        return None


def test_a_queues_page_reads_run_in_the_worker_not_on_the_loop(tmp_path: Path) -> None:
    async def main() -> None:
        fileio = ThreadNotingFileIO()
        worker = PageIOWorker()
        pages = PageStore(tmp_path, "deep", page_size_bytes=64 * 1024, fileio=fileio, page_io=worker)
        pages.open()
        pages.start(asyncio.get_running_loop())
        ids = itertools.count(1)
        store = FilePagedQueueStore(pages, CursorRecords(MemoryStore(), lambda: next(ids)))
        listener = store.listener = Woken()
        for n in range(1, 201):
            store.append([PagedRecord(n, (QUEUE,), True, b"x" * 2000)])
        await pages.flush()
        queue = store.queue(QUEUE)
        got: list[int] = []
        waits = 0
        while len(got) < 200:
            entry = queue.take()
            if entry is None:
                assert queue.reading
                listener.event.clear()
                await asyncio.wait_for(listener.event.wait(), 5)
                waits += 1
                continue
            got.append(entry[2].message_id)
        assert got == list(range(1, 201))
        assert len(pages.pages()) > 3 and waits >= 1
        assert fileio.readers and threading.get_ident() not in fileio.readers
        await pages.close()
        worker.shutdown()

    asyncio.run(main())


def records(count: int, size: int) -> Iterator[tuple[int, PagedRecord]]:
    for n in range(count):
        yield n, PagedRecord(n + 1, (QUEUE,), True, b"y" * size)


def test_a_chunk_is_bounded_by_bytes_not_by_the_page() -> None:
    source = records(100, 100 * 1024)
    chunk, ended = read_chunk(source)
    assert not ended and len(chunk) == 3  # ~CHUNK_BYTES of messages, not the whole page
    assert sum(len(r.message) for _o, r in chunk) < CHUNK_BYTES + 100 * 1024
    rest, ended = read_chunk(records(2, 10))
    assert ended and [o for o, _r in rest] == [0, 1]


def test_the_next_chunk_is_read_while_this_one_is_consumed() -> None:
    async def main() -> None:
        io = QueuedPageIO()
        arrived: list[bool] = []
        ahead = ReadAhead(records(10, 100 * 1024), io, lambda: arrived.append(True))
        assert list(ahead) == [] and ahead.pending and len(io.queued) == 1
        io.run(1)
        await asyncio.sleep(0)
        assert arrived == [True] and not ahead.pending
        assert next(ahead)[0] == 0
        assert len(io.queued) == 1  # the second chunk is on its way before the first is used
        io.run(1)
        assert [o for o, _r in ahead] == [1, 2, 3, 4, 5]  # on from the first chunk to the second
        assert len(io.queued) == 1  # and the third is read ahead, never more than one
        ahead.close()
        io.run(1)
        await asyncio.sleep(0)
        assert arrived == [True]  # closed: a chunk landing after is dropped

    asyncio.run(main())


def test_inline_reads_are_synchronous() -> None:
    ahead = ReadAhead(records(5, 10), InlinePageIO(), lambda: None)
    assert [o for o, _r in ahead] == [0, 1, 2, 3, 4] and not ahead.pending


def test_a_read_cancelled_at_shutdown_ends_the_reader() -> None:
    async def main() -> None:
        io = QueuedPageIO()
        ahead = ReadAhead(records(3, 10), io, lambda: None)
        io.queued.pop()[1].cancel()
        assert list(ahead) == [] and not ahead.pending

    asyncio.run(main())

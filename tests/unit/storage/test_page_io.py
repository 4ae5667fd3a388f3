"""Page reads off the event loop (storage/paging/page_io.py): a queue's in-order reading of
page files reads their bytes in the page-I/O worker, a bounded range at a time, one range read
ahead; the records are decoded on the loop."""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path
from typing import Any

import pytest

from pagemq.storage.api import MemoryStore
from pagemq.storage.fileio import RealFileIO
from pagemq.storage.paging import page_store as page_store_module
from pagemq.storage.paging.file_queue_store import FilePagedQueueStore
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.page_io import (
    AHEAD,
    CHUNK_BYTES,
    InlinePageIO,
    PageIOWorker,
    QueuedPageIO,
    ReadAhead,
    ReadSize,
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


def test_records_are_decoded_on_the_loop_only_the_bytes_are_read_in_the_worker(
        tmp_path: Path, monkeypatch: Any) -> None:
    decoders: set[int] = set()
    real = page_store_module.read_frames

    def noting(*args: Any, **kwargs: Any) -> Any:
        decoders.add(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(page_store_module, "read_frames", noting)

    async def main() -> None:
        fileio = ThreadNotingFileIO()
        worker = PageIOWorker()
        pages = PageStore(tmp_path, "deep", page_size_bytes=1 << 20, fileio=fileio, page_io=worker)
        pages.open()
        pages.start(asyncio.get_running_loop())
        pages.append([PagedRecord(n, (QUEUE,), True, b"x" * 2000) for n in range(1, 501)])
        await pages.flush()
        arrived = asyncio.Event()
        got: list[int] = []
        for entry in pages.read_page_ahead(1, 0, size=ReadSize(64 * 1024), arrived=arrived.set):
            if entry is None:  # the next range is being read
                await asyncio.wait_for(arrived.wait(), 5)
                arrived.clear()
                continue
            got.append(entry[1].message_id)
        assert got == list(range(1, 501))
        assert fileio.readers and threading.get_ident() not in fileio.readers
        assert decoders == {threading.get_ident()}
        await pages.close()
        worker.shutdown()

    asyncio.run(main())


def file_bytes(size: int) -> bytes:
    return bytes(n % 251 for n in range(size))


def test_the_next_ranges_are_read_while_this_one_is_decoded() -> None:
    async def main() -> None:
        data = file_bytes(20_000)
        io = QueuedPageIO()
        arrived: list[bool] = []
        ahead = ReadAhead(lambda at, n: data[at:at + n], len(data), io, lambda: arrived.append(True))
        assert ahead.fetch(0, 4096) is None and ahead.pending and len(io.queued) == 1
        io.run(1)
        await asyncio.sleep(0)
        assert arrived == [True] and not ahead.pending
        assert ahead.fetch(0, 4096) == data[:4096]
        assert len(io.queued) == AHEAD  # the next ranges are on their way before this one is decoded
        io.run(1)
        assert ahead.fetch(4096, 4096) == data[4096:8192]
        assert len(io.queued) == AHEAD  # topped up, never more
        io.run()
        for at in range(8192, 16384, 4096):
            assert ahead.fetch(at, 4096) == data[at:at + 4096]
            io.run()
        assert ahead.fetch(16384, 3616) == data[16384:]
        assert io.queued == []  # the end of the readable part: nothing more is read
        assert arrived == [True]  # ranges already in are taken without a wake

    asyncio.run(main())


def test_a_range_other_than_the_one_read_ahead_is_read_when_asked() -> None:
    async def main() -> None:
        data = file_bytes(10_000)
        io = QueuedPageIO()
        ahead = ReadAhead(lambda at, n: data[at:at + n], len(data), io, lambda: None)
        assert ahead.fetch(0, 1000) is None
        io.run()
        assert ahead.fetch(0, 1000) == data[:1000]  # (1000, 1000) is read ahead now
        assert ahead.fetch(500, 9500) is None  # a damaged stretch read whole, say
        io.run()
        assert ahead.fetch(500, 9500) == data[500:]

    asyncio.run(main())


def test_after_the_rest_of_a_long_frame_the_usual_ranges_are_read_ahead() -> None:
    """The reader asks once for the rest of a frame longer than its range; what it asks next,
    and what is read ahead, are ranges of its usual size (no read thrown away)."""
    async def main() -> None:
        data = file_bytes(10_000)
        io = QueuedPageIO()
        asked: list[tuple[int, int]] = []

        def read(at: int, n: int) -> bytes:
            asked.append((at, n))
            return data[at:at + n]

        ahead = ReadAhead(read, len(data), io, lambda: None, ReadSize(1000))
        assert ahead.fetch(0, 3500) is None  # the rest of a long frame
        io.run()
        assert ahead.fetch(0, 3500) == data[:3500]
        io.run()
        assert asked == [(0, 3500), (3500, 1000), (4500, 1000)]
        assert ahead.fetch(3500, 1000) == data[3500:4500]  # read ahead, not asked again
        assert ahead.fetch(4500, 1000) == data[4500:5500]
        io.run()
        assert all(n == 1000 for _at, n in asked[1:])

    asyncio.run(main())


def test_a_range_landing_after_close_wakes_nobody() -> None:
    async def main() -> None:
        io = QueuedPageIO()
        arrived: list[bool] = []
        ahead = ReadAhead(lambda at, n: b"z" * n, 1 << 20, io, lambda: arrived.append(True))
        assert ahead.fetch(0, 100) is None
        ahead.close()
        io.run()
        await asyncio.sleep(0)
        assert arrived == [] and not ahead.pending

    asyncio.run(main())


def test_inline_reads_are_synchronous() -> None:
    data = file_bytes(300)
    ahead = ReadAhead(lambda at, n: data[at:at + n], len(data), InlinePageIO(), lambda: None)
    assert ahead.fetch(0, 100) == data[:100] and ahead.fetch(100, 100) == data[100:200]
    assert not ahead.pending


def test_a_read_cancelled_at_shutdown_ends_the_reader() -> None:
    async def main() -> None:
        io = QueuedPageIO()
        ahead = ReadAhead(lambda at, n: b"z" * n, 1 << 20, io, lambda: None)
        assert ahead.fetch(0, 100) is None
        io.queued.pop()[1].cancel()
        assert ahead.fetch(0, 100) == b"" and not ahead.pending

    asyncio.run(main())


@pytest.mark.parametrize("range_bytes", [64, 700, 4096, CHUNK_BYTES])
@pytest.mark.parametrize("damaged", [False, True])
def test_read_ahead_reads_what_a_read_on_the_loop_reads(
        tmp_path: Path, range_bytes: int, damaged: bool) -> None:
    """Ranges of any size, frames longer than a range, a damaged frame mid-page: the records
    read through the worker's ranges are those read at once."""
    sizes = [10, 3000, 50, 9000, 200, 1, 5000, 700] * 3

    async def write() -> None:
        pages = PageStore(tmp_path, "mixed", page_size_bytes=1 << 20)
        pages.open()
        pages.start(asyncio.get_running_loop())
        for n, size in enumerate(sizes):
            pages.append([PagedRecord(n + 1, (QUEUE,), True, bytes([n]) * size)])
        await pages.flush()
        await pages.close()

    asyncio.run(write())
    if damaged:
        (page,) = tmp_path.glob("*/*.page")
        data = bytearray(page.read_bytes())
        data[len(data) // 2] ^= 0xFF
        page.write_bytes(bytes(data))

    async def read() -> tuple[list[int], list[int]]:
        io = QueuedPageIO()
        pages = PageStore(tmp_path, "mixed", page_size_bytes=1 << 20, page_io=io)
        pages.open()
        pages.start(asyncio.get_running_loop())
        at_once = [r.message_id for _o, r in pages.read_page(1)]
        ahead: list[int] = []
        for entry in pages.read_page_ahead(1, 0, size=ReadSize(range_bytes), arrived=lambda: None):
            if entry is None:
                assert io.run() >= 1
            else:
                ahead.append(entry[1].message_id)
        await pages.close()
        return at_once, ahead

    at_once, ahead = asyncio.run(read())
    assert ahead == at_once
    assert (len(at_once) < len(sizes)) == damaged

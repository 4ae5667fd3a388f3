"""Page reads off the event loop: the page-I/O worker and a queue's read-ahead over it.

A page is up to `page-size-bytes` (10 MiB by default): reading and decoding one on the loop
stalled every connection for hundreds of milliseconds while a consumer drained a deep paged
queue. So a queue's in-order reading (`queue_cursor.QueueCursor.peek`) reads through a
`ReadAhead`: the page store's record iterator is advanced in the worker a chunk at a time
(~`CHUNK_BYTES` of messages), the chunk is handed back to the loop, and the next chunk is
read while this one is consumed. While the queue waits for a chunk its reading answers
"nothing now" and the store's listener wakes it when the chunk is in.

Ownership: `PageIO` is one worker thread (`pagemq-page-io`) shared by every address of a
broker (`server/app.py` makes it and shuts it down after the page stores closed). The worker
only reads page files and decodes frames into `PagedRecord`s, one chunk of one iterator at a
time (an iterator is never advanced by two threads at once); every piece of bookkeeping stays
on the loop. What a reader may see is fixed on the loop when it is made (`PageStore.read_page`).

A seam for tests: anything with `submit` will do; `InlinePageIO` runs the read at once on
the caller's thread; `QueuedPageIO` holds reads until the test runs them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from pagemq.storage.paging.page_format import PagedRecord

__all__ = ["CHUNK_BYTES", "InlinePageIO", "PageIO", "PageIOWorker", "QueuedPageIO", "ReadAhead", "ReadSize"]

CHUNK_BYTES = 256 * 1024
"""Messages read per chunk: with one chunk read ahead, a reading queue holds at most about
twice this of records it has not taken yet (whatever the page size)."""

RECORD_OVERHEAD = 32
"""Bytes a record counts for besides its message, so chunks of tiny messages stay bounded."""

T = TypeVar("T")


class ReadSize:
    """How many bytes a queue's reading reads at a time (page file reads, read-ahead chunks):
    shared by its reader and read-ahead, so a change applies to the next read of either."""

    __slots__ = ("bytes",)

    def __init__(self, size: int = CHUNK_BYTES) -> None:
        self.bytes = size

Record = tuple[int, PagedRecord]
Chunk = tuple[list[Record], bool]


class PageIO(Protocol):
    """Runs a page read somewhere; the future may be done at once (an inline seam)."""

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]: ...


class PageIOWorker:
    """The page-I/O worker thread of a broker, shared by its addresses."""

    def __init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="pagemq-page-io")

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        return self._executor.submit(fn)

    def shutdown(self) -> None:
        """Reads still queued are dropped (their readers are gone with the page stores)."""
        self._executor.shutdown(wait=True, cancel_futures=True)


class InlinePageIO:
    """Reads at once on the caller's thread: no worker (tools, tests, the memory store)."""

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            future.set_result(fn())
        except BaseException as error:  # handed to whoever takes the result, as a worker would
            future.set_exception(error)
        return future


class QueuedPageIO:
    """Reads wait until `run` does them on the caller's thread: a seam that makes "nothing
    now, woken later" deterministic in tests (tests/contract, tests/unit)."""

    def __init__(self) -> None:
        self.queued: list[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = []

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.queued.append((fn, future))
        return future

    def run(self, count: int | None = None) -> int:
        """Do the oldest `count` reads submitted (all: None); how many were done."""
        todo = self.queued[:count] if count is not None else list(self.queued)
        del self.queued[:len(todo)]
        for fn, future in todo:
            future.set_result(fn())
        return len(todo)


def _hand_back(loop: asyncio.AbstractEventLoop, landed: Callable[[concurrent.futures.Future[Chunk]], None],
               done: concurrent.futures.Future[Chunk]) -> None:
    """In the worker: the chunk is in, tell the loop (unless it is gone: shutdown)."""
    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(landed, done)
        except RuntimeError:  # closed meanwhile
            pass


def read_chunk(records: Iterator[Record], budget: int = CHUNK_BYTES) -> Chunk:
    """The next records of `records` up to about `budget` bytes; True once it is exhausted.
    Runs in the worker: reads and decodes only."""
    chunk: list[Record] = []
    size = 0
    for entry in records:
        chunk.append(entry)
        size += len(entry[1].message) + RECORD_OVERHEAD
        if size >= budget:
            return chunk, False
    return chunk, True


class ReadAhead:
    """A page's records for one queue's reading, read a chunk ahead in the page-I/O worker.

    An iterator that ends either when the page's records (as readable when it was made) are
    all read (`pending` False) or when the next chunk is still being read (`pending` True:
    `arrived` is called on the loop once it is in). Loop-only but for the chunk reads.
    """

    __slots__ = ("_arrived", "_buffer", "_io", "_next", "_records", "_size", "_waiting")

    def __init__(self, records: Iterator[Record], io: PageIO, arrived: Callable[[], None],
                 size: ReadSize | None = None) -> None:
        self._records = records
        self._size = size if size is not None else ReadSize()
        self._io = io
        self._arrived = arrived
        self._buffer: deque[Record] = deque()
        self._next: concurrent.futures.Future[Chunk] | None = None
        self._waiting = False
        self._read_next()

    @property
    def pending(self) -> bool:
        """The buffer ran out while the next chunk is being read: `arrived` follows."""
        return self._waiting

    def _read_next(self) -> None:
        records, chunk_bytes = self._records, self._size.bytes
        future = self._io.submit(lambda: read_chunk(records, chunk_bytes))
        self._next = future
        if not future.done():
            loop = asyncio.get_running_loop()
            future.add_done_callback(lambda done: _hand_back(loop, self._landed, done))

    def _landed(self, future: concurrent.futures.Future[Chunk]) -> None:
        if future is self._next and self._waiting:
            self._waiting = False
            self._arrived()

    def close(self) -> None:
        """The queue stopped reading through this: no `arrived` for a chunk still in flight."""
        self._next = None
        self._waiting = False
        self._buffer.clear()

    def __iter__(self) -> ReadAhead:
        return self

    def __next__(self) -> Record:
        buffer = self._buffer
        while not buffer:
            future = self._next
            if future is None:
                raise StopIteration  # read out
            if not future.done():
                self._waiting = True
                raise StopIteration
            self._next = None
            self._waiting = False  # in before its hand-back ran: that one is ignored
            if future.cancelled():
                raise StopIteration  # the worker shut down (broker stop): nothing more is read
            chunk, ended = future.result()  # a read's error surfaces here, on the loop
            buffer.extend(chunk)
            if not ended:
                self._read_next()  # read the next chunk while this one is consumed
        return buffer.popleft()

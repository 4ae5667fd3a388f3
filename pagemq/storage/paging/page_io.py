"""Page reads off the event loop: the page-I/O worker and a reader's read-ahead over it.

A page is up to `page-size-bytes` (10 MiB by default): reading one on the loop stalled every
connection while a consumer drained a deep paged queue. So a queue's in-order reading
(`queue_cursor.QueueCursor.peek`) reads the page file through a `ReadAhead`: the worker reads
the file's bytes a range at a time (~`CHUNK_BYTES`), the range is handed back to the loop,
and the next ranges are read while the loop decodes this one. While the reader waits for a
range its iterator yields None ("nothing now") and `arrived` wakes it once the range is in.

Only the read runs in the worker, not the decoding of frames into records: the worker needs
the GIL for a few microseconds per range, so it neither slows the loop nor waits long for the
loop to let go of it. (It once decoded too: every chunk then waited a switch interval or more
for the GIL while the loop was busy, and a draining queue sat idle half the time, waiting
for its next chunk.)

Ownership: `PageIO` is one worker thread (`pagemq-page-io`) shared by every address of a
broker (`server/app.py` makes it and shuts it down after the page stores closed). The worker
only reads byte ranges of page files; decoding and every piece of bookkeeping stay on the
loop. What a reader may see is fixed on the loop when it is made (`PageStore.read_page`).

A seam for tests: anything with `submit` will do; `InlinePageIO` runs the read at once on
the caller's thread; `QueuedPageIO` holds reads until the test runs them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

__all__ = [
    "AHEAD", "CHUNK_BYTES", "InlinePageIO", "PageIO", "PageIOWorker", "QueuedPageIO", "ReadAhead", "ReadSize",
]

CHUNK_BYTES = 256 * 1024
"""Bytes of a page file read at a time: with `AHEAD` ranges read ahead, a reading queue holds
at most about `AHEAD` + 1 times this of page data it has not decoded yet (whatever the page
size)."""

AHEAD = 2
"""Ranges a reader has the worker read ahead of the one it decodes: the worker, woken for a
read, waits for the GIL while the loop runs (a few milliseconds), about as long as the loop
takes to decode and deliver a range; two in flight keep a draining queue from waiting."""

T = TypeVar("T")


class ReadSize:
    """How many bytes a queue's reading reads at a time (page file reads, read-ahead chunks):
    shared by its reader and read-ahead, so a change applies to the next read of either."""

    __slots__ = ("bytes",)

    def __init__(self, size: int = CHUNK_BYTES) -> None:
        self.bytes = size


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


def _hand_back(loop: asyncio.AbstractEventLoop, landed: Callable[[concurrent.futures.Future[bytes]], None],
               done: concurrent.futures.Future[bytes]) -> None:
    """In the worker: the range is in, tell the loop (unless it is gone: shutdown)."""
    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(landed, done)
        except RuntimeError:  # closed meanwhile
            pass


class ReadAhead:
    """One page file's bytes for one reader, read in the page-I/O worker `AHEAD` ranges ahead.

    `fetch(offset, length)` answers the bytes at `offset` (fewer at the end of the file), or
    None while they are being read (`pending`: `arrived` is called on the loop once they are
    in). Once a range is handed over, the next ones (same length, up to `limit`) are read
    while the reader decodes this one: a reader that reads on sequentially rarely waits. Any
    other range (a damaged stretch read whole, a frame longer than a range) is read when
    asked. Loop-only but for the reads.
    """

    __slots__ = ("_ahead", "_arrived", "_io", "_limit", "_read", "_size", "pending")

    def __init__(self, read: Callable[[int, int], bytes], limit: int, io: PageIO,
                 arrived: Callable[[], None], size: ReadSize | None = None) -> None:
        self._read = read
        self._limit = limit
        self._io = io
        self._arrived = arrived
        self._size = size  # the reader's usual range (None: the length last asked for)
        # (offset, length, read) of the ranges asked of the worker, in file order
        self._ahead: deque[tuple[int, int, concurrent.futures.Future[bytes]]] = deque()
        self.pending = False

    def fetch(self, offset: int, length: int) -> bytes | None:
        ahead = self._ahead
        if not ahead or ahead[0][0] != offset or ahead[0][1] != length:
            ahead.clear()  # not what was read ahead: read what is asked
            self._submit(offset, length)
        future = ahead[0][2]
        if not future.done():
            self.pending = True
            return None
        ahead.popleft()
        self.pending = False  # in before its hand-back ran: that one is ignored
        if future.cancelled():
            ahead.clear()
            return b""  # the worker shut down (broker stop): nothing more is read
        data = future.result()  # a read's error surfaces here, on the loop
        if len(data) < length:
            ahead.clear()  # the file ends here
            return data
        end = ahead[-1][0] + ahead[-1][1] if ahead else offset + length
        # The reader's next ranges are of its usual size (the rest of a frame longer than a
        # range is asked for once, not read ahead).
        usual = self._size.bytes if self._size is not None else length
        while len(ahead) < AHEAD and end < self._limit:  # read on while this is decoded
            size = min(usual, self._limit - end)
            self._submit(end, size)
            end += size
        return data

    def _submit(self, offset: int, length: int) -> None:
        read = self._read
        future = self._io.submit(lambda: read(offset, length))
        self._ahead.append((offset, length, future))
        if not future.done():
            loop = asyncio.get_running_loop()
            future.add_done_callback(lambda done: _hand_back(loop, self._landed, done))

    def _landed(self, future: concurrent.futures.Future[bytes]) -> None:
        if self.pending and self._ahead and future is self._ahead[0][2]:
            self.pending = False
            self._arrived()

    def close(self) -> None:
        """The reader is done with (or gave up) the page: no `arrived` for a read in flight."""
        self._ahead.clear()
        self.pending = False

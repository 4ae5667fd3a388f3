"""Group commit: many appends, one write() and one fsync (Artemis `TimedBuffer`).

The event loop encodes records and hands the bytes to `GroupCommitWriter.append`, which
only extends an in-memory buffer. A writer thread takes the whole buffer, writes it with
one write() per data file, fsyncs once and resolves the batch's single future on the loop.
While that fsync runs, new appends pile up into the next batch, so the batch grows with
the load and throughput approaches fsyncs/s times batch size (Artemis' TimedBuffer does the
same with a timer; here the fsync itself is the timer, which adds no latency when idle).

A batch that finds no space (ENOSPC, EDQUOT: `disk_space.py`) is not a broken journal: every
file it wrote to is cut back to its size before the batch (the files stay well-formed), its
future fails (its producers hear of it: their messages are not stored, and the broker takes
them back), and the batch's bytes are kept and written again, ahead of what was appended
since, every `RETRY_PERIOD` until there is room. The journal's index was updated when the
records were appended, so writing the same bytes later keeps the index and the files in
agreement; what the loop did about the failed records (acknowledgements that take a refused
message back) is appended behind them. `on_space` tells the loop, once, that the journal is
stalled, and again when it writes. Any other failure is fatal: the journal refuses appends.

Ownership: `append`, `flush_future`, `start` and `stop` run on
the event loop thread; `_run` and everything it calls run on the writer thread, which alone
touches the open file handle. `_cond` guards the shared fields listed in `__init__`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from pagemq.storage.disk_space import is_no_space
from pagemq.storage.fileio import AppendFile, FileIO

log = logging.getLogger("pagemq.journal")

__all__ = ["RETRY_PERIOD", "GroupCommitWriter", "JournalError"]

RETRY_PERIOD = 1.0  # seconds between tries of a batch that found no space


class JournalError(OSError):
    """The journal refuses appends: a write or fsync failed, or it is closed."""


def _refusal(error: JournalError) -> JournalError:
    """A fresh exception per refusal: one shared object would pile up tracebacks."""
    refused = JournalError(error.errno, f"journal refuses appends after a failure: {error.strerror}")
    refused.__cause__ = error
    return refused


def _settle(future: asyncio.Future[None] | None, error: BaseException | None) -> None:
    if future is None or future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class GroupCommitWriter:
    """Turns appends into batches; each batch is one write per file and one fsync."""

    def __init__(
        self,
        fileio: FileIO,
        directory: Path,
        path_for: Callable[[int], Path],
        *,
        sync: bool,
        durable_seq: int = 0,
    ) -> None:
        self._fileio = fileio
        self._directory = directory
        self._path_for = path_for
        self._sync = sync
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        # guarded by _cond:
        self._segments: list[tuple[int, bytearray]] = []
        self._future: asyncio.Future[None] | None = None
        self._last_seq = durable_seq
        self._pending_bytes = 0
        self._in_flight = False
        self._closing = False
        self.error: JournalError | None = None
        self.stalled: JournalError | None = None  # the batch kept for a retry found no space
        # writer thread: futures of appends made while stalled whose retry failed too: they
        # wait for the next batch that is written (or for the final failure)
        self._carried: list[asyncio.Future[None]] = []
        self.durable_seq = durable_seq
        # Told on the loop when a batch found no space (the error) and when the kept batch
        # is written (None); see the module docstring.
        self.on_space: Callable[[OSError | None], None] = lambda _error: None
        # writer thread only (read by the loop for stats):
        self._handle: AppendFile | None = None
        self._handle_no = -1
        self.flushes = 0
        self.batches = 0

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Loop thread. The daemon flag lets a crashed broker exit; close() drains first."""
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="pagemq-journal-writer", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Loop thread. Raise what `append` would for a failed or stopped writer, without
        appending: for an op the journal gathers now and writes later."""
        if self.error is not None:
            raise _refusal(self.error)
        if self._closing or self._loop is None:
            raise JournalError("journal is not running (not started, or closed)")

    def append(self, file_no: int, data: bytes, last_seq: int, *, sync: bool) -> asyncio.Future[None] | None:
        """Loop thread. Cheap by design: extend the buffer, maybe create the batch future."""
        with self._cond:
            if self.error is not None:
                raise _refusal(self.error)
            if self._closing or self._loop is None:
                raise JournalError("journal is not running (not started, or closed)")
            idle = not self._segments and self._future is None  # the writer may be waiting
            if self._segments and self._segments[-1][0] == file_no:
                self._segments[-1][1].extend(data)
            else:
                self._segments.append((file_no, bytearray(data)))
            self._last_seq = last_seq
            self._pending_bytes += len(data)
            future = None
            if sync:
                future = self._future
                if future is None or future.cancelled():  # a waiter's cancel must not void the batch
                    future = self._future = self._loop.create_future()
            if idle:
                self._cond.notify()
            return future

    def flush_future(self) -> asyncio.Future[None]:
        """Loop thread. Resolves once everything appended so far is durable."""
        loop = self._loop or asyncio.get_running_loop()
        with self._cond:
            if self.error is not None:
                failed = loop.create_future()
                failed.set_exception(_refusal(self.error))
                return failed
            if (not self._segments and not self._in_flight) or self._loop is None:
                done = loop.create_future()
                done.set_result(None)
                return done
            if self._future is None or self._future.cancelled():
                self._future = loop.create_future()
            self._cond.notify()
            return self._future

    async def stop(self) -> None:
        """Loop thread. Lets the writer drain what is buffered, then joins it."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    # ----- writer thread ------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._segments and self._future is None and not self._closing:
                    self._cond.wait()
                if not self._segments and self._future is None:
                    break
                segments, future, last_seq = self._segments, self._future, self._last_seq
                self._segments, self._future, self._pending_bytes = [], None, 0
                self._in_flight = True
            error, kept = self._write_batch(segments)
            if kept and not self._closing:
                self._keep(segments, future, error)
                continue
            recovered = False
            with self._cond:
                self._in_flight = False
                stray = None
                if error is None:
                    self.durable_seq = last_seq
                    recovered, self.stalled = self.stalled is not None, None
                else:
                    self.error = error
                    stray, self._future, self._segments = self._future, None, []
            if recovered:  # before its waiters hear: they may look at `stalled`
                log.warning("journal: the batch kept for want of space is written; appends "
                            "are durable again")
                self._tell_space(None)
            self._resolve(future, error)
            carried, self._carried = self._carried, []
            for waiting in carried:
                self._resolve(waiting, error)
            if error is not None:
                self._resolve(stray, error)
                break
        self._close_handle()

    def _keep(self, segments: list[tuple[int, bytearray]], future: asyncio.Future[None] | None,
              error: JournalError | None) -> None:
        """A batch found no space and was cut back: fail its future, put its bytes in front
        of what was appended since, and wait a while before writing them again."""
        assert error is not None
        with self._cond:
            self._in_flight = False
            # Fresh buffers: a view of the failed ones may live on in the write's traceback,
            # and a bytearray with a live view cannot grow.
            merged = [(file_no, bytearray(data)) for file_no, data in segments]
            for file_no, data in self._segments:
                if merged and merged[-1][0] == file_no:
                    merged[-1][1].extend(data)
                else:
                    merged.append((file_no, data))
            self._segments = merged
            self._pending_bytes = sum(len(data) for _, data in merged)
            first = self.stalled is None
            self.stalled = error
        if first:  # the batch's waiters hear of it; appends made since keep waiting
            self._resolve(future, error)
        elif future is not None:  # a retry failed: its waiters wait for the next one
            self._carried.append(future)
        if first:
            log.error("journal: %s; the batch is kept and written again once there is space "
                      "(its producers were told); no message is taken meanwhile", error)
            self._tell_space(error)
        with self._cond:
            if not self._closing:
                self._cond.wait(RETRY_PERIOD)

    def _write_batch(self, segments: list[tuple[int, bytearray]]) -> tuple[JournalError | None, bool]:
        """One write per file segment, then one fsync; returns the failure, if any, and
        whether the batch was cut back for a retry (it found no space)."""
        step, path, offset, created = "write", self._directory, 0, False
        before: dict[int, tuple[Path, int]] = {}  # file number -> (path, size before the batch)
        try:
            for file_no, data in segments:
                if file_no != self._handle_no:
                    step = "roll"
                    self._roll(file_no)
                    created = True
                assert self._handle is not None
                before.setdefault(file_no, (self._handle.path, self._handle.size))
                step, path, offset = "write", self._handle.path, self._handle.size
                self._handle.write(data)
            if self._sync and segments and self._handle is not None:
                step, path, offset = "fsync", self._handle.path, self._handle.size
                self._handle.fsync()
                self.flushes += 1
            if created:
                step, path = "directory fsync", self._directory
                self._fileio.fsync_directory(self._directory)
        except OSError as exc:
            size = sum(len(data) for _, data in segments)
            error = JournalError(exc.errno, f"journal {step} failed on {path} at offset {offset}: {exc}")
            error.__cause__ = exc
            if is_no_space(exc) and self._cut_back(before):
                if self.stalled is not None:
                    log.debug("journal: still no space for the kept batch (%d bytes): %s", size, exc)
                return error, True
            log.error("journal %s failed: %s at offset %d (batch of %d bytes): %s; "
                      "the journal refuses further appends", step, path, offset, size, exc)
            return error, False
        self.batches += 1
        return None, False

    def _cut_back(self, before: dict[int, tuple[Path, int]]) -> bool:
        """Every file the failed batch wrote to back to its size before it (a file it made
        is removed): the files end on a whole record, as if the batch was never written.
        False when that failed too (then the journal refuses appends, as for any failure)."""
        self._close_handle()
        removed = False
        try:
            for path, size in before.values():
                with contextlib.suppress(FileNotFoundError):
                    if size == 0:
                        self._fileio.remove(path)
                        removed = True
                    elif self._fileio.size(path) > size:
                        self._fileio.truncate(path, size)
            if removed:
                self._fileio.fsync_directory(self._directory)
        except OSError as exc:
            log.error("journal: cannot cut a failed batch back (%s); the torn tail is cut at "
                      "the next start", exc)
            return False
        return True

    def _tell_space(self, error: OSError | None) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            self._loop.call_soon_threadsafe(self.on_space, error)

    def _roll(self, file_no: int) -> None:
        """Make the previous file durable before the next one starts, whatever `sync` says.

        That keeps a torn tail possible only in the newest file, which is the one file
        recovery may truncate; it costs one fsync per data file.
        """
        if self._handle is not None:
            self._handle.fsync()
            self.flushes += 1
            self._handle.close()
        path = self._path_for(file_no)
        self._handle = self._fileio.open_append(path)
        self._handle_no = file_no

    def _resolve(self, future: asyncio.Future[None] | None, error: JournalError | None) -> None:
        if future is None or self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is already closed: nobody waits
            self._loop.call_soon_threadsafe(_settle, future, error)

    def _close_handle(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None
            self._handle_no = -1

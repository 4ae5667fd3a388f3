"""Group commit: many appends, one write() and one fsync (Artemis `TimedBuffer`).

The event loop encodes records and hands the bytes to `GroupCommitWriter.append`, which
only extends an in-memory buffer. A writer thread takes the whole buffer, writes it with
one write() per data file, fsyncs once and resolves the batch's single future on the loop.
While that fsync runs, new appends pile up into the next batch, so the batch grows with
the load and throughput approaches fsyncs/s times batch size (Artemis' TimedBuffer does the
same with a timer; here the fsync itself is the timer, which adds no latency when idle).

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

from pagemq.storage.fileio import AppendFile, FileIO

log = logging.getLogger("pagemq.journal")

__all__ = ["GroupCommitWriter", "JournalError"]


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
        self.durable_seq = durable_seq
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
            error = self._write_batch(segments)
            with self._cond:
                self._in_flight = False
                stray = None
                if error is None:
                    self.durable_seq = last_seq
                else:
                    self.error = error
                    stray, self._future, self._segments = self._future, None, []
            self._resolve(future, error)
            if error is not None:
                self._resolve(stray, error)
                break
        self._close_handle()

    def _write_batch(self, segments: list[tuple[int, bytearray]]) -> JournalError | None:
        """One write per file segment, then one fsync; returns the failure, if any."""
        step, path, offset, created = "write", self._directory, 0, False
        try:
            for file_no, data in segments:
                if file_no != self._handle_no:
                    step = "roll"
                    self._roll(file_no)
                    created = True
                assert self._handle is not None
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
            log.error("journal %s failed: %s at offset %d (batch of %d bytes): %s; "
                      "the journal refuses further appends", step, path, offset, size, exc)
            error = JournalError(exc.errno, f"journal {step} failed on {path} at offset {offset}: {exc}")
            error.__cause__ = exc
            return error
        self.batches += 1
        return None

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

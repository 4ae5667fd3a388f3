"""The timed page writer: one per page store, one fsync per sync batch, run by a shared pool.

The event loop only appends encoded frames to the pending batch (a bytearray per page, under
a lock held for microseconds) and schedules the writer in the broker's `PageSyncPool`
(page_sync_pool.py: a few threads shared by every address, not a thread per address). A
pool thread swaps the batch out at most once per `sync_timeout`, writes it with one `write`
per page touched, fsyncs once, then resolves the batch's single future on the loop. This is
Artemis 2.40's PageTimedWriter idea (artemis-server .../paging/impl/PageTimedWriter.java):
producers' completions wait for the covering sync; while one batch syncs, the next fills.

A batch is all or nothing: if a write or the fsync fails, every page the batch wrote to is
truncated back to its size before the batch, the batch's future carries the OSError, and
those pages accept no more writes (the store rolls to a new page and re-summarises the
failed one from what is really on disk). Later batches that still hold writes for a failed
page fail the same way, so nothing is lost without an error and a log line.

Ownership: fields under `_cond` are shared; `_handles`, `_sizes`, `_failed`, `_dir_dirty`
and the counters belong to the one pool thread running the writer's batch (`_busy`: one at a
time), or to the caller when not started.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pagemq.storage.disk_space import is_no_space
from pagemq.storage.fileio import AppendFile, FileIO
from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    PageSummaryRecord,
    encode_file_header,
    page_file_name,
    scan_page,
    summary_file_name,
)
from pagemq.storage.paging.page_sync_pool import PageSyncPool, default_pool

__all__ = ["ADDRESS_FILE", "FOLDER_STAGING_SUFFIX", "HIGH_WATER_FILE", "PageWriter"]

log = logging.getLogger("pagemq.paging")

ADDRESS_FILE = "address.txt"
# Highest page number ever deleted, kept so page numbers are never reused: a cursor record
# in the journal naming (page, ordinal) of a deleted page must never match a new page.
HIGH_WATER_FILE = "last-page"
DAMAGED_SUFFIX = ".damaged"  # a page set aside: unreadable header, or damaged bytes when done with
# A new address folder is made under this suffix (folder names end in hex digits, never in
# it), with its address.txt inside, then renamed into place: see PageWriter._create_folder.
FOLDER_STAGING_SUFFIX = ".tmp"
_URGENT_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class WriteOp:
    page_no: int
    # The frames in order, joined by the writer thread: appending a frame to a growing
    # buffer on the event loop cost a copy of every byte written (and of the buffer so far).
    frames: list[bytes]
    size: int
    records: int
    non_persistent: int


@dataclass(slots=True)
class CloseOp:
    page_no: int
    summary: PageSummaryRecord
    rescan: bool = False  # damage was found reading it: re-count it from disk, flag it damaged


@dataclass(slots=True)
class DeleteOp:
    page_no: int
    future: asyncio.Future[None] | None = None  # resolved once the removal is durable
    set_aside: bool = False  # the page holds damaged bytes: rename it *.page.damaged, keep it


Op = WriteOp | CloseOp | DeleteOp


@dataclass(slots=True)
class _Batch:
    ops: list[Op] = field(default_factory=list)
    future: asyncio.Future[None] | None = None  # persistent appends: write and fsync errors
    flush_future: asyncio.Future[None] | None = None  # flush(): also close/delete errors
    needs_sync: bool = False
    urgent: bool = False
    bytes: int = 0


class BatchFailed(OSError):
    """A batch was not stored; `pages` are the pages it touched (now closed to writes)."""

    def __init__(self, cause: OSError, pages: set[int], detail: str) -> None:
        super().__init__(cause.errno or errno.EIO, f"{detail}: {cause.strerror or cause}")
        self.pages = pages
        self.__cause__ = cause


class PageWriter:
    """Writes, closes and deletes one address's page files, in the order they were asked."""

    def __init__(
        self,
        folder: Path,
        address: str,
        fileio: FileIO,
        *,
        sync_timeout: float,
        archive_folder: Path | None,
        existing_pages: set[int],
    ) -> None:
        self.folder = folder
        self.address = address
        self.fileio = fileio
        self.sync_timeout = sync_timeout
        self.archive_folder = archive_folder
        self._cond = threading.Condition(threading.Lock())
        self._pending = _Batch()
        self._busy = False
        self._stopping = False
        self._stopped: asyncio.Future[None] | None = None  # stop(): settled once drained
        self._pool: PageSyncPool | None = None  # set by start(): who runs the batches
        self._queued: float | None = None  # under _cond: when the pool is to run the next batch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._visible: dict[int, int] = {}
        self._existing = set(existing_pages)
        # On the loop: bytes queued to write grew (a frame) or shrank (a batch written or
        # failed); whoever holds producers back by it listens (the memory budget).
        self.on_backlog: Callable[[int], None] = lambda _delta: None
        self._handles: dict[int, AppendFile] = {}
        self._sizes: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._failed: set[int] = set()
        self._dir_dirty = False
        self._op_failures: list[OSError] = []  # under _cond: close/delete failures not yet reported
        self._last_start = 0.0
        self.on_failure: Callable[[set[int], OSError], None] = lambda _pages, _exc: None
        # (summary, lost): for a rescan after damage, the ordinals the damage took as
        # (first, end) ranges, end None for "to the end of the page"; None otherwise.
        self.on_resummarised: Callable[[PageSummaryRecord, list[tuple[int, int | None]] | None], None] = (
            lambda _summary, _lost: None)
        self.records_written = 0
        self.fsyncs = 0
        self.batches = 0
        self.write_errors = 0
        self._out_of_space = False  # writer thread: a batch found no space (logged once)

    # ----- loop side --------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop, pool: PageSyncPool | None = None) -> None:
        """From now on batches are written by `pool` (default: the process's shared one), on
        its threads; completions are delivered on `loop`. No thread is started here."""
        self._loop = loop
        self._pool = pool if pool is not None else default_pool()

    @property
    def started(self) -> bool:
        return self._pool is not None

    @property
    def pending_bytes(self) -> int:
        return self._pending.bytes

    def write(self, page_no: int, frame: bytes, records: int, persistent: int) -> asyncio.Future[None] | None:
        """Queue a frame; the future (shared by the batch) if any record needs the fsync."""
        if self._loop is None or self._stopping:
            raise RuntimeError("page writer is not running: call PageStore.start() first")
        with self._cond:
            batch = self._pending
            was_empty = not batch.ops
            last = batch.ops[-1] if batch.ops else None
            if isinstance(last, WriteOp) and last.page_no == page_no:
                last.frames.append(frame)
                last.size += len(frame)
                last.records += records
                last.non_persistent += records - persistent
            else:
                batch.ops.append(WriteOp(page_no, [frame], len(frame), records, records - persistent))
            batch.bytes += len(frame)
            wake = was_empty or (not batch.urgent and batch.bytes >= _URGENT_BYTES)
            batch.urgent = batch.urgent or batch.bytes >= _URGENT_BYTES
            if not persistent:
                future = None
            else:
                batch.needs_sync = True
                if batch.future is None:
                    batch.future = self._loop.create_future()
                future = batch.future
            if wake:
                self._request()
        self.on_backlog(len(frame))
        return future

    def close_page(self, summary: PageSummaryRecord) -> None:
        self._submit(CloseOp(summary.page_no, summary), urgent=True)

    def write_summary(self, summary: PageSummaryRecord) -> None:
        """Write the summary of a page of an earlier run that recovery scanned (a page close
        without data to sync: the summary is written atomically, the folder fsynced)."""
        self._submit(CloseOp(summary.page_no, summary), urgent=False)

    def resummarise_damaged(self, summary: PageSummaryRecord) -> None:
        """A closed page in which a reader found damage: write its summary again from what is
        readable on disk, flagged damaged and covering the whole file, so the next start
        counts only the records that can be delivered and never cuts the page."""
        self._submit(CloseOp(summary.page_no, summary, rescan=True), urgent=False)

    def delete_page(self, page_no: int, *, set_aside: bool = False) -> asyncio.Future[None] | None:
        """Queue the removal; the future (None when the thread is not running) resolves once
        the page and its summary are gone durably, and carries the OSError if they are not.
        `set_aside`: a page with damaged bytes is renamed `*.page.damaged` instead."""
        future = _logged_future(self._loop) if self._loop is not None and self._pool else None
        self._submit(DeleteOp(page_no, future, set_aside), urgent=False)
        return future

    def flush(self) -> asyncio.Future[None] | None:
        """A future for everything queued so far (None when nothing is queued or in flight
        and nothing failed since the last flush).

        It fails if a write, a page close, a delete or the directory sync that makes them
        durable failed since the last flush future was settled, so a caller that deletes
        journal records once a page deletion is durable does not when it is not.
        """
        if self._loop is None:
            return None
        with self._cond:
            if not self._pending.ops and not self._busy:
                if not self._op_failures:
                    return None
                failures, self._op_failures = self._op_failures, []
                failed = _logged_future(self._loop)
                failed.set_exception(_op_error(self.address, failures))
                return failed
            if self._pending.flush_future is None:
                self._pending.flush_future = _logged_future(self._loop)
            self._request()
            return self._pending.flush_future

    def _submit(self, op: Op, *, urgent: bool) -> None:
        if self._pool is None:
            self._process(_Batch(ops=[op]))
            return
        with self._cond:
            self._pending.ops.append(op)
            self._pending.urgent = self._pending.urgent or urgent
            self._request()

    def _request(self) -> None:
        """Under `_cond`: have the pool run the pending batch when it is due (at once when
        urgent, else `sync_timeout` after the previous batch started). A writer whose batch
        is being written is scheduled again by its pool thread when that batch is done."""
        pool = self._pool
        if pool is None or self._busy:
            return
        due = time.monotonic() if self._pending.urgent else self._last_start + self.sync_timeout
        if self._queued is None or due < self._queued:
            self._queued = due
            pool.schedule(self, due)

    async def stop(self) -> None:
        """Drain what is queued, then close the files; the writer no longer uses the pool."""
        if self._pool is None:
            return
        stopped = asyncio.get_running_loop().create_future()
        with self._cond:
            self._stopping = True
            self._stopped = stopped
            self._pending.urgent = True
            self._request()
        await stopped
        self._pool = None
        with self._cond:
            leftover, self._pending = self._pending, _Batch()
        if leftover.ops or leftover.future is not None or leftover.flush_future is not None:
            self._process(leftover)
        if leftover.bytes:
            self.on_backlog(-leftover.bytes)

    def visible_size(self, page_no: int) -> int | None:
        """Bytes of the page a reader may use (written, and synced when it had to be)."""
        with self._cond:
            return self._visible.get(page_no)

    # ----- a pool thread ----------------------------------------------------------------

    def run_batch(self, due: float) -> None:
        """Called by a pool thread at `due`: write the pending batch (an entry the writer
        superseded by an earlier one, or that came while a batch was written, is ignored).
        Once stopping and drained, close the files and tell `stop`."""
        with self._cond:
            if self._busy or self._queued != due:
                return
            self._queued = None
            batch, self._pending = self._pending, _Batch()
            self._busy = True
            self._last_start = time.monotonic()
        finished = False
        try:
            if batch.ops or batch.future is not None or batch.flush_future is not None:
                self._process(batch)
        finally:
            if batch.bytes:
                self._notify(self.on_backlog, -batch.bytes)
            with self._cond:
                finished = self._stopping and not self._has_work()
                if not finished:
                    self._busy = False
                    if self._has_work():
                        self._request()
        if finished:
            for handle in self._handles.values():
                handle.close()
            self._handles.clear()
            with self._cond:
                self._busy = False
                stopped, self._stopped = self._stopped, None
            self._settle(stopped, None)

    def _has_work(self) -> bool:
        pending = self._pending
        return bool(pending.ops) or pending.future is not None or pending.flush_future is not None

    def _process(self, batch: _Batch) -> None:
        """1. write every frame, 2. one fsync per page written, 3. closes and deletes."""
        self.batches += 1
        before: dict[int, int] = {}
        error: BatchFailed | None = None
        try:
            self._write_all(batch, before)
            if batch.needs_sync:
                self._sync(before)
        except BatchFailed as exc:
            error = exc
            self._roll_back(before, exc)
        if error is None:
            if before and self._out_of_space:
                self._out_of_space = False
                log.warning("paging %r: page writes succeed again", self.address)
            with self._cond:
                for page_no in before:
                    self._visible[page_no] = self._sizes[page_no]
        failures: list[OSError] = []
        deletes: list[tuple[DeleteOp, OSError | None]] = []
        for op in batch.ops:
            if isinstance(op, CloseOp):
                failed = self._guarded("close", op.page_no, partial(self._close, op))
            elif isinstance(op, DeleteOp):
                failed = self._guarded("delete", op.page_no, partial(self._delete, op))
                deletes.append((op, failed))
            else:
                continue
            if failed is not None:
                failures.append(failed)
        synced = self._guarded("directory sync", None, self._sync_folders) if self._dir_dirty else None
        if synced is not None:
            failures.append(synced)
        for op, failed in deletes:
            self._settle(op.future, failed or synced)
        with self._cond:
            self._op_failures.extend(failures)
            reported: list[OSError] = []
            if batch.flush_future is not None:
                reported, self._op_failures = self._op_failures, []
        self._settle(batch.future, error)
        self._settle(batch.flush_future, error or (_op_error(self.address, reported) if reported else None))

    def _write_all(self, batch: _Batch, before: dict[int, int]) -> None:
        for op in batch.ops:
            if not isinstance(op, WriteOp):
                continue
            if op.page_no in self._failed:
                raise BatchFailed(
                    OSError(errno.EIO, "page closed after an earlier write failure"),
                    set(before) | {op.page_no},
                    f"{self._name(op.page_no)}: {op.records} records ({op.non_persistent} of them "
                    "non-persistent) dropped",
                )
            try:
                handle = self._handle(op.page_no, before)
                frames = op.frames
                handle.write(frames[0] if len(frames) == 1 else b"".join(frames))
            except OSError as exc:
                raise BatchFailed(
                    exc, set(before) | {op.page_no},
                    f"write of {op.size} bytes ({op.records} records, {op.non_persistent} of "
                    f"them non-persistent) to "
                    f"{self._name(op.page_no)} at offset {self._sizes.get(op.page_no, 0)} failed",
                ) from exc
            self._sizes[op.page_no] = handle.size
            self._dirty.add(op.page_no)
            self.records_written += op.records

    def _handle(self, page_no: int, before: dict[int, int]) -> AppendFile:
        handle = self._handles.get(page_no)
        if handle is None:
            if not self._existing and not (self.folder / ADDRESS_FILE).exists():
                self._create_folder(self.folder)
            handle = self.fileio.open_append(self.folder / page_file_name(page_no))
            self._handles[page_no] = handle
            self._existing.add(page_no)
            before.setdefault(page_no, handle.size)
            if handle.size == 0:
                self._dir_dirty = True
                handle.write(encode_file_header(page_no))
            self._sizes[page_no] = handle.size
        before.setdefault(page_no, self._sizes[page_no])
        return handle

    def _create_folder(self, folder: Path) -> None:
        """The folder appears with its address.txt or not at all, even across a crash.

        It is made as `<folder>.tmp` (`makedirs` fsyncs the parent of each level it creates),
        address.txt is written into it atomically (fsynced, the staging folder fsynced), then
        the staging folder is renamed into place and the parent fsynced. A crash in between
        leaves at most the staging folder, which holds no page: the next start removes it
        (`page_recovery.remove_unfinished_folders`), a later creation reuses it. Made in place
        (mkdir, then address.txt), a crash between the two left a folder without its
        address.txt, which no start ever completed (seed 665 of the model-based test).
        """
        marker = self.address.encode("utf-8", "surrogatepass")
        if folder.is_dir():  # left without address.txt by an older version: complete it
            self.fileio.write_atomic(folder / ADDRESS_FILE, marker)
            return
        staging = folder.with_name(folder.name + FOLDER_STAGING_SUFFIX)
        self.fileio.makedirs(staging)
        self.fileio.write_atomic(staging / ADDRESS_FILE, marker)
        self.fileio.rename(staging, folder)
        self.fileio.fsync_directory(folder.parent)

    def _sync(self, before: dict[int, int]) -> None:
        for page_no in sorted(before):
            if page_no in self._dirty:
                try:
                    self._handles[page_no].fsync()
                except OSError as exc:
                    raise BatchFailed(exc, set(before), f"fsync of {self._name(page_no)} failed") from exc
                self._dirty.discard(page_no)
                self.fsyncs += 1
        if self._dir_dirty:
            try:
                self.fileio.fsync_directory(self.folder)
            except OSError as exc:
                raise BatchFailed(exc, set(before), f"fsync of folder {self.folder} failed") from exc
            self._dir_dirty = False

    def _roll_back(self, before: dict[int, int], error: BatchFailed) -> None:
        """Cut every page this batch wrote back to its size before it: the batch is not stored."""
        self.write_errors += 1
        if not is_no_space(error):
            log.error("paging %r: %s; batch not stored, its producers get the error", self.address, error)
        elif not self._out_of_space:  # once until a write succeeds again: the disk is full
            self._out_of_space = True
            log.error("paging %r: %s; batch not stored, its producers get the error; no message "
                      "is taken until there is space", self.address, error)
        else:
            log.debug("paging %r: still no space: %s", self.address, error)
        for page_no, size in sorted(before.items()):
            self._failed.add(page_no)
            handle = self._handles.pop(page_no, None)
            if handle is not None:
                handle.close()
            path = self.folder / page_file_name(page_no)
            try:
                if self.fileio.size(path) > size:
                    self.fileio.truncate(path, size)
            except OSError as exc:
                log.error("paging %r: cannot truncate %s back to %d bytes: %s (the torn tail "
                          "will be cut at the next start)", self.address, path, size, exc)
            self._sizes[page_no] = size
            self._dirty.discard(page_no)
            with self._cond:
                self._visible[page_no] = size
        for page_no in error.pages - set(before):
            self._failed.add(page_no)
        self._notify(self.on_failure, set(error.pages), error)

    def _close(self, op: CloseOp) -> None:
        """Page data durable first, then its summary (re-made from disk if writes failed)."""
        page_no = op.page_no
        handle = self._handles.pop(page_no, None)
        if handle is not None:
            if page_no in self._dirty:
                handle.fsync()
                self.fsyncs += 1
                self._dirty.discard(page_no)
            handle.close()
        path = self.folder / page_file_name(page_no)
        summary = op.summary
        if page_no in self._failed or op.rescan:
            try:
                data = self.fileio.read_bytes(path)
            except FileNotFoundError:
                if op.rescan:
                    return  # deleted meanwhile
                data = b""  # the failed write was the page's first: nothing to keep
            scan = scan_page(data, page_no)
            summary = PageSummaryRecord.from_scan(page_no, scan, op.summary.selector_summary)
            lost: list[tuple[int, int | None]] | None = None
            if op.rescan:
                summary.file_size, summary.damaged = len(data), True
                lost = [(0, None)] if scan.good_size == 0 else [  # no readable file header
                    (d.first_lost, d.first_lost + d.lost if d.resumed and d.lost is not None else None)
                    for d in scan.damage if d.first_lost is not None]
            self._notify(self.on_resummarised, summary, lost)
        if summary.count == 0 and not summary.damaged:
            self._remove(path)
            self._existing.discard(page_no)
            return
        self.fileio.write_atomic(self.folder / summary_file_name(page_no), summary.encode())

    def _delete(self, op: DeleteOp) -> None:
        page_no = op.page_no
        handle = self._handles.pop(page_no, None)
        if handle is not None:
            handle.close()
        page = self.folder / page_file_name(page_no)
        if self._existing and page_no >= max(self._existing):
            self._write_high_water(page_no, page)
        self._existing.discard(page_no)
        summary = self.folder / summary_file_name(page_no)
        if op.set_aside:
            aside = page.with_name(page.name + DAMAGED_SUFFIX)
            self.fileio.rename(page, aside)
            self._dir_dirty = True
            log.warning("paging %r: %s held damaged bytes; done with, set aside as %s (kept for "
                        "inspection, never deleted)", self.address, page, aside.name)
            self._remove(summary)
        elif self.archive_folder is None:
            self._remove(page)
            self._remove(summary)
        else:
            self._archive(page)
            self._archive(summary)
        with self._cond:
            self._visible.pop(page_no, None)

    def _write_high_water(self, page_no: int, page: Path) -> None:
        """Note the highest page number deleted, before the page goes.

        On a full disk even this small file cannot be written, and a drained page that
        cannot be deleted would keep the disk full: then the page is first cut to its file
        header (its name, and so its number, stays taken; a start that finds it re-counts
        it as empty), which frees its space for the mark.
        """
        data = f"{page_no}\n".encode()
        try:
            self.fileio.write_atomic(self.folder / HIGH_WATER_FILE, data)
        except OSError as exc:
            if not is_no_space(exc) or not page.exists():
                raise
            log.warning("paging %r: no space to note deleted page %d; its file is emptied first",
                        self.address, page_no)
            self.fileio.truncate(page, FILE_HEADER.size)
            self.fileio.write_atomic(self.folder / HIGH_WATER_FILE, data)

    def _archive(self, path: Path) -> None:
        assert self.archive_folder is not None
        if not path.exists():
            return
        target = self.archive_folder / path.name
        if not (self.archive_folder / ADDRESS_FILE).exists():
            self._create_folder(self.archive_folder)
        try:
            self.fileio.rename(path, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            self.fileio.write_atomic(target, self.fileio.read_bytes(path))
            self.fileio.remove(path)
        self._dir_dirty = True

    def _remove(self, path: Path) -> None:
        try:
            self.fileio.remove(path)
        except FileNotFoundError:
            return
        self._dir_dirty = True

    def _sync_folders(self) -> None:
        self.fileio.fsync_directory(self.folder)
        if self.archive_folder is not None and self.archive_folder.is_dir():
            self.fileio.fsync_directory(self.archive_folder)
        self._dir_dirty = False

    def _guarded(self, what: str, page_no: int | None, step: Callable[[], None]) -> OSError | None:
        """Close/delete failures are logged and returned, never raised: the pages they concern
        stay on disk, and the next flush future (and the delete's own) carries the error."""
        try:
            step()
        except OSError as exc:
            self.write_errors += 1
            where = self._name(page_no) if page_no is not None else str(self.folder)
            log.error("paging %r: %s of %s failed: %s (the file stays; the next start "
                      "re-checks it)", self.address, what, where, exc)
            failure = OSError(exc.errno or errno.EIO, f"{what} of {where} failed: {exc.strerror or exc}")
            failure.__cause__ = exc
            return failure
        return None

    def _name(self, page_no: int) -> str:
        return str(self.folder / page_file_name(page_no))

    # ----- back to the loop -------------------------------------------------------------

    def _settle(self, future: asyncio.Future[None] | None, error: OSError | None) -> None:
        if future is None:
            return
        if self._loop is None:
            _resolve(future, error)
            return
        try:
            self._loop.call_soon_threadsafe(_resolve, future, error)
        except RuntimeError:
            log.debug("paging %r: event loop closed before a batch completed", self.address)

    def _notify(self, callback: Callable[..., None], *args: object) -> None:
        if self._loop is None or self._pool is None:
            callback(*args)
            return
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            log.debug("paging %r: event loop closed before a failure report", self.address)


def _logged_future(loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """A future whose failure was already logged where it happened (`_guarded`): a caller
    that does not look at it (it may only want to know when) leaves no "exception never
    retrieved" report behind."""
    future: asyncio.Future[None] = loop.create_future()
    future.add_done_callback(_retrieve)
    return future


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _op_error(address: str, failures: list[OSError]) -> OSError:
    """One error for a flush that covers failed closes or deletes (the first one's errno)."""
    detail = "; ".join(str(f) for f in failures[:3])
    if len(failures) > 3:
        detail += f"; +{len(failures) - 3} more"
    error = OSError(failures[0].errno or errno.EIO, f"paging {address!r}: {detail}")
    error.__cause__ = failures[0]
    return error


def _resolve(future: asyncio.Future[None], error: OSError | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)

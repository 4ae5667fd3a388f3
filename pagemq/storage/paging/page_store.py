"""One address's page files: append, read back by (page, ordinal), summaries, deletion.

The store knows nothing of queues' delivery: it keeps one copy of each paged message with the
ids of the queues it was routed to, tells the caller where it went (page number, ordinal
within the page), and reads records back for any cursor. Acknowledgements, cursors and page
completion belong to the paged-queue store over it (`paged_queues`, `file_queue_store`).

Guarantees that store relies on (docs/formats/page.md has the bytes):
- `append` of several records writes one BATCH frame: after a crash all are there or none.
  Records with a transaction id go in a TX_BATCH frame, which a crash keeps or drops whole
  too; the page store reports them (`PageInfo.tx_batches`) and yields them like any other
  record: a transaction that spans several page files and the journal is committed by a
  journal record, and the paged-queue store drops the batches whose commit record never came.
- The future `append` returns resolves once the records are written *and* fsynced (one fsync
  per sync batch, batches at most every `sync_timeout`); it carries the OSError if they were
  not stored. No future is returned when no record is persistent: such records are written in
  order but not synced on their own.
- `read_page` yields only records whose batch has completed (written, and fsynced if the
  batch held a persistent record), so a record is never read back before its future resolved
  and a reader never sees a record that a failed batch later takes back.
- Non-persistent records do not outlive the broker run that wrote them. Every page that
  exists when the store is opened belongs to an earlier run (`open` closes the page that was
  live, and appends always go to a new page): for those pages `read_page` skips records not
  flagged persistent (their ordinals stay unused), and `PageInfo.persistent_count` and
  `PageInfo.queue_counts` count persistent records only; `PageInfo.count` stays the number
  of records (ordinals) in the file.
- Page numbers are never reused, even after every page was deleted (`last-page` file).
- Damage a reader meets (bytes that changed on disk after they were written) is logged once
  per stretch (file, offset), read past, and the page re-counted from disk (closed first if
  it was live); then `on_records_lost` is called once with what the damage took: records
  per queue and their ordinals (`RecordsLost`), so the caller can stop counting them.

Threads: everything is for the event loop's thread except advancing the iterator
`read_page` returns, which may run in a worker thread (`page_io`, given as `page_io`): what
it may read is fixed on the loop when `read_page` is called; the iterator reads files only
(damage it meets is handed to the loop).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, cast

from pagemq.storage.disk_space import is_no_space
from pagemq.storage.fileio import REAL_FILE_IO, FileIO
from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    FORMAT_VERSION,
    FRAME_HEADER,
    V1_FRAME_HEADER,
    FrameDamage,
    FrameError,
    PagedRecord,
    PageScan,
    PageSummaryRecord,
    encode_frame,
    encode_frames,
    folder_name,
    page_file_name,
    page_format_version,
    read_frames,
)
from pagemq.storage.paging.page_io import PageIO, ReadAhead, ReadSize
from pagemq.storage.paging.page_recovery import recover_folder, scan_from_summary
from pagemq.storage.paging.page_sync_pool import PageSyncPool
from pagemq.storage.paging.page_writer import ADDRESS_FILE, FOLDER_STAGING_SUFFIX, PageWriter

__all__ = ["FRAME_SPAN_BYTES", "PageFrames", "PageInfo", "PageState", "PageStore", "PagedRecord",
           "RecordsLost", "SummaryBuilder"]

log = logging.getLogger("pagemq.paging")

READ_CHUNK = 256 * 1024
# What `frame_spans` hands a bulk reader at a time: a range read holds about three times this
# (the bytes, the rows built from them, their encoding), and larger spans read no faster.
FRAME_SPAN_BYTES = 2 << 20


class SummaryBuilder(Protocol):
    """Folds each paged record's summary input into an opaque per-page selector summary.

    What an input is (a message, its properties) is between the builder and the caller of
    `PageStore.append`: storage only hands it on.
    """

    def fold(self, item: Any) -> None: ...

    def to_bytes(self) -> bytes: ...


@dataclass(slots=True)
class PageInfo:
    """A page as its readers see it; see the module docstring for counts after a restart."""

    page_no: int
    count: int
    persistent_count: int
    first_id: int
    last_id: int
    queue_counts: dict[int, int]
    size: int
    selector_summary: bytes | None
    closed: bool
    # (transaction id, first ordinal, records) of each transactional batch on the page
    tx_batches: list[tuple[int, int, int]] = field(default_factory=list)
    # Written before this start: only its persistent records are messages now.
    previous_run: bool = False
    # The soonest expiration of its records, 0 for none, None when not known (PageScan)
    soonest_expiration: int | None = None


@dataclass(frozen=True, slots=True)
class PageFrames:
    """A page's readable frames as byte spans, for a reader that walks the frames itself
    (`page_format.read_frames`, or a vectorised decoder: the Spark range reads) instead of
    taking a `PagedRecord` per record (`PageStore.frame_spans`).

    Each span `(ordinal, start, end)` holds whole frames only: `start` is where the frame
    holding `ordinal` begins, `end` where a frame ends (or the readable size). `read(offset,
    length)` reads the file from any thread (b"" once the page is deleted). Records appended
    after the spans were cut are not in them. Non-persistent records are to be left out when
    `skip_non_persistent` (a page of an earlier run). A queue's view (`PagedQueue.frames`)
    adds which of the page's ordinals are still the queue's on disk (`shown`), and whether
    all of them from one on are (`shown_from`: one call for a span a reader takes whole)."""

    page_no: int
    version: int
    spans: tuple[tuple[int, int, int], ...]
    read: Callable[[int, int], bytes]
    skip_non_persistent: bool
    queue_id: int = 0
    shown: Callable[[int], bool] | None = None
    shown_from: Callable[[int], bool] | None = None


@dataclass(frozen=True, slots=True)
class RecordsLost:
    """Records of a page that damage, found while reading it, took: they can never be read,
    so whoever counts them must stop (`PageStore.on_records_lost`).

    Counts use the measure of `PageInfo`: persistent records only for a page of an earlier
    run. `queues` maps a queue id to how many of its records were lost; `ordinals` are the
    ordinals lost (records of any queue, none of them reported before), so a caller can tell
    which of them it had already read or acknowledged.
    """

    page_no: int
    path: Path
    records: int
    queues: dict[int, int]
    ordinals: frozenset[int]


@dataclass(slots=True)
class PageState:
    """What a store knows of one page: its counts (`PageScan`), summary and state."""

    page_no: int
    stats: PageScan
    selector_summary: bytes | None = None
    closed: bool = False
    previous_run: bool = False
    builder: SummaryBuilder | None = None
    damaged: bool = False  # holds unreadable bytes: set aside instead of deleted
    frame_version: int | None = FORMAT_VERSION  # None: read from the file header when needed
    # Offsets of damaged stretches already logged (each is logged once, whoever reads it).
    reported: set[int] = field(default_factory=set)
    # Ordinals damage found in this run took (reported through on_records_lost).
    lost: set[int] = field(default_factory=set)

    def fold_summary(self, summary_input: Sequence[object] | None) -> None:
        """Appended records' summary inputs; without them the page gets no selector summary
        (None: any selector may match), since a partial one would hide matches."""
        builder = self.builder
        if builder is not None:
            if summary_input is None:
                self.builder = None
            else:
                for item in summary_input:
                    builder.fold(item)

    def close(self) -> None:
        """No more appends: the selector summary is final."""
        self.closed = True
        self.selector_summary = self.builder.to_bytes() if self.builder is not None else None
        self.builder = None

    def info(self) -> PageInfo:
        stats = self.stats
        queue_counts = stats.queue_persistent if self.previous_run else stats.queue_counts
        return PageInfo(
            self.page_no, stats.count, stats.persistent_count, stats.first_id, stats.last_id,
            dict(queue_counts), stats.good_size, self.selector_summary, self.closed,
            list(stats.tx_batches), self.previous_run, stats.soonest_expiration,
        )


class PageStore:
    """The page files of one address; one instance per address."""

    def __init__(
        self,
        paging_directory: Path,
        address: str,
        *,
        page_size_bytes: int,
        sync_timeout: float = 0.003,
        fileio: FileIO = REAL_FILE_IO,
        archive_directory: Path | None = None,
        page_io: PageIO | None = None,
        sync_pool: PageSyncPool | None = None,
    ) -> None:
        if page_size_bytes <= FILE_HEADER.size:
            raise ValueError(f"page_size_bytes must exceed the {FILE_HEADER.size}-byte file header")
        self.address = address
        self.page_size_bytes = page_size_bytes
        self.fileio = fileio
        # Where queues' in-order reads of the pages run (page_io); None: on the caller's thread.
        self.page_io = page_io
        self.folder = paging_directory / folder_name(address)
        self.archive_folder = (
            archive_directory / self.folder.name if archive_directory is not None else None
        )
        self._sync_timeout = sync_timeout
        # Who writes and fsyncs the batches (page_sync_pool); None: the process's shared pool.
        self._sync_pool = sync_pool
        self._pages: dict[int, PageState] = {}
        self._live = PageState(1, PageScan())
        self._builder_factory: Callable[[], SummaryBuilder] | None = None
        self._writer: PageWriter | None = None
        self._unwritten_summaries: list[PageSummaryRecord] = []  # open(defer_summaries=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Told, on the loop, when damage found while reading took records (see RecordsLost).
        self.on_records_lost: Callable[[RecordsLost], None] = lambda _lost: None
        # Told, on the loop, when a write batch found no space (ENOSPC/EDQUOT): the folder
        # and the error. The batch was refused (see page_writer.py); the broker stops taking
        # messages until there is room.
        self.on_no_space: Callable[[Path, OSError], None] = lambda _folder, _error: None
        # On the loop: the bytes waiting to be written to page files grew or shrank by delta.
        self.on_backlog: Callable[[int], None] = lambda _delta: None
        self.summaries_read = 0
        self.pages_scanned = 0

    # ----- discovery and recovery -------------------------------------------------------

    @staticmethod
    def discover(paging_directory: Path) -> dict[str, Path]:
        """Address name -> folder, for every folder holding an `address.txt` (a staging
        folder, `<name>.tmp`, is not one: see `PageWriter._create_folder`)."""
        found: dict[str, Path] = {}
        try:
            with os.scandir(paging_directory) as entries:  # types from the listing: no stat each
                names = sorted(e.name for e in entries
                               if e.is_dir() and not e.name.endswith(FOLDER_STAGING_SUFFIX))
        except (FileNotFoundError, NotADirectoryError):
            return found
        # Plain strings until a folder is found: sorting and joining Paths cost more than the
        # reads, with thousands of folders.
        root = os.fspath(paging_directory)
        for name in names:
            try:
                address = REAL_FILE_IO.read_bytes(f"{root}/{name}/{ADDRESS_FILE}")
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                continue
            found[address.decode("utf-8", "surrogatepass")] = paging_directory / name
        return found

    def open(self, *, defer_summaries: bool = False) -> list[PageInfo]:
        """Recover the folder (page_recovery's numbered procedure); summaries only for closed pages.

        `defer_summaries`: the summaries of pages that had to be scanned (the page live at a
        kill -9) are written by the writer once started, off the caller's thread, instead of
        now with their fsyncs (the broker's start-up: thousands of folders after a crash).
        """
        if self._writer is not None:
            raise RuntimeError(f"page store for {self.address!r} is already open")
        recovered = recover_folder(self.folder, self.address, self.fileio,
                                   write_summaries=not defer_summaries)
        self._unwritten_summaries = recovered.unwritten
        self.summaries_read = recovered.summaries_read
        self.pages_scanned = recovered.pages_scanned
        for page in recovered.pages:
            self._pages[page.page_no] = PageState(
                page.page_no, page.stats, page.selector_summary, closed=True, previous_run=True,
                damaged=page.damaged, frame_version=page.frame_version,
                # rescanned at open: its damage was logged and its records were never counted
                reported={d.offset for d in page.stats.damage},
            )
        self._live = self._new_page(recovered.highest_page + 1)
        self._writer = PageWriter(
            self.folder, self.address, self.fileio,
            sync_timeout=self._sync_timeout, archive_folder=self.archive_folder,
            existing_pages=set(self._pages),
        )
        self._writer.on_failure = self._on_write_failure
        self._writer.on_backlog = self._backlog
        self._writer.on_resummarised = self._on_resummarised
        return self.pages()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand the timed writer to its sync pool; completions are delivered on `loop`."""
        if self._writer is None:
            self.open()
        assert self._writer is not None
        self._loop = loop
        self._writer.start(loop, self._sync_pool)
        unwritten, self._unwritten_summaries = self._unwritten_summaries, []
        for summary in unwritten:  # in order, before anything later asked of this page
            self._writer.write_summary(summary)

    def set_summary_builder(self, factory: Callable[[], SummaryBuilder]) -> None:
        """Pages started from now on carry the blob `factory().to_bytes()` in their summary."""
        self._builder_factory = factory
        if self._live.stats.count == 0:
            self._live.builder = factory()

    # ----- writing ----------------------------------------------------------------------

    def append(
        self,
        records: Sequence[PagedRecord],
        *,
        summary_input: Sequence[object] | None = None,
        atomic: bool = True,
    ) -> tuple[int, int, asyncio.Future[None] | None]:
        """(page_no, first ordinal, future); several records are one atomic batch (a BATCH
        frame), or, not `atomic`, a MESSAGE frame each in one write.

        Records carrying a `txid` (all of them, the same) are written as a transactional
        batch and listed in `PageInfo.tx_batches`; whether that transaction committed is
        for the caller to know (see the module docstring).

        A page without `summary_input` for every record gets no selector summary (None means
        "unknown: any selector may match"), since a partial one would hide matches.
        """
        writer = self._require_writer()
        if not records:
            raise ValueError("append needs at least one record")
        if summary_input is not None and len(summary_input) != len(records):
            raise ValueError("summary_input needs one item per record")
        if not atomic and records[0].txid:
            raise ValueError("a transaction's records are appended as one atomic batch")
        encode = encode_frame if atomic else encode_frames
        live = self._live
        frame = encode(records, live.stats.count)
        page = self._page_for(len(frame))
        if page is not live:
            frame = encode(records, 0)  # the first record of a new page
        persistent = int(records[0].persistent) if len(records) == 1 else sum(
            [1 for record in records if record.persistent])
        future = writer.write(page.page_no, frame, len(records), persistent)
        first = page.stats.count
        page.stats.add(records, page.stats.good_size, len(frame))
        self._pages[page.page_no] = page
        page.fold_summary(summary_input)
        return page.page_no, first, future

    def room(self, size: int) -> int:
        """See `page_medium.PageMedium.room`."""
        left = self.page_size_bytes - self._live.stats.good_size
        return left if size <= left else self.page_size_bytes - FILE_HEADER.size

    def _page_for(self, frame_size: int) -> PageState:
        """The live page, rolled first if this frame would take it past page_size_bytes."""
        live = self._live
        if live.stats.count and live.stats.good_size + frame_size > self.page_size_bytes:
            self.roll()
        return self._live

    def roll(self) -> None:
        """Close the live page now (its summary is written after its data is synced)."""
        live = self._live
        if live.stats.count == 0:
            return
        live.close()
        summary = PageSummaryRecord.from_scan(live.page_no, live.stats, live.selector_summary)
        self._require_writer().close_page(summary)
        self._live = self._new_page(live.page_no + 1)

    def _new_page(self, page_no: int) -> PageState:
        builder = self._builder_factory() if self._builder_factory is not None else None
        return PageState(page_no, PageScan(), builder=builder)

    def flush(self) -> asyncio.Future[None]:
        """Resolves when everything asked so far (appends, closes, deletes) is done.

        Done means written, and fsynced where a persistent record or a page close needs it;
        a caller may delete journal records that refer to a deleted page once this resolves
        without an exception. It fails when a write, close, delete or directory sync failed
        since the last flush future was settled.
        """
        future = self._writer.flush() if self._writer is not None else None
        if future is not None:
            return future
        done: asyncio.Future[None] = (self._loop or asyncio.get_running_loop()).create_future()
        done.set_result(None)
        return done

    def delete_page(self, page_no: int) -> asyncio.Future[None] | None:
        """Remove (or archive) a page and its summary; the live page is rolled first.

        The future resolves once the removal is durable and carries the OSError when it
        failed (the page then stays on disk); `flush()` fails likewise. None for an unknown
        page or when the writer thread is not running.
        """
        if page_no == self._live.page_no:
            self.roll()
        page = self._pages.pop(page_no, None)
        if page is None:
            log.debug("paging %r: delete of unknown page %d ignored", self.address, page_no)
            return None
        return self._require_writer().delete_page(page_no, set_aside=page.damaged)

    async def close(self) -> None:
        """Close the live page (so the next open reads its summary) and drain the writer."""
        writer = self._writer
        if writer is None or not writer.started:
            return
        self.roll()
        await writer.stop()

    def _require_writer(self) -> PageWriter:
        if self._writer is None:
            raise RuntimeError(f"page store for {self.address!r} is not open")
        return self._writer

    # ----- writer reports (event loop) --------------------------------------------------

    def _backlog(self, delta: int) -> None:
        self.on_backlog(delta)

    def _on_write_failure(self, pages: set[int], error: OSError) -> None:
        """A batch was not stored: move off its pages; the writer re-summarises them from disk."""
        if self._live.page_no in pages:
            self.roll()
        if is_no_space(error):
            self.on_no_space(self.folder, error)

    def _found_damage(self, page: PageState) -> None:
        """A reader met damage not seen before in `page` (maybe in a worker thread: then the
        rest happens on the loop). The page is set aside, not deleted, when done with; it is
        closed if it was live, and re-counted from disk by the writer, which reports what the
        damage took (`_on_resummarised` -> `on_records_lost`)."""
        page.damaged = True
        loop = self._loop
        if loop is not None and not _running_on(loop):
            loop.call_soon_threadsafe(self._recount_damaged, page)
            return
        self._recount_damaged(page)

    def _recount_damaged(self, page: PageState) -> None:
        writer = self._writer
        if writer is None or self._pages.get(page.page_no) is not page:
            return  # closed, or the page was deleted meanwhile
        if page is self._live:
            self.roll()  # appends go to a new page; this one can be re-counted whole
        if page.closed:
            writer.resummarise_damaged(PageSummaryRecord.from_scan(
                page.page_no, page.stats, page.selector_summary))

    def _on_resummarised(self, summary: PageSummaryRecord, lost: list[tuple[int, int | None]] | None
                         ) -> None:
        page = self._pages.get(summary.page_no)
        if page is None:
            return
        if summary.count == 0 and not summary.damaged:
            del self._pages[summary.page_no]
            return
        before = page.stats
        page.stats = scan_from_summary(summary)
        if lost is not None:
            self._count_lost(page, before, lost)

    def _count_lost(self, page: PageState, before: PageScan, lost: list[tuple[int, int | None]]) -> None:
        """Compare the counts before a damage rescan with those after it; report the loss."""
        after = page.stats
        if page.previous_run:
            counts_before, counts_after = before.queue_persistent, after.queue_persistent
        else:
            counts_before, counts_after = before.queue_counts, after.queue_counts
        queues = {qid: n - counts_after.get(qid, 0) for qid, n in counts_before.items()
                  if n > counts_after.get(qid, 0)}
        ordinals: set[int] = set()
        for first, end in lost:
            ordinals.update(range(first, end if end is not None else max(before.count, first)))
        ordinals -= page.lost
        page.lost |= ordinals
        records = (before.persistent_count - after.persistent_count if page.previous_run
                   else len(ordinals))
        if queues or records > 0:
            self.on_records_lost(RecordsLost(page.page_no, self.folder / page_file_name(page.page_no),
                                             max(records, 0), queues, frozenset(ordinals)))

    # ----- reading ----------------------------------------------------------------------

    def pages(self) -> list[PageInfo]:
        return [page.info() for page in sorted(self._pages.values(), key=lambda p: p.page_no)]

    def page_info(self, page_no: int) -> PageInfo | None:
        page = self._pages.get(page_no)
        return page.info() if page is not None else None

    def page_count(self) -> int:
        return len(self._pages)

    def live_page_no(self) -> int:
        return self._live.page_no

    def fully_readable(self, page_no: int) -> bool:
        """Whether `read_page` would now see every record appended to the page so far.

        False while a batch for it is still queued or being written: a reader made now would
        end early, and a cursor must wait for `flush()` rather than take the page as read.
        """
        page = self._pages.get(page_no)
        if page is None or page.previous_run:
            return True
        visible = self._writer.visible_size(page_no) if self._writer is not None else None
        return visible is not None and visible >= page.stats.good_size

    def frame_spans(self, page_no: int, start_ordinal: int = 0, *, span_bytes: int = FRAME_SPAN_BYTES
                    ) -> PageFrames | None:
        """The page's frames readable now from the one holding `start_ordinal`, in spans of
        about `span_bytes` cut where the page's index says a frame starts (see PageFrames).
        None when the page is gone, or holds damage (read it with `read_page`, which reads
        past damage and reports it)."""
        page = self._pages.get(page_no)
        if page is None or page.damaged or page.lost or page.stats.damage:
            return None
        limit = self._readable_size(page)
        version = self._frame_version(page)
        if version is None:
            return None
        index = list(page.stats.index)
        ordinal, offset = _seek(index, start_ordinal, limit)
        spans: list[tuple[int, int, int]] = []
        for next_ordinal, next_offset in index[bisect.bisect_right(index, (ordinal, offset)):]:
            if next_offset >= limit:
                break
            if next_offset - offset >= span_bytes:
                spans.append((ordinal, offset, next_offset))
                ordinal, offset = next_ordinal, next_offset
        if offset < limit:
            spans.append((ordinal, offset, limit))
        read = partial(_read_if_there, self.fileio, self.folder / page_file_name(page_no))
        return PageFrames(page_no, version, tuple(spans), read, page.previous_run)

    def _readable_size(self, page: PageState) -> int:
        """How much of the page a read may use now (see the module doc)."""
        if page.previous_run:
            return page.stats.good_size
        visible = self._writer.visible_size(page.page_no) if self._writer is not None else None
        return visible if visible is not None else FILE_HEADER.size

    def _frame_version(self, page: PageState) -> int | None:
        """The page's frame format, read from its file header the first time (None: unreadable)."""
        if page.frame_version is None:
            try:
                page.frame_version = page_format_version(
                    self.fileio.read_range(self.folder / page_file_name(page.page_no), 0, FILE_HEADER.size))
            except (OSError, struct.error):
                return None
        return page.frame_version

    def read_page(self, page_no: int, start_ordinal: int = 0, *, size: ReadSize | None = None
                  ) -> Iterator[tuple[int, PagedRecord]]:
        """(ordinal, record) from `start_ordinal` on, of records readable now (see module doc),
        read on the caller's thread.

        What is readable is fixed when this is called; a page deleted meanwhile ends the
        iteration. A damaged stretch is logged (file, offset, records lost) and read past: the
        records after it keep their ordinals (format-2 frames carry them), and the page is
        marked damaged, so it is set aside (`*.page.damaged`), not deleted, when done with.
        """
        return cast("Iterator[tuple[int, PagedRecord]]",  # without `arrived`: never None
                    self._records(page_no, start_ordinal, size, None))

    def read_page_ahead(self, page_no: int, start_ordinal: int, *, size: ReadSize,
                        arrived: Callable[[], None]) -> Iterator[tuple[int, PagedRecord] | None]:
        """`read_page`, the file read in the page-I/O worker ranges ahead (page_io.ReadAhead):
        the iterator yields None while the next bytes are being read, and `arrived` is called
        on the loop once they are in; iterate on then. Closing the iterator stops the
        read-ahead. With no worker (`page_io` None) it is `read_page`."""
        return self._records(page_no, start_ordinal, size, arrived)

    def _records(self, page_no: int, start_ordinal: int, size: ReadSize | None,
                 arrived: Callable[[], None] | None) -> Iterator[tuple[int, PagedRecord] | None]:
        """The page's readable part from the frame holding `start_ordinal`; read through the
        worker when `arrived` is given and there is one."""
        page = self._pages.get(page_no)
        if page is None:
            return iter(())
        limit = self._readable_size(page)
        path = self.folder / page_file_name(page_no)
        version = self._frame_version(page)
        if version is None:
            return iter(())
        ordinal, offset = _seek(list(page.stats.index), start_ordinal, limit)
        size = size if size is not None else ReadSize(READ_CHUNK)
        reader = _PageReader(self.fileio, path, version, self.address, page, self._found_damage, size)
        ahead = None
        if arrived is not None and self.page_io is not None:
            ahead = ReadAhead(reader.read, limit, self.page_io, arrived, size)
        return reader.records(offset, limit, ordinal, start_ordinal, skip_non_persistent=page.previous_run,
                              ahead=ahead)

    def stats(self) -> dict[str, int]:
        writer = self._writer
        return {
            "pages": len(self._pages),
            "bytes": sum(p.stats.good_size for p in self._pages.values()),
            "records_written": writer.records_written if writer else 0,
            "fsyncs": writer.fsyncs if writer else 0,
            "batches": writer.batches if writer else 0,
            "pending_bytes": writer.pending_bytes if writer else 0,
            "write_errors": writer.write_errors if writer else 0,
            "summaries_read": self.summaries_read,
            "pages_scanned": self.pages_scanned,
        }


def _running_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _read_if_there(fileio: FileIO, path: Path, offset: int, length: int) -> bytes:
    """A page file's bytes at `offset` (b"" once it is deleted: every queue was done with
    it). Any thread."""
    try:
        return fileio.read_range(path, offset, length)
    except FileNotFoundError:
        return b""


def _seek(index: list[tuple[int, int]], start_ordinal: int, limit: int) -> tuple[int, int]:
    """(ordinal, offset) of the last indexed frame at or before `start_ordinal` within `limit`."""
    at = bisect.bisect_right(index, (start_ordinal, limit)) - 1
    while at >= 0 and index[at][1] >= limit:
        at -= 1
    return index[at] if at >= 0 else (0, FILE_HEADER.size)


class _PageReader:
    """Reads one page's frames from an offset, a range (`size`) at a time, so one reader holds
    about one range; on damage reads the rest of the readable part whole and resynchronises
    past it. Ranges are read one after the other, never twice (a frame cut by the end of a
    range waits in `tail` for the next), so a read-ahead can guess the next one."""

    def __init__(self, fileio: FileIO, path: Path, version: int, address: str, page: PageState,
                 on_damage: Callable[[PageState], None], size: ReadSize) -> None:
        self.fileio, self.path, self.version = fileio, path, version
        self.address, self.page, self.on_damage = address, page, on_damage
        self.size = size

    def read(self, offset: int, length: int) -> bytes:
        return _read_if_there(self.fileio, self.path, offset, length)

    def records(self, offset: int, limit: int, ordinal: int, start_ordinal: int, *,
                skip_non_persistent: bool, ahead: ReadAhead | None = None
                ) -> Iterator[tuple[int, PagedRecord] | None]:
        read = ahead.fetch if ahead is not None else self.read
        header = FRAME_HEADER if self.version >= 2 else V1_FRAME_HEADER
        tail = b""  # the start of a frame the last range cut off
        at = offset  # where the next range starts
        want = self.size.bytes
        try:
            while at < limit:
                length = min(want, limit - at)
                data = read(at, length)
                while data is None:  # being read in the worker: `arrived` follows
                    yield None
                    data = read(at, length)
                if not data:
                    return  # deleted meanwhile
                at += len(data)
                if tail:
                    data = tail + data
                base = at - len(data)  # the file offset of data[0]
                consumed = 0
                try:
                    frames = read_frames(data, 0, len(data), version=self.version, ordinal=ordinal)
                    for frame_at, size, first, entries in frames:
                        for record in entries:  # (inline: this runs for every paged message read)
                            if first >= start_ordinal and (record.persistent or not skip_non_persistent):
                                yield first, record
                            first += 1
                        ordinal = first
                        consumed = frame_at + size
                except FrameError:
                    yield from self._past_damage(base + consumed, limit, ordinal, start_ordinal,
                                                 skip_non_persistent, read)
                    return
                tail = data[consumed:] if consumed < len(data) else b""
                want = self.size.bytes
                if tail and not consumed and len(tail) >= header.size:
                    # A frame longer than a range: read the rest of it, unless it cannot be one.
                    frame = header.size + header.unpack_from(tail, 0)[2 if self.version >= 2 else 0]
                    if frame == header.size or base + frame > limit:
                        yield from self._past_damage(base, limit, ordinal, start_ordinal,
                                                     skip_non_persistent, read)
                        return
                    want = max(frame - len(tail), 1)
            if tail:  # the readable part ends inside a frame
                yield from self._past_damage(at - len(tail), limit, ordinal, start_ordinal,
                                             skip_non_persistent, read)
        finally:
            if ahead is not None:
                ahead.close()

    def _past_damage(self, offset: int, limit: int, ordinal: int, start_ordinal: int,
                     skip_non_persistent: bool, read: Callable[[int, int], bytes | None]
                     ) -> Iterator[tuple[int, PagedRecord] | None]:
        data = read(offset, limit - offset)
        while data is None:
            yield None
            data = read(offset, limit - offset)
        if not data:
            return
        damage: list[FrameDamage] = []
        reported = 0
        for _at, _size, first, entries in read_frames(data, 0, len(data), version=self.version,
                                                      ordinal=ordinal, damage=damage):
            reported = self._report(damage, reported, offset)
            yield from _wanted(entries, first, start_ordinal, skip_non_persistent)
        self._report(damage, reported, offset)

    def _report(self, damage: list[FrameDamage], reported: int, base: int) -> int:
        """Log each damaged stretch once per run, whoever reads it; the first sight of one
        tells the store (`on_damage`)."""
        seen = self.page.reported
        new = False
        for found in damage[reported:]:
            if base + found.offset in seen:
                continue
            seen.add(base + found.offset)
            new = True
            lost = "" if found.lost is None else f", {found.lost} record(s) lost"
            after = (f"read on from offset {base + found.end}" if found.resumed
                     else "nothing readable after it")
            log.warning("paging %r: %s: damaged bytes at offset %d (%s): %d bytes unreadable%s, %s; "
                        "the page is kept (set aside, never deleted)", self.address, self.path,
                        base + found.offset, found.reason, found.length, lost, after)
        if new:
            self.on_damage(self.page)
        return len(damage)


def _wanted(entries: list[PagedRecord], first: int, start_ordinal: int, skip_non_persistent: bool
            ) -> Iterator[tuple[int, PagedRecord]]:
    for ordinal, record in enumerate(entries, first):
        if ordinal >= start_ordinal and (record.persistent or not skip_non_persistent):
            yield ordinal, record

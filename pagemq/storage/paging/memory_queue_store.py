"""The paged-queue store in memory: no files, for fast in-process tests of the core and the
second target of the contract suite (tests/contract/test_paged_queue_store.py).

`MemoryPages` keeps an address's pages as lists of records with the page store's rules:
batches are atomic, a page rolls past `page_size_bytes`, page numbers are never reused, and
`reopen` gives the pages as the next run finds them (the live page closed, non-persistent
records skipped and not counted), which is the memory store's restart. Every append is
durable at once. `lose` takes records as damage found while reading would, and reports them
the same way (`RecordsLost`). `MemoryCursorLog` keeps cursor records as the journal would,
for a restart to hand back to `recover`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from pagemq.storage.api import CursorAck, CursorComplete, PageTxCommit
from pagemq.storage.paging.page_format import FILE_HEADER, PagedRecord, PageScan
from pagemq.storage.paging.page_io import PageIO, ReadAhead, ReadSize
from pagemq.storage.paging.page_store import (
    FRAME_SPAN_BYTES,
    PageFrames,
    PageInfo,
    PageState,
    RecordsLost,
    SummaryBuilder,
)
from pagemq.storage.paging.paged_queues import PagedQueues
from pagemq.storage.paging.queue_store import CursorRecords

RECORD_OVERHEAD = 32
"""Bytes a record counts for besides its message (ids, flags, framing), for page rolling."""

CursorRecord = CursorAck | CursorComplete | PageTxCommit


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


class _MemoryPage:
    __slots__ = ("batches", "records", "state")

    def __init__(self, state: PageState) -> None:
        self.state = state
        self.records: list[PagedRecord] = []
        self.batches: list[tuple[int, int, int]] = []  # (txid, first, count) of each tx batch


class MemoryPages:
    """One address's pages in memory (a `page_medium.PageMedium`)."""

    def __init__(self, address: str, *, page_size_bytes: int = 10 << 20) -> None:
        self.address = address
        self.page_size_bytes = page_size_bytes
        self.on_records_lost: Callable[[RecordsLost], None] = lambda _lost: None
        self.page_io: PageIO | None = None  # pages are in memory: read on the loop
        self._pages: dict[int, _MemoryPage] = {}
        self._builder_factory: Callable[[], SummaryBuilder] | None = None
        self._live = self._new_page(1)

    def set_summary_builder(self, factory: Callable[[], SummaryBuilder]) -> None:
        self._builder_factory = factory
        if self._live.state.stats.count == 0:
            self._live.state.builder = factory()

    def _new_page(self, page_no: int) -> _MemoryPage:
        builder = self._builder_factory() if self._builder_factory is not None else None
        return _MemoryPage(PageState(page_no, PageScan(), builder=builder))

    # -- writing --------------------------------------------------------------------------

    def append(self, records: Sequence[PagedRecord], *, summary_input: Sequence[object] | None = None,
               atomic: bool = True) -> tuple[int, int, asyncio.Future[None] | None]:
        if not records:
            raise ValueError("append needs at least one record")
        if summary_input is not None and len(summary_input) != len(records):
            raise ValueError("summary_input needs one item per record")
        size = sum(len(record.message) + RECORD_OVERHEAD for record in records)
        stats = self._live.state.stats
        if stats.count and stats.good_size + size > self.page_size_bytes:
            self.roll()
        page = self._live
        state = page.state
        first = state.stats.count
        state.stats.add(records, state.stats.good_size, size)
        page.records.extend(records)
        if records[0].txid:
            page.batches.append((records[0].txid, first, len(records)))
        self._pages[state.page_no] = page
        state.fold_summary(summary_input)
        durable = _done() if any(record.persistent for record in records) else None
        return state.page_no, first, durable

    def room(self, size: int) -> int:
        left = self.page_size_bytes - self._live.state.stats.good_size
        return left if size <= left else self.page_size_bytes - FILE_HEADER.size

    def roll(self) -> None:
        if self._live.state.stats.count == 0:
            return
        self._live.state.close()
        self._live = self._new_page(self._live.state.page_no + 1)

    def flush(self) -> asyncio.Future[None]:
        return _done()

    def delete_page(self, page_no: int) -> asyncio.Future[None] | None:
        if page_no == self._live.state.page_no:
            self.roll()
        return _done() if self._pages.pop(page_no, None) is not None else None

    async def close(self) -> None:
        self.roll()

    # -- reading --------------------------------------------------------------------------

    def read_page_ahead(self, page_no: int, start_ordinal: int, *, size: ReadSize,
                        arrived: Callable[[], None]) -> Iterator[tuple[int, PagedRecord] | None]:
        records = self.read_page(page_no, start_ordinal)
        if self.page_io is None:
            return records  # in memory: nothing to wait for
        return _read_through(self.page_io, records, size, arrived)

    def read_page(self, page_no: int, start_ordinal: int = 0, *, size: ReadSize | None = None
                  ) -> Iterator[tuple[int, PagedRecord]]:
        page = self._pages.get(page_no)
        if page is None:
            return iter(())
        return self._read(page, start_ordinal, len(page.records))

    def _read(self, page: _MemoryPage, start: int, limit: int) -> Iterator[tuple[int, PagedRecord]]:
        state = page.state
        for ordinal in range(start, limit):
            if self._pages.get(state.page_no) is not page:
                return  # deleted meanwhile
            record = page.records[ordinal]
            if ordinal in state.lost or (state.previous_run and not record.persistent):
                continue
            yield ordinal, record

    def fully_readable(self, page_no: int) -> bool:
        return True

    def frame_spans(self, page_no: int, start_ordinal: int = 0, *, span_bytes: int = FRAME_SPAN_BYTES
                    ) -> PageFrames | None:
        return None  # records in memory, no frame bytes: readers take `read_page`

    def live_page_no(self) -> int:
        return self._live.state.page_no

    def page_info(self, page_no: int) -> PageInfo | None:
        page = self._pages.get(page_no)
        return page.state.info() if page is not None else None

    def pages(self) -> list[PageInfo]:
        return [self._pages[page_no].state.info() for page_no in sorted(self._pages)]

    def page_count(self) -> int:
        return len(self._pages)

    # -- restarts and damage --------------------------------------------------------------

    def reopen(self) -> MemoryPages:
        """These pages as the next run finds them; this instance is not to be used again."""
        self.roll()
        fresh = MemoryPages(self.address, page_size_bytes=self.page_size_bytes)
        fresh._builder_factory = self._builder_factory
        fresh.page_io = self.page_io
        for page_no, page in sorted(self._pages.items()):
            page.state.previous_run = True
            fresh._pages[page_no] = page
        fresh._live = fresh._new_page(self._live.state.page_no)
        return fresh

    def lose(self, page_no: int, ordinals: Collection[int]) -> None:
        """Damage took these records: never read again, re-counted, reported."""
        if page_no == self._live.state.page_no:
            self.roll()
        page = self._pages[page_no]
        state = page.state
        taken = set(ordinals) - state.lost
        state.lost |= taken
        counted = [page.records[o] for o in taken if page.records[o].persistent or not state.previous_run]
        queues: dict[int, int] = {}
        for record in counted:
            for queue_id in record.queue_ids:
                queues[queue_id] = queues.get(queue_id, 0) + 1
        state.stats = self._recount(page)
        self.on_records_lost(RecordsLost(page_no, Path(f"memory:{self.address}/{page_no}"), len(counted),
                                         queues, frozenset(taken)))

    def _recount(self, page: _MemoryPage) -> PageScan:
        scan = PageScan(good_size=0)
        for ordinal, record in enumerate(page.records):
            if ordinal not in page.state.lost:
                scan.add([record], scan.good_size, len(record.message) + RECORD_OVERHEAD, ordinal)
        scan.count = len(page.records)
        scan.tx_batches = list(page.batches)
        return scan


class MemoryCursorLog:
    """Cursor records kept as the journal keeps them (a `queue_store.CursorJournal`)."""

    def __init__(self) -> None:
        self.records: dict[int, CursorRecord] = {}

    def cursor_ack(self, record: CursorAck) -> None:
        self.records[record.record_id] = record

    def cursor_complete(self, record: CursorComplete) -> None:
        self.records[record.record_id] = record

    def transaction(self, records: Sequence[CursorRecord]) -> None:
        """A caller's journal transaction: a COMMIT's cursor acks and page-transaction commit."""
        for record in records:
            self.records[record.record_id] = record

    def delete_record(self, record_id: int) -> None:
        self.records.pop(record_id, None)

    def flush(self) -> asyncio.Future[None]:
        return _done()

    def recovered(self) -> tuple[list[CursorAck], list[CursorComplete], list[PageTxCommit]]:
        """What a journal load hands `recover`: acks, completes, commits, in record order."""
        ordered = [self.records[record_id] for record_id in sorted(self.records)]
        return ([r for r in ordered if isinstance(r, CursorAck)],
                [r for r in ordered if isinstance(r, CursorComplete)],
                [r for r in ordered if isinstance(r, PageTxCommit)])


class MemoryPagedQueueStore(PagedQueues):
    def __init__(self, pages: MemoryPages, records: CursorRecords, *,
                 summaries: Callable[[bytes], object] | None = None) -> None:
        super().__init__(pages, records, summaries=summaries)
        self.pages = pages


def _read_through(io: PageIO, records: Iterator[tuple[int, PagedRecord]], size: ReadSize,
                  arrived: Callable[[], None]) -> Iterator[tuple[int, PagedRecord] | None]:
    """Records as the file store hands them over a page-I/O worker: each `size` bytes of them
    wait for a read there, one read ahead. A seam (`page_io` is None in a broker), so the
    contract tests run the worker's "nothing now, woken later" over both stores alike."""
    ahead = ReadAhead(lambda _at, length: bytes(length), 1 << 62, io, arrived, size)
    at = budget = 0
    try:
        for entry in records:
            if budget <= 0:
                while ahead.fetch(at, size.bytes) is None:
                    yield None
                at += size.bytes
                budget = size.bytes
            budget -= len(entry[1].message) + RECORD_OVERHEAD
            yield entry
    finally:
        ahead.close()

"""Streaming readers: a queue read by offset ranges without consuming, acknowledged up to an
offset once the reader says it is done with them (Spark's micro-batches, docs/spark.md).

Offsets are message ids. They grow with time, are persisted with every message (journal
record and page record alike, `core/ids.py`) and a queue holds its messages in id order
(`core/paging.py`, "Order across a restart"), so an id is a stable, monotonic position in
the queue that a restarted broker still knows. A range is `(after, upto]`: the queue's
messages with `after < id <= upto`, in id order, those in memory (ready or held back) and
those still in page files alike.

Reading takes nothing: a range can be read again, after a reader or broker restart, until
it is committed. Committing `upto` acknowledges the range through the paths a STOMP ACK
takes (`Ledger.settle` for refs in memory, the page cursor's acknowledge for paged records,
so cursor-ack records, page completion and page deletion follow), one chunk per call.

Sharing with STOMP consumers: a read serves only the messages pending at that moment; a
message delivered to a consumer is skipped (it is the consumer's). The reader remembers the
ids it served this run (`StreamReader.served`), and a commit acknowledges only those, so a
message skipped while a consumer held it and given back before the commit stays in the
queue (below the stream's offset: for STOMP consumers from then on), never acknowledged
unread. What a broker restart forgets: a commit for a range not read since the restart
acknowledges every message of the range (matching the reader's selector).

Loop-only: every method runs on the event loop thread, except `PagedRange.records`, which
is handed to a worker thread (it reads page files, see its docstring).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pagemq.core.selector.properties import message_view
from pagemq.core.stream_reader import StreamReader

if TYPE_CHECKING:
    from pagemq.core.consumer import MessageRef
    from pagemq.core.ledger import Ledger
    from pagemq.core.message import Message
    from pagemq.core.queue import PagedSource, Queue
    from pagemq.core.selector import Selector
    from pagemq.storage.paging.page_format import PagedRecord
    from pagemq.storage.paging.queue_store import PageFrames, PageSpan

__all__ = ["CommitProgress", "PagedRange", "StreamReader", "commit_step", "memory_messages",
           "paged_range", "reader_of"]


def reader_of(queue: Queue, name: str) -> StreamReader:
    """The queue's reader named `name`, made on first use (kept with the queue)."""
    reader = queue.stream_readers.get(name)
    if reader is None:
        reader = queue.stream_readers[name] = StreamReader(name)
    return reader


def memory_messages(queue: Queue, after: int, upto: int | None) -> list[Message]:
    """The queue's pending messages in memory (ready and held back) in `(after, upto]`, by
    id. Delivering ones are not pending: they are the consumer's."""
    found = [ref.message for ref in _pending(queue)
             if ref.message.message_id > after and (upto is None or ref.message.message_id <= upto)]
    found.sort(key=_message_id)
    return found


def _pending(queue: Queue) -> Iterator[MessageRef]:
    yield from queue
    yield from queue.held


def _message_id(message: Message) -> int:
    return message.message_id


@dataclass(frozen=True, slots=True)
class PagedRange:
    """The page-file part of a queue, from its read position on, to read off the loop.

    `records` runs in a worker thread: it reads the page files (the page store's reader,
    the same bytes a cursor reads) and only looks up the queue's bookkeeping (acknowledged,
    claimed, lost ordinals; undecided transactions), never changes it. Records appended
    after the plan was made are not seen (the readable size is fixed per page when its read
    starts); pages deleted meanwhile (every queue done with them) end their part early.
    """

    pages: tuple[tuple[int, int], ...]  # (page number, first ordinal) in order
    read: Callable[[int, int], Iterator[tuple[int, PagedRecord]]]
    pending_tx: Callable[[int], bool]
    # Per page of `pages`: counted from the bookkeeping (core/stream_ranges.py), or None:
    # only a read can tell (the read position's page, the live page, an undecided transaction).
    spans: tuple[PageSpan | None, ...] = ()
    # One page's frames from an ordinal as byte spans with the queue's view of them
    # (`PagedQueue.frames`), for range reads that decode frames in bulk; None: use `records`.
    frames: Callable[[int, int], PageFrames | None] | None = None

    def records(self, after: int, upto: int | None, from_page: int = 0, to_page: int | None = None
                ) -> Iterator[tuple[int, int, PagedRecord]]:
        """(page, ordinal, record) with `after < id <= upto`, in order (ids grow along the
        pages: reading stops at the first id above `upto`), of the pages from `from_page`
        (to `to_page`)."""
        for page_no, first in self.pages_from(from_page, to_page):
            for found in self.page_records(page_no, first, after, upto):
                if found is None:
                    return
                yield page_no, *found

    def pages_from(self, from_page: int, to_page: int | None = None) -> list[tuple[int, int]]:
        """(page, first ordinal to read) of the plan's pages from `from_page` (to `to_page`)."""
        pages = self.pages[bisect.bisect_left(self.pages, (from_page,)):]
        return [page for page in pages if to_page is None or page[0] <= to_page]

    def page_records(self, page_no: int, ordinal: int, after: int, upto: int | None
                     ) -> Iterator[tuple[int, PagedRecord] | None]:
        """(ordinal, record) of one page from `ordinal` with `after < id`, undecided
        transactions left out; None, last, once an id is above `upto` (the range ends)."""
        for index, record in self.read(page_no, ordinal):
            if record.txid and self.pending_tx(record.txid):
                continue
            message_id = record.message_id
            if message_id <= after:
                continue
            if upto is not None and message_id > upto:
                yield None
                return
            yield index, record

    def last_id(self) -> int:
        """The id of the queue's last paged record (0: none), reading from the last page back
        (a page counted from the bookkeeping with records of the queue gives its last id
        unread: a range ending there holds the same records)."""
        spans = self.spans or (None,) * len(self.pages)
        for (page_no, first), span in zip(reversed(self.pages), reversed(spans), strict=True):
            if span is not None:
                if span.records:
                    return span.last_id
                continue
            last = 0
            for _ordinal, record in self.read(page_no, first):
                if not (record.txid and self.pending_tx(record.txid)):
                    last = record.message_id
            if last:
                return last
        return 0


def paged_range(cursor: PagedSource | None) -> PagedRange | None:
    """The plan of the queue's page-file part (None: it has none)."""
    if cursor is None or cursor.unread <= 0:
        return None
    return PagedRange(*cursor.stream_plan())


@dataclass(slots=True)
class CommitProgress:
    """What one `commit_step` did: acknowledged, kept (not served), and whether it is done or
    waits for the page store (a page read in its worker, a write, a transaction)."""

    acknowledged: int = 0
    kept: int = 0
    done: bool = False
    waiting: bool = False


def commit_step(queue: Queue, ledger: Ledger, reader: StreamReader, offset: int,
                selector: Selector | None, budget: int = 8192) -> CommitProgress:
    """Acknowledge up to `budget` of the queue's messages with id <= `offset` that `reader`
    was served (and `selector` matches); call again until `done` (after a short wait when
    `waiting`). Refs in memory go through `Ledger.settle`, paged records through the page
    cursor (`PageCursor.acknowledge_through`): the same bookkeeping as a STOMP ACK."""
    progress = CommitProgress()

    def wanted(message: Message) -> bool:
        return reader.was_served(message.message_id) and (
            selector is None or selector.matches_headers(message_view(message)))

    with queue.dispatch_held():  # (a reading woken mid-step would read served records in)
        _commit_step(queue, ledger, reader, offset, selector, budget, wanted, progress)
    if progress.done and (progress.acknowledged or progress.kept):
        queue.dispatch()
    return progress


def _commit_step(queue: Queue, ledger: Ledger, reader: StreamReader, offset: int,
                 selector: Selector | None, budget: int, wanted: Callable[[Message], bool],
                 progress: CommitProgress) -> None:
    due = [ref for ref in _pending(queue) if ref.message.message_id <= offset and wanted(ref.message)]
    if due:
        due = due[:budget]
        for ref in queue.take_pending(due):
            ledger.settle(queue, ref)
            progress.acknowledged += 1
    if progress.acknowledged >= budget:
        return
    cursor = queue.cursor
    if cursor is not None and cursor.unread > 0 and reader.pages:
        # Whole pages the reader was served: one "page complete" record each, nothing read.
        progress.acknowledged += cursor.complete_served(reader.pages_through(offset))
    if cursor is not None and cursor.unread > 0:
        acked, kept, state = cursor.acknowledge_through(offset, reader.was_served, selector,
                                                         budget - progress.acknowledged)
        progress.acknowledged += acked
        progress.kept += kept
        if state != "done":
            progress.waiting = state == "waiting"
            return
    progress.done = True
    reader.committed_to(offset)

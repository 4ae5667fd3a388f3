"""A browser's walk over a queue: what it shows, read without taking, and off the event loop.

A browser (`browser:true`) sees the queue in order without taking anything: the in-memory
refs (delivering, then pending) as a snapshot taken when it starts, then the page files from
the queue's read position at that moment (pages whose selector summary proves no match are
skipped unread), with refs held back at start-up shown at their place among them.

A page file is up to `page-size-bytes`: read on the loop it stalled every connection, so a
browser reads its pages in the page-I/O worker a chunk ahead (`PagedQueue.read_ahead`), as a
queue's own reading does. While the next chunk is being read the walk stops with `pending`
set, and `arrived` (given by whoever drives it) is called on the loop when it is in; the
same iterator then goes on. Its chunks are sized like a reader's (`PageCursor.chunk_bytes`:
the reader share of the memory budget / 8, 16-256 KiB), and the two chunks it may hold (one
being consumed, one read ahead) are charged to the budget while the walk is open
(`browse_read_ahead_bytes`); `close` releases them (the walk closes itself once done).

Without `arrived` (a management count of a filtered queue) the pages are read at once, on
the caller's thread: nothing is charged, nothing is pending.

Loop-only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pagemq.core.consumer import MessageRef
from pagemq.core.message_codec import decode_message
from pagemq.core.selector.properties import message_view
from pagemq.storage.paging.page_io import ReadSize

if TYPE_CHECKING:
    from pagemq.core.paging import PageCursor
    from pagemq.core.queue import Queue
    from pagemq.core.selector import Selector
    from pagemq.storage.paging.page_format import PagedRecord

__all__ = ["PART", "PagedBrowse", "QueueBrowse"]

PART = "browse_read_ahead_bytes"  # its name in the budget's parts (GET /api/broker memory)
CHUNKS_HELD = 2  # one chunk being consumed, the next read ahead


class PagedBrowse:
    """The paged part of a queue, from its read position when made, in order, read-only;
    the refs held back behind them at their place."""

    __slots__ = ("_arrived", "_charged", "_cursor", "_first", "_held", "_held_index", "_number",
                 "_pages", "_ready", "_records", "_selector", "_size", "pending")

    def __init__(self, cursor: PageCursor, selector: Selector | None,
                 arrived: Callable[[], None] | None = None) -> None:
        self._cursor = cursor
        self._selector = selector
        self._arrived = arrived
        book = cursor.book
        page_no, ordinal = book.position()
        self._first = (page_no, ordinal)
        self._pages = deque(book.pages_from(page_no))
        self._held = [ref for ref in cursor.queue.held
                      if selector is None or selector.matches_headers(message_view(ref.message))]
        self._held_index = 0
        self._records: Iterator[tuple[int, PagedRecord] | None] | None = None
        self._number = -1
        self._ready: MessageRef | None = None  # the next paged ref, behind held ones older
        self.pending = False  # stopped until `arrived`: a chunk is being read in the worker
        self._size = ReadSize(cursor.chunk_bytes())
        self._charged = 0
        if arrived is not None:
            self._charged = CHUNKS_HELD * self._size.bytes
            cursor.pager.budget.charge_part(PART, self._charged)

    def __iter__(self) -> PagedBrowse:
        return self

    def __next__(self) -> MessageRef:
        held, index = self._held, self._held_index
        if self._ready is None:
            self._ready = self._next_paged()
        ready = self._ready
        if ready is None:
            if self.pending:
                raise StopIteration  # `arrived` follows; iterate again then
            if index < len(held):
                self._held_index += 1
                return held[index]
            self.close()
            raise StopIteration
        if index < len(held) and held[index].message.message_id < ready.message.message_id:
            self._held_index += 1
            return held[index]
        self._ready = None
        return ready

    def _next_paged(self) -> MessageRef | None:
        self.pending = False
        cursor = self._cursor
        selector = self._selector
        pager = cursor.pager
        while True:
            records = self._records
            if records is None:
                if not self._pages:
                    return None
                number = self._pages.popleft()
                if selector is not None and not pager.may_match(number, selector):
                    continue
                start = self._first[1] if number == self._first[0] else 0
                # Claimed ones are shown here, at their place (the in-memory part skips them).
                if self._arrived is None:
                    records = cursor.book.read(number, start, claimed=True)
                else:
                    records = cursor.book.read_ahead(number, start, self._chunk_in, self._size, claimed=True)
                self._records, self._number = records, number
            for entry in records:
                if entry is None:
                    self.pending = True
                    return None
                index, record = entry
                if record.txid and pager.store.is_pending(record.txid):
                    continue  # not committed (yet): not in the queue
                message = decode_message(record.message, pager.address.name)
                if selector is None or selector.matches_headers(message_view(message)):
                    return MessageRef(message, (self._number, index))
            self._records = None

    def _chunk_in(self) -> None:
        if self.pending and self._arrived is not None:
            self._arrived()

    def close(self) -> None:
        """Done with (or given up): the read-ahead stops and its charge is released."""
        records, self._records = self._records, None
        if records is not None and hasattr(records, "close"):
            records.close()
        self._pages.clear()
        self.pending = False
        if self._charged:
            self._cursor.pager.budget.charge_part(PART, -self._charged)
            self._charged = 0


class QueueBrowse:
    """The whole queue in order without taking anything: delivering, pending, then paged.

    The in-memory part is a snapshot taken now; the paged part is read from the page files
    from the queue's read position at this moment, so no message is seen twice.
    """

    __slots__ = ("_memory", "_paged")

    def __init__(self, queue: Queue | None, selector: Selector | None,
                 arrived: Callable[[], None] | None = None) -> None:
        self._paged: PagedBrowse | None = None
        if queue is None:
            self._memory: Iterator[MessageRef] = iter(())
            return
        cursor = queue.cursor
        in_memory = [ref for c in queue.consumers for ref in c.in_flight.values()] + list(queue)
        if cursor is not None:
            # Refs a selective consumer claimed ahead are shown at their place in the page files.
            in_memory = [ref for ref in in_memory if not cursor.is_ahead(ref)]
            self._paged = cursor.browse(selector, arrived)
        snapshot = sorted(in_memory, key=lambda ref: ref.message.message_id)  # arrival order
        self._memory = (ref for ref in snapshot
                        if selector is None or selector.matches_headers(message_view(ref.message)))

    @property
    def pending(self) -> bool:
        """Stopped until `arrived` (a page chunk is being read), not done."""
        return self._paged is not None and self._paged.pending

    def __iter__(self) -> QueueBrowse:
        return self

    def __next__(self) -> MessageRef:
        for ref in self._memory:
            return ref
        if self._paged is None:
            raise StopIteration
        return next(self._paged)

    def close(self) -> None:
        if self._paged is not None:
            self._paged.close()

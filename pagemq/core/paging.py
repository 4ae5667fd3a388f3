"""Page mode for one address: delivery of the queues' paged messages.

An address in page mode appends every new message to its paged-queue store (one copy,
listing the queues it was routed to: `storage/paging/queue_store.PagedQueueStore`). The
store keeps each queue's place in that data: its read position, the records it claimed
ahead or acknowledged, which pages it is done with, the journal's cursor records, and the
deletion of pages every queue is done with. This module decides the delivery: each queue
reads its share back through its own `PageCursor`, only as far as `max-read-page-*` /
`prefetch-page-*` allow, so a backlog of millions costs memory for a few pages at most;
what is read is decoded, charged to the memory budgets and handed to the queue, a selective
consumer's look-ahead finds its matches beyond the read position, and a browser sees the
rest in order. The store is handed in (`AddressPager`), with the memory budget: nothing
here reaches into the broker.

Order across a restart: message ids grow with time, and a queue delivers in id order as it
received them. At start-up the refs the journal kept in memory are older or newer than the
messages a queue still has in page files; the newer ones are *held back* (`Queue.held`) and
let in as the cursor reads past the paged messages older than them (it looks at the next
paged record's id, `PagedQueue.peek`, even when its read limits stop it from taking that
record in), and a selective consumer's look-ahead takes them at their place among the paged
messages it scans.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import bisect
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from pagemq.core.consumer import MessageRef
from pagemq.core.memory import BROWSE_PART, PAGE_READ_PART
from pagemq.core.message_codec import decode_message, encode_message
from pagemq.core.selector.properties import message_view
from pagemq.storage.api import CursorAck, CursorComplete, PageTxCommit
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.page_io import AHEAD, CHUNK_BYTES, ReadSize
from pagemq.storage.paging.page_store import RecordsLost
from pagemq.storage.paging.queue_store import PagedQueue, PagedQueueStore

if TYPE_CHECKING:
    import asyncio

    from pagemq.core.address import Address
    from pagemq.core.consumer import Consumer
    from pagemq.core.message import Message
    from pagemq.core.queue import Queue, StreamPlan
    from pagemq.core.selector import Selector

log = logging.getLogger("pagemq.paging")

MIN_READ_CHUNK = 16 * 1024
"""The smallest page read a queue makes when many share a tight budget (see _read_in)."""


PAGE_READ_CHUNKS_HELD = 1 + AHEAD  # a queue's reading: the range being decoded, those read ahead
# A reader's page-read chunk: its budget share / this, so its chunks (PAGE_READ_CHUNKS_HELD)
# hold a quarter of its share. (With share / 8, 200 subscribers of a topic ran 4 % faster
# and peaked 16 MiB higher.)
READ_CHUNK_SHARE = 4 * PAGE_READ_CHUNKS_HELD
BROWSE_CHUNKS_HELD = 1 + AHEAD  # a browse: the range being decoded, those read ahead


class Budget(Protocol):
    """The broker-wide memory budget paged messages read back are charged to, shared fairly
    among the queues reading back (`core.memory.MemoryAccountant`)."""

    readers: int

    def charge_depaged(self, size: int) -> None: ...

    def release_depaged(self, size: int) -> None: ...

    def read_share(self) -> int: ...

    def reading_full(self) -> bool: ...

    def wait_to_read(self, retry: Callable[[], bool]) -> None: ...

    def charge_part(self, part: str, delta: int) -> None: ...


class _Scan:
    """Where a selective consumer's look-ahead stands in the page files."""

    __slots__ = ("held_seen", "ordinal", "page_no")

    def __init__(self, page_no: int, ordinal: int) -> None:
        self.page_no = page_no
        self.ordinal = ordinal
        self.held_seen = 0  # held-back refs up to this message id were offered already


class PageCursor:
    """One queue's delivery of its paged messages; its place in them is `book`'s."""

    def __init__(self, pager: AddressPager, queue: Queue, book: PagedQueue) -> None:
        self.pager = pager
        self.queue = queue
        self.book = book
        self.in_memory = 0         # read into memory and not yet acknowledged
        self.bytes_in_memory = 0
        # Refs recovered from the journal may still be held back behind paged messages, up to
        # this message id (see hold_back).
        self._holding = False
        self._hold_until = 0
        self._scans: dict[object, _Scan] = {}
        # Delivery counts of claimed refs that went back to disk unacknowledged.
        self._returned: dict[tuple[int, int], int] = {}
        self._waiting_for_budget = False
        self._reading = False  # a reader of the budget (see _update_reading)
        self._dropped = False
        self._read_ahead_charge = 0  # its page reads' chunks, charged while it is a reader
        self._share = -2  # the budget share its page reads were last sized for (_read_in)
        self.past_limit = False  # (queue.PagedSource)

    @property
    def unread(self) -> int:
        """Messages for this queue on disk, not read into memory."""
        return self.book.unread

    # -- reading side ---------------------------------------------------------------------

    def fill(self, queue: Queue) -> None:
        """Read paged refs into the queue while the depage limits allow; held-back refs older
        than the next paged one go in too (they are in memory already: no limit holds them)."""
        book = self.book
        if book.unread > 0 and not book.waiting_for_write:
            self._read_in(queue)
        if queue.held:
            self._release_due()
        self._update_reading()
        if book.unread <= 0:
            # Whoever read the last record (this read, or a selective consumer's look-ahead
            # that stopped for want of credit), the address may leave page mode now.
            self.pager.maybe_leave_paging()

    def _read_in(self, queue: Queue) -> None:
        settings = self.pager.address.settings
        max_bytes = settings.max_read_page_bytes
        max_messages = settings.max_read_page_messages
        prefetch_bytes = settings.prefetch_page_bytes
        prefetch_messages = settings.prefetch_page_messages
        held = queue.held
        book = self.book
        pager = self.pager
        budget = pager.budget
        share = budget.read_share()
        self.past_limit = False
        if share != self._share:  # the page reads and read-ahead of many readers fit the budget too
            self._share = share
            book.read_chunk_bytes = _chunk_for(share)
            self._charge_read_ahead()
        while book.unread > 0:
            if self.in_memory:
                over_read = ((max_bytes >= 0 and self.bytes_in_memory >= max_bytes)
                             or (max_messages >= 0 and self.in_memory >= max_messages))
                over_share = share >= 0 and self.bytes_in_memory >= share
                full = budget.reading_full()
                # Past max-read-page-bytes/-messages, past its fair share of the budget (more
                # once its consumers ack), or the budget is spent; but a consumer holding
                # nothing still gets one message, so one holding its window unacknowledged
                # does not starve the others (Artemis' max-read-page-bytes does).
                if over_read or over_share or full:
                    if queue.ready or not _idle_consumer(queue):
                        if full and not over_read:
                            self._wait_for_budget()
                        return
                    self.past_limit = True  # this one is for a consumer holding nothing
                if prefetch_messages >= 0 and queue.ready >= prefetch_messages:
                    return
                average = self.bytes_in_memory // self.in_memory
                if prefetch_bytes >= 0 and queue.ready * average >= prefetch_bytes:
                    return
            entry = book.take()
            if entry is None:
                return
            page_no, ordinal, record = entry
            message = pager.decoded(page_no, ordinal, record)
            ref = self._ref(message, page_no, ordinal)
            self._into_memory(message.memory_size)
            if held:
                self._release_below(message.message_id)
            queue.add_depaged(ref)

    def _wait_for_budget(self) -> None:
        if not self._waiting_for_budget:
            self._waiting_for_budget = True
            self.pager.budget.wait_to_read(self._budget_freed)

    def _budget_freed(self) -> bool:
        self._waiting_for_budget = False
        if self.queue.consumers:
            self.queue.dispatch()
        return not self.pager.budget.reading_full()

    # -- refs held back at start-up ---------------------------------------------------------

    def hold_back(self, oldest_paged: int) -> None:
        """Start-up, the journal's refs already in the queue: those newer than `oldest_paged`
        (no paged message of the queue is older: its first page's first id) wait in
        `queue.held`, by id, until reading passes the paged messages older than them."""
        queue = self.queue
        later = [ref for ref in queue if ref.message.message_id > oldest_paged]
        if not later:
            return
        queue.take_pending(later)
        later.sort(key=_message_id)
        for ref in later:
            ref.queued = True  # pending still, held back
        queue.held.extend(later)
        self._holding = True
        self._hold_until = later[-1].message.message_id

    def _release_due(self) -> None:
        """Let in the held-back refs older than the queue's next paged message; all of them
        when none is left to read (or the next was written after the restart: it is newer)."""
        book = self.book
        found = book.peek() if book.unread > 0 else None
        if found is None and book.reading:
            return  # the next paged one is being read: released when it is in (wake)
        self._release_below(found[2].message_id if found is not None else None)

    def release_held(self) -> None:
        """Every held-back ref into the queue: nothing paged before the restart is left."""
        self._release_below(None)

    def _release_below(self, bound: int | None) -> None:
        queue = self.queue
        held = queue.held
        while held and (bound is None or held[0].message.message_id < bound):
            queue.add_depaged(held.popleft())
        if bound is None or bound > self._hold_until:
            self._holding = False  # reading is past every ref that was held back

    def takes_back(self, ref: MessageRef) -> bool:
        """A ref from the journal returned unacknowledged: held back again, if paged messages
        older than it are still to be read (a selective consumer took it from among them), as
        `put_back` returns a paged ref to its place."""
        if not self._holding:
            return False
        book = self.book
        found = book.peek() if book.unread > 0 else None
        message_id = ref.message.message_id
        if found is None and not book.reading:
            return False
        if found is not None and message_id < found[2].message_id:
            return False  # (being read: held back until the next paged one is known)
        bisect.insort(self.queue.held, ref, key=_message_id)
        ref.queued = True
        for scan in self._scans.values():
            scan.held_seen = min(scan.held_seen, message_id - 1)
        return True

    def _offer_held(self, consumer: Consumer, scan: _Scan, bound: int | None) -> bool:
        """Deliver to a selective consumer the held-back refs it accepts that are older than
        the paged message `bound` (None: all), so it gets them at their place among the paged
        ones; whether it still has credit."""
        held = self.queue.held
        index = bisect.bisect_right(held, scan.held_seen, key=_message_id)
        now_ms = int(time.time() * 1000)
        while index < len(held):
            ref = held[index]
            message = ref.message
            if bound is not None and message.message_id >= bound:
                break
            if not consumer.has_credit():
                return False
            scan.held_seen = message.message_id
            if message.expired(now_ms) or not consumer.accepts(message):
                index += 1  # an expired one is expired once it is let into the queue
                continue
            del held[index]
            ref.queued = False
            consumer.deliver(ref)
        return consumer.has_credit()

    # -- selective consumers and browsers ---------------------------------------------------

    def look_ahead(self, consumer: Consumer) -> None:
        """Deliver paged messages matching `consumer`'s selector from beyond the queue's read
        position, so it never starves behind messages it does not want (Artemis and HornetQ
        do starve it). Pages whose summary cannot match are skipped without reading them.
        Held-back refs it accepts are delivered at their place among them."""
        if self.book.unread > 0 and consumer.has_credit():
            self._look_ahead(consumer)
        if self.queue.held:
            # Claims may have moved the queue's next paged message on: let in what is due.
            self._release_due()
            if self.book.unread <= 0:
                self.pager.maybe_leave_paging()

    def _look_ahead(self, consumer: Consumer) -> None:
        book = self.book
        start = book.position()
        scan = self._scans.get(consumer)
        if scan is None or (scan.page_no, scan.ordinal) < start:
            scan = self._scans[consumer] = _Scan(*start)
        for page_no in book.pages_from(scan.page_no):
            if page_no > scan.page_no:
                scan.page_no, scan.ordinal = page_no, 0
            if not self.pager.may_match(page_no, consumer.selector):
                continue
            complete = self.pager.store.fully_readable(page_no)  # before reading: see PagedQueue.peek
            if not self._scan_page(consumer, scan):
                return
            if not complete:
                # Records appended to this page are not readable yet: stay on it and look
                # again once they are (the queue's own read may be held by its limits and
                # never ask), rather than move on past them. It was written after the
                # restart: every held-back ref is older than what is still to come.
                if self.queue.held:
                    self._offer_held(consumer, scan, None)
                book.wait_for_write()
                return
        if self.queue.held and not self._offer_held(consumer, scan, None):
            return
        self.pager.maybe_leave_paging()

    def _scan_page(self, consumer: Consumer, scan: _Scan) -> bool:
        """Claim and deliver matches of one page; False once the consumer has no credit."""
        book = self.book
        address = self.pager.address.name
        page_no = scan.page_no
        for ordinal, record in book.read(page_no, scan.ordinal):
            scan.ordinal = ordinal + 1
            if record.txid and book.waits_for_commit(record.txid):
                scan.ordinal = ordinal  # looked at again once its transaction is decided
                return False
            if consumer.in_flight and self.pager.budget.reading_full():
                # The budget is spent: this one once memory is freed. A consumer holding
                # nothing still takes one: what fills the budget may be messages it does not
                # want (the queue's own, for consumers it does not have), and it would wait
                # for an acknowledgement that never comes.
                scan.ordinal = ordinal
                self._wait_for_budget()
                return False
            message = decode_message(record.message, address)
            if not consumer.accepts(message):
                continue
            if self.queue.held and not self._offer_held(consumer, scan, record.message_id):
                scan.ordinal = ordinal  # this one next time, after the older held-back ones
                return False
            book.claim(page_no, ordinal)
            self._into_memory(message.memory_size)
            consumer.deliver(self._ref(message, page_no, ordinal))
            if not consumer.has_credit():
                return False
        return True

    def _into_memory(self, size: int) -> None:
        """One record read from disk is now held in memory (charged to the budgets)."""
        self.in_memory += 1
        self.bytes_in_memory += size
        if not self._reading:
            self._update_reading()
        self.pager.charge(size)

    def _ref(self, message: Message, page_no: int, ordinal: int) -> MessageRef:
        ref = MessageRef(message, (page_no, ordinal))
        if self._returned:
            ref.delivery_count = self._returned.pop((page_no, ordinal), 0)
        return ref

    def claim_expired(self, page_no: int, ordinal: int, record: PagedRecord) -> MessageRef | None:
        """A due record still on disk only, claimed where it lies and read into memory for
        its move to the expiry address (core/paged_expiry.py); None if it is not there."""
        if not self.book.claim_unread(page_no, ordinal):
            return None
        message = self.pager.decoded(page_no, ordinal, record)
        self._into_memory(message.memory_size)
        return self._ref(message, page_no, ordinal)

    def is_ahead(self, ref: MessageRef) -> bool:
        """Claimed beyond the queue's read position: its place in the queue is on disk."""
        return ref.page_pos is not None and ref.page_pos >= self.book.position()

    def put_back(self, ref: MessageRef) -> None:
        """An unacknowledged ref claimed ahead returns to its place in the page files, so it
        is delivered again in queue order, not before the messages in front of it."""
        assert ref.page_pos is not None
        self._returned[ref.page_pos] = ref.delivery_count
        self._rewind_scans(*ref.page_pos)
        self.settle(ref, acked=False)  # last: it may wake readers (see settle)

    def _rewind_scans(self, page_no: int, ordinal: int) -> None:
        """A record is on disk again: selective consumers that looked past it look again."""
        for scan in self._scans.values():
            if (scan.page_no, scan.ordinal) > (page_no, ordinal):
                scan.page_no, scan.ordinal = page_no, ordinal

    def give_back(self, page_no: int, ordinal: int, message: Message) -> MessageRef | None:
        """A record claimed on disk and not read (a move that could not copy it) goes back:
        unclaimed, while the queue's reading has yet to reach it; once that has passed it
        (a consumer came meanwhile), it would never be read again: then it is a ref held in
        memory, for the caller to return to the queue."""
        if (page_no, ordinal) >= self.book.position():
            self.book.unclaim(page_no, ordinal)
            self._rewind_scans(page_no, ordinal)
            self.pager.rescan(page_no)
            return None
        self._into_memory(message.memory_size)
        return self._ref(message, page_no, ordinal)

    def forget(self, consumer: object) -> None:
        self._scans.pop(consumer, None)
        self._update_reading()

    def browse(self, selector: Selector | None, arrived: Callable[[], None] | None = None) -> PagedBrowse:
        """Paged messages of this queue from its read position *now* on, in order, read-only;
        the refs held back behind them at their place (core/browse.py: with `arrived`, read
        in the page-I/O worker and charged to the budget)."""
        return PagedBrowse(self, selector, arrived)

    def chunk_bytes(self) -> int:
        """What this queue reads of page files at a time: a twelfth of its share of the
        budget (16-256 KiB), so the reads of many readers fit the budget too."""
        return _chunk_for(self.pager.budget.read_share())

    # -- streaming readers (core/stream.py) --------------------------------------------------

    def stream_plan(self) -> StreamPlan:
        """What a range read of the page files needs, taken now on the loop: the queue's
        pages from its read position (with the first ordinal to read of each), the reading
        of one page (records, or its frames as bytes), and whether a transaction is still
        undecided (`core.stream.PagedRange`)."""
        book = self.book
        page_no, ordinal = book.position()
        pages = tuple((number, ordinal if number == page_no else 0) for number in book.pages_from(page_no))
        spans = tuple(book.span(number) for number, _first in pages)
        return pages, book.read, self.pager.store.is_pending, spans, book.frames

    def complete_served(self, pages: Iterable[tuple[int, Collection[int]]]) -> int:
        """Pages whose records a streaming reader was served (by ordinal) and committed: each
        one those are all the queue still has of, none in memory, is done with as a whole,
        with one "page complete" record instead of an ack per record
        (`PagedQueue.complete_served`). Returns how many records that acknowledged."""
        book = self.book
        queue = self.queue
        done = 0
        for page_no, ordinals in pages:
            done += book.complete_served(page_no, ordinals)
        if done:
            queue.counters.acknowledged += done
            if queue.held:
                self._release_due()
            if book.unread <= 0:
                self.pager.maybe_leave_paging()
            self._update_reading()
        return done


    def acknowledge_through(self, offset: int, served: Callable[[int], bool], selector: Selector | None,
                            budget: int) -> tuple[int, int, str]:
        """Take the queue's next paged records while their id is <= `offset`, up to `budget`:
        acknowledge each one `served` (by id) and matching `selector` where it lies (no
        memory charged; decoded only when there is a selector to apply), read the others into
        the queue as a fill would (they stay the queue's, pending). Returns (acknowledged,
        kept, state): state "done" (no record <= `offset` is left), "budget", or "waiting"
        (the next record is being read in the page-I/O worker, written, or behind an
        undecided transaction: ask again soon)."""
        book = self.book
        queue = self.queue
        acked = kept = 0
        address = self.pager.address.name
        while book.unread > 0:
            if acked + kept >= budget:
                return acked, kept, "budget"
            found = book.peek()
            if found is None:
                if book.reading or book.waiting_for_write:
                    return acked, kept, "waiting"
                return acked, kept, "waiting" if book.unread > 0 else "done"
            page_no, ordinal, record = found
            if record.message_id > offset:
                break
            book.take()
            message = None
            if selector is not None or not served(record.message_id):
                message = decode_message(record.message, address)
            if message is None or (served(record.message_id) and (
                    selector is None or selector.matches_headers(message_view(message)))):
                queue.counters.acknowledged += 1
                book.acknowledge(page_no, ordinal, journal=record.persistent)
                acked += 1
                continue
            ref = self._ref(message, page_no, ordinal)
            self._into_memory(message.memory_size)
            if queue.held:
                self._release_below(message.message_id)
            queue.add_depaged(ref)
            kept += 1
        if queue.held:
            self._release_due()
        if book.unread <= 0:
            self.pager.maybe_leave_paging()
        self._update_reading()
        return acked, kept, "done"

    # -- acknowledgements -----------------------------------------------------------------

    def settle(self, ref: MessageRef, *, acked: bool, journaled: bool = False) -> None:
        """A depaged ref leaves memory: acknowledged (durably) or to be read again later.

        `journaled`: the caller wrote the ack itself (a COMMIT's, in its journal transaction,
        from `ack_records`), so it is not gathered for the next cursor-acks record.

        The book is told first: freeing memory may wake a reader waiting for the budget at
        once, this queue's own among them, and its reading must find the record where it now
        is (a record unclaimed after that reading had passed it was never read again)."""
        position = ref.page_pos
        if not acked:
            if position is not None:
                self.pager.rescan(position[0])
            if position is not None and not self.book.unclaim(*position):
                self._returned.pop(position, None)  # damage took it: never read again
        else:
            assert position is not None
            # A non-persistent record is gone after a restart (the page store skips it and
            # counts persistent records only): a journaled ack of it would be counted against
            # a persistent one at recovery and hide it.
            self.book.acknowledge(*position, journal=ref.message.persistent and not journaled)
        size = ref.message.memory_size
        self.in_memory -= 1
        self.bytes_in_memory -= size
        if not self.in_memory:
            self._update_reading()
        self.pager.release(size)

    def ack_records(self, refs: list[MessageRef]) -> list[CursorAck]:
        """Cursor-ack records for `refs` (about to be settled with `journaled=True`), one per
        page, for the caller to write in its own journal transaction."""
        return self.book.ack_records([ref.page_pos for ref in refs
                                      if ref.message.persistent and ref.page_pos is not None])

    def records_changed(self) -> None:
        """Its records on disk were taken other than by its reading (an operator's purge or
        move): whether it is still a reader is asked again (a purged queue whose consumer
        stays holds nothing to read)."""
        self._update_reading()

    def drop(self) -> None:
        """The queue is deleted: it holds no page any more."""
        self.pager.drop(self)
        self._holding = False
        self.in_memory = 0  # (its refs were released; this is only the reader count)
        self._dropped = True
        self._update_reading()

    def _update_reading(self) -> None:
        """A reader shares the budget, its page reads' chunks (the one being taken, those
        read ahead: raw records, not yet messages) charged to it. It is one while it holds
        messages read back, and also between two windows of its consumers while it has
        records left on disk: its page reader keeps its chunks then. (Counted only while
        holding messages, 200 subscribers acknowledging in turn came and went as readers
        hundreds of times a second; the chunks they kept were charged to nobody, and the
        share of those left, and so their chunks, grew: 60 MiB of page reads against 11 MiB
        charged.) A deleted queue (`drop`) has neither."""
        reading = self.in_memory > 0 or (
            self.book.unread > 0 and not self._dropped and bool(self.queue.consumers))
        if reading == self._reading:
            return
        budget = self.pager.budget
        self._reading = reading
        budget.readers += 1 if reading else -1
        self._charge_read_ahead()

    def _charge_read_ahead(self) -> None:
        """Charge what its page reads hold at their current chunk size (none unless reading)."""
        charge = 0
        if self._reading:
            charge = PAGE_READ_CHUNKS_HELD * self.book.read_chunk_bytes
            share = self.pager.budget.read_share()
            if share >= 0:  # chunks are at least 16 KiB: under a tiny budget they would fill it
                charge = min(charge, share // 4)
        delta = charge - self._read_ahead_charge
        if delta:
            self._read_ahead_charge = charge
            self.pager.budget.charge_part(PAGE_READ_PART, delta)


def _idle_consumer(queue: Queue) -> bool:
    """A consumer of the queue that takes any message, has credit and holds nothing."""
    return any(c.selector is None and not c.in_flight and c.has_credit() for c in queue.consumers)


def _message_id(ref: MessageRef) -> int:
    return ref.message.message_id


class PagedBrowse:
    """The paged part of a queue, from its read position when made, in order, read-only;
    the refs held back behind them at their place. Read in the page-I/O worker when given
    `arrived`, its ranges charged to the budget while open (core/browse.py says why)."""

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
            self._charged = BROWSE_CHUNKS_HELD * self._size.bytes
            cursor.pager.budget.charge_part(BROWSE_PART, self._charged)

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
            self._cursor.pager.budget.charge_part(BROWSE_PART, -self._charged)
            self._charged = 0


class AddressPager:
    """One address's page mode: its paged-queue store, handed in, and its queues' cursors.

    It is the store's listener (`queue_store.QueueStoreListener`): a queue whose reading
    waited is dispatched again, withdrawn records are uncounted, damage is reported.
    """

    def __init__(self, address: Address, store: PagedQueueStore, budget: Budget) -> None:
        self.address = address
        self.store = store
        self.budget = budget
        self.cursors: dict[int, PageCursor] = {}
        # Messages read back and still held by some queue, by (page, ordinal): the queues of a
        # multicast address reading the same record share one message object, as they share
        # it when it never paged (seed 000: one copy per address).
        self._shared: weakref.WeakValueDictionary[tuple[int, int], Message] = weakref.WeakValueDictionary()
        # For the expiry scan of page files (core/paged_expiry.py): the soonest expiration
        # appended to each page in this run, the first page appended to in this run (pages
        # before it hold what earlier runs wrote), and per page and queue when its next
        # record expires, as last scanned (dropped when the page is appended to).
        self._expiring: dict[int, int] = {}
        self._first_append: int | None = None
        self._expiry_memo: dict[int, dict[int, int]] = {}
        # Pages being scanned: whether one changed meanwhile (its scan's finding is void).
        self._scanning: dict[int, bool] = {}
        store.listener = self

    def cursor(self, queue: Queue) -> PageCursor:
        cursor = self.cursors.get(queue.queue_id)
        if cursor is None:
            cursor = PageCursor(self, queue, self.store.queue(queue.queue_id))
            self.cursors[queue.queue_id] = queue.cursor = cursor
        return cursor

    def drop(self, cursor: PageCursor) -> None:
        self.store.drop_queue(cursor.queue.queue_id)
        self.cursors.pop(cursor.queue.queue_id, None)

    # -- writing --------------------------------------------------------------------------

    def page(self, items: list[tuple[Message, list[Queue]]], *, txid: int = 0, atomic: bool = True
             ) -> asyncio.Future[None] | None:
        """Append messages (several = one atomic batch, unless not `atomic`: then they only
        share the write) and hand them to their queues' cursors.

        With a `txid` the batch belongs to a transaction committed elsewhere (the journal, or
        other addresses too): counted now, read by no cursor until `release_tx` (or dropped
        by `abandon_tx`), and dropped at a restart unless its `PageTxCommit` record is durable.
        """
        records = []
        # How many messages each set of queues took: a transaction's thousand sends to one
        # queue are counted once, and share one queue-id tuple (which the store groups by).
        taken: dict[tuple[int, ...], int] = {}
        queues_of: dict[tuple[int, ...], list[Queue]] = {}
        queue_ids: tuple[int, ...] = ()
        soonest = 0
        for message, queues in items:
            expiration = message.expiration
            if expiration and (not soonest or expiration < soonest):
                soonest = expiration
            if len(queues) != 1:
                queue_ids = tuple([q.queue_id for q in queues])
            elif len(queue_ids) != 1 or queue_ids[0] != queues[0].queue_id:
                queue_ids = (queues[0].queue_id,)
            records.append(PagedRecord(message.message_id, queue_ids, message.persistent,
                                       encode_message(message), txid))
            count = taken.get(queue_ids)
            if count is None:
                taken[queue_ids] = 1
                queues_of[queue_ids] = queues
            else:
                taken[queue_ids] = count + 1
        appended = self.store.append(records, summary_input=[message for message, _queues in items],
                                     atomic=atomic)
        self._appended_to(appended.page_no, soonest)
        if txid:
            self.address.undecided[txid] = min(record.message_id for record in records)
        cursors = self.cursors
        woken: dict[Queue, None] = {}
        for queue_ids, count in taken.items():
            for queue in queues_of[queue_ids]:
                queue.counters.added += count
                if queue.queue_id not in cursors:
                    self.cursor(queue)
                woken[queue] = None
        for queue in woken:
            if queue.consumers:
                queue.dispatch()
        return appended.durable

    # -- the store's listener ---------------------------------------------------------------

    def wake(self, queue_id: int) -> None:
        cursor = self.cursors.get(queue_id)
        if cursor is not None:
            cursor.queue.dispatch()

    def withdrawn(self, queue_ids: list[int]) -> None:
        for queue_id in queue_ids:
            cursor = self.cursors.get(queue_id)
            if cursor is not None:
                cursor.queue.counters.added -= 1

    def records_lost(self, lost: RecordsLost, gone: dict[int, int]) -> None:
        """Damage found while reading a page took records: the queues no longer count those
        they had not read (the store saw to it), so the address's page mode no longer waits
        for messages nobody can receive."""
        dropped = [f"{self.cursors[queue_id].queue.name!r} {count}" for queue_id, count in gone.items()
                   if queue_id in self.cursors]
        log.warning("paging %r: %s: %d record(s) lost to damage; no longer counted as messages of "
                    "queues: %s", self.address.name, lost.path, lost.records,
                    ", ".join(dropped) or "none (all were read or acknowledged before)")
        self.maybe_leave_paging()
        for queue_id in lost.queues:
            cursor = self.cursors.get(queue_id)
            if cursor is not None and cursor.queue.consumers:
                cursor.queue.dispatch()

    # -- transactions (the broker's COMMIT) -------------------------------------------------

    def commit_tx(self, txid: int) -> PageTxCommit:
        return self.store.commit_tx(txid)

    def release_tx(self, txid: int) -> None:
        self.address.undecided.pop(txid, None)
        self.store.release_tx(txid)

    def abandon_tx(self, txid: int, *, written: bool) -> None:
        self.address.undecided.pop(txid, None)
        self.store.abandon_tx(txid, written=written)

    # -- expiry of paged messages (core/paged_expiry.py) -----------------------------------

    def _appended_to(self, page_no: int, soonest: int) -> None:
        if self._first_append is None:
            self._first_append = page_no
        if soonest:
            known = self._expiring.get(page_no)
            if known is None or soonest < known:
                self._expiring[page_no] = soonest
        self.rescan(page_no)

    def rescan(self, page_no: int) -> None:
        """A record was added to the page, or returned to it (unacknowledged): what a scan
        of it found (or is finding, reading what was there when it began) no longer holds."""
        if self._scanning and page_no in self._scanning:
            self._scanning[page_no] = True
        if self._expiry_memo:
            self._expiry_memo.pop(page_no, None)

    def scan_begins(self, page_no: int) -> None:
        """A scan of the page begins: a change from now on voids what it finds."""
        self._scanning[page_no] = False

    def may_expire(self, page_no: int, queue_id: int, now_ms: int, due: Selector) -> bool:
        """False when the page cannot hold a record of the queue due to expire by `now_ms`:
        its last scan found none before a later time; it was written in this run with no
        message that expires by then (known without a look at the store: a scan of
        thousands of paging addresses costs microseconds each); or, an earlier run's, its
        summary's `JMSExpiration` range (`due` selects the due ones) or the soonest
        expiration its read at start-up found rules it out."""
        memo = self._expiry_memo.get(page_no)
        if memo is not None and queue_id in memo:
            return memo[queue_id] <= now_ms
        if self._first_append is not None and page_no >= self._first_append:
            soonest = self._expiring.get(page_no)  # written in this run (a run writes new pages)
            return soonest is not None and soonest <= now_ms
        summary = self.store.summary(page_no)
        if summary is not None:
            return due.may_match(summary)  # type: ignore[arg-type]
        scanned = self.store.soonest_expiration(page_no)  # a page read whole at start-up
        return scanned is None or 0 < scanned <= now_ms  # None: not known, read to know

    def scanned(self, page_no: int, queue_id: int, next_due: int | None) -> None:
        """The scan of the page that `scan_begins` began ended; with `next_due`, it read the
        queue's records whole: none is due before then (ms since the epoch) until the page
        changes. Not noted if it changed while it was being read: the read did not see that."""
        changed = self._scanning.pop(page_no, True)
        if next_due is not None and not changed:
            self._expiry_memo.setdefault(page_no, {})[queue_id] = next_due

    def forget_scans(self, pages: Collection[int]) -> None:
        """Memos of pages no longer held (deleted, or read past) go."""
        for page_no in [p for p in self._expiry_memo if p not in pages]:
            del self._expiry_memo[page_no]
        for page_no in [p for p in self._expiring if p not in pages]:
            del self._expiring[page_no]

    def may_match(self, page_no: int, selector: Selector | None) -> bool:
        """False when the page's summary proves no message in it matches `selector`."""
        if selector is None:
            return True
        summary = self.store.summary(page_no)
        return summary is None or selector.may_match(summary)  # type: ignore[arg-type]

    # -- memory ---------------------------------------------------------------------------

    def charge(self, size: int) -> None:
        self.address.charge(size)
        self.budget.charge_depaged(size)

    def release(self, size: int) -> None:
        self.address.release(size)
        self.budget.release_depaged(size)

    def decoded(self, page_no: int, ordinal: int, record: PagedRecord) -> Message:
        """The message of a record read back; one object for every queue of the address that
        holds it. Each queue still charges it to the budget: the sum overstates what a shared
        message costs, never understates it."""
        if len(self.cursors) < 2:
            return decode_message(record.message, self.address.name)
        key = (page_no, ordinal)
        message = self._shared.get(key)
        if message is None:
            message = self._shared[key] = decode_message(record.message, self.address.name)
        return message

    def maybe_leave_paging(self) -> None:
        """The backlog is read into memory: new messages can stay in memory again (FIFO holds).

        Any ref still held back goes into its queue first: a new message must come after it.
        """
        if self.address.paging and all(c.book.unread == 0 for c in self.cursors.values()):
            for cursor in self.cursors.values():
                if cursor.queue.held:
                    cursor.release_held()
                    cursor.queue.dispatch()
            self.address.paging = False
            log.info("address %r left page mode", self.address.name)

    @property
    def messages_paged(self) -> int:
        return self.store.messages_paged()

    @property
    def records_on_disk(self) -> int:
        return self.store.records_on_disk

    def room(self, size: int) -> int:
        """What an append starting with `size` bytes may take within page-size-bytes."""
        return self.store.room(size)

    @property
    def bytes_on_disk(self) -> int:
        return self.store.bytes_on_disk

    @property
    def records_held(self) -> int:
        """What page limits count: records on disk not yet acknowledged by every queue."""
        return self.store.records_held

    @property
    def bytes_held(self) -> int:
        return self.store.bytes_held

    def page_files(self) -> int:
        return self.store.page_files()

    # -- start-up -------------------------------------------------------------------------

    def recover(self, acks: Sequence[CursorAck], completes: Sequence[CursorComplete],
                tx_commits: Sequence[PageTxCommit]) -> list[int]:
        """Rebuild the queues' paged messages from the store (`PagedQueueStore.recover`);
        the journal's refs are in the queues already: those newer than a queue's oldest paged
        message wait for its cursor to read past it (FIFO across the restart). Returns the
        records to delete once the journal runs (their page is gone)."""
        queues = {q.queue_id: q for q in self.address.queues.values()}
        recovery = self.store.recover(queues.keys(), acks, completes, tx_commits)
        for queue_id, recovered in recovery.queues.items():
            queue = queues[queue_id]
            queue.counters.added += recovered.paged
            self.cursor(queue).hold_back(recovered.first_id)
        self.address.paging = self.messages_paged > 0
        return recovery.stale


def _chunk_for(share: int) -> int:
    """Page-read chunk for a reader's budget share: the chunks it holds make a quarter of
    the share (16-256 KiB each; no limit: 256 KiB)."""
    if share < 0:
        return CHUNK_BYTES
    return min(CHUNK_BYTES, max(MIN_READ_CHUNK, share // READ_CHUNK_SHARE))

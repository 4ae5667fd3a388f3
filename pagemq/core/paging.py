"""Page mode for one address: what goes to page files and how each queue reads it back.

An address in page mode appends every new message to its page store (one copy, listing the
queues it was routed to). Each queue reads its share back through its own `PageCursor`,
only as far as `max-read-page-*` / `prefetch-page-*` allow, so a backlog of millions costs
memory for a few pages at most. Acknowledgements of paged messages are gathered per page and
written to the journal as one small cursor record per loop turn (before any receipt that
promises them); once a queue has acknowledged every message of a page meant for it, one
"page complete" record replaces its acks, and when every queue is done with a page the page
file goes (in the middle of the stream too). Start-up rebuilds all of this from the page
store's per-page summaries and the cursor records: no page body is read.

Order across a restart: message ids grow with time, and a queue delivers in id order as it
received them. At start-up the refs the journal kept in memory are older or newer than the
messages a queue still has in page files; the newer ones are *held back* (`Queue.held`) and
let in as the cursor reads past the paged messages older than them (it looks at the next
paged record's id, `PageCursor._next_record`, even when its read limits stop it from taking
that record in), and a selective consumer's look-ahead takes them at their place among the
paged messages it scans.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from pagemq.core.consumer import MessageRef
from pagemq.core.selector.properties import message_view
from pagemq.core.selector.summary import PageSummary
from pagemq.storage.api import CursorAck, CursorComplete, MessageStore, PageTxCommit
from pagemq.storage.message_codec import decode_message, encode_message
from pagemq.storage.paging.page_store import PagedRecord, PageInfo, PageStore, RecordsLost

if TYPE_CHECKING:
    import asyncio

    from pagemq.core.address import Address
    from pagemq.core.consumer import Consumer
    from pagemq.core.memory import MemoryAccountant
    from pagemq.core.message import Message
    from pagemq.core.queue import Queue
    from pagemq.core.selector import Selector

log = logging.getLogger("pagemq.paging")


class PagingHost(Protocol):
    """What paging needs of the broker around it, and nothing more: the journal for cursor
    records, ids for them, the memory budget, and the batching of cursor acks."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def memory(self) -> MemoryAccountant: ...
    @property
    def stale_records(self) -> list[int]: ...
    def new_id(self) -> int: ...
    def acks_to_write(self, cursor: PageCursor) -> None: ...
    def forget_record(self, record_id: int) -> None: ...


_NONE: frozenset[int] = frozenset()


class CursorPage:
    """One page as one queue sees it: how many of its records are for the queue, which are acked."""

    __slots__ = ("ack_ids", "acked", "claimed", "count", "lost", "read", "unwritten")

    def __init__(self, count: int = 0) -> None:
        self.count = count
        self.acked: set[int] = set()
        self.ack_ids: list[int] = []
        # Acked this loop turn, not yet in a cursor-acks record (see PageCursor.write_acks).
        self.unwritten: list[int] = []
        # Read ahead of the queue's position by a selective consumer: in memory, skip them.
        self.claimed: set[int] = set()
        # Read into memory by the queue's own reading (acknowledged or not) in this run: a
        # record damaged after it was read is not one this queue has lost.
        self.read: set[int] = set()
        # Ordinals damage took (any queue's; see PageCursor.records_lost).
        self.lost: frozenset[int] | set[int] = _NONE


class _Scan:
    """Where a selective consumer's look-ahead stands in the page files."""

    __slots__ = ("held_seen", "ordinal", "page_no")

    def __init__(self, page_no: int, ordinal: int) -> None:
        self.page_no = page_no
        self.ordinal = ordinal
        self.held_seen = 0  # held-back refs up to this message id were offered already


class PageCursor:
    def __init__(self, pager: AddressPager, queue: Queue) -> None:
        self.pager = pager
        self.queue = queue
        self.pages: dict[int, CursorPage] = {}
        self.unread = 0            # messages for this queue on disk, not read into memory
        self.in_memory = 0         # read into memory and not yet acknowledged
        self.bytes_in_memory = 0
        self._read_page = -1       # page being read; -1 = before the first
        self._read_ordinal = 0     # next ordinal to read in it
        self._page_read_out = False
        # The record at (_read_page, _read_ordinal), read from the page but not yet taken in:
        # its message id says which held-back refs are older (see _next_record).
        self._peeked: tuple[int, PagedRecord] | None = None
        # Refs recovered from the journal may still be held back behind paged messages, up to
        # this message id (see hold_back).
        self._holding = False
        self._hold_until = 0
        self._reader: Iterator[tuple[int, PagedRecord]] | None = None
        # The reader covers the whole page: made after it closed and every batch was written.
        self._reader_final = False
        self._waiting_for_write = False
        self._scans: dict[object, _Scan] = {}
        # Delivery counts of claimed refs that went back to disk unacknowledged.
        self._returned: dict[tuple[int, int], int] = {}

    # -- writing side ---------------------------------------------------------------------

    def on_paged(self, page_no: int) -> None:
        page = self.pages.get(page_no)
        if page is None:
            page = self.pages[page_no] = CursorPage()
        page.count += 1
        self.unread += 1

    # -- reading side ---------------------------------------------------------------------

    def fill(self, queue: Queue) -> None:
        """Read paged refs into the queue while the depage limits allow; held-back refs older
        than the next paged one go in too (they are in memory already: no limit holds them)."""
        if self.unread > 0 and not self._waiting_for_write:
            self._read_in(queue)
        if queue.held:
            self._release_due()
        if self.unread <= 0:
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
        while self.unread > 0:
            if self.in_memory:
                if max_bytes >= 0 and self.bytes_in_memory >= max_bytes:
                    return
                if max_messages >= 0 and self.in_memory >= max_messages:
                    return
                if prefetch_messages >= 0 and queue.ready >= prefetch_messages:
                    return
                average = self.bytes_in_memory // self.in_memory
                if prefetch_bytes >= 0 and queue.ready * average >= prefetch_bytes:
                    return
            ref = self._next_ref()
            if ref is None:
                return
            self._into_memory(ref.message.memory_size)
            if held:
                self._release_below(ref.message.message_id)
            queue.add_depaged(ref)

    def _next_ref(self) -> MessageRef | None:
        """The next unacknowledged record for this queue, taken in (decoded, position passed)."""
        found = self._next_record()
        if found is None:
            return None
        ordinal, record = found
        self._peeked = None
        self._read_ordinal = ordinal + 1
        message = decode_message(record.message, self.pager.address.name)
        page = self.pages.get(self._read_page)
        if page is not None:
            page.read.add(ordinal)
        return self._ref(message, self._read_page, ordinal)

    def _next_record(self) -> tuple[int, PagedRecord] | None:
        """The next unacknowledged record for this queue, from (page, ordinal) onwards, not
        taken: the read position stays on it (a selective consumer may still claim it)."""
        peeked = self._peeked
        if peeked is not None:
            page = self.pages.get(self._read_page)
            ordinal = peeked[0]
            if (page is not None and ordinal not in page.acked and ordinal not in page.claimed
                    and ordinal not in page.lost):
                return peeked
            self._peeked = None  # claimed meanwhile: read on
            self._read_ordinal = ordinal + 1
        queue_id = self.queue.queue_id
        store = self.pager.store
        fresh = False  # the reader was made in this call (nothing was appended since)
        saw_all = False  # ... and every record appended was readable before it was made
        while True:
            if self._reader is None:
                fresh = True
                if self._read_page not in self.pages or self._page_read_out:
                    page_no = self._next_page()
                    if page_no is None:
                        return None
                    self._read_page, self._read_ordinal = page_no, 0
                    self._page_read_out = False
                # Asked before the reader is made: the writer thread may make more readable
                # meanwhile, and a later answer would not be about what this reader sees.
                saw_all = store.fully_readable(self._read_page)
                self._reader_final = saw_all and self._read_page != store.live_page_no()
                self._reader = store.read_page(self._read_page, self._read_ordinal)
            page = self.pages.get(self._read_page)
            for ordinal, record in self._reader:
                self._read_ordinal = ordinal + 1
                if page is None or queue_id not in record.queue_ids or ordinal in page.acked:
                    continue
                if ordinal in page.claimed:
                    continue  # a selective consumer took it ahead of us; already counted
                if ordinal in page.lost:
                    continue  # a reader made before the damage; it no longer counts (records_lost)
                self._read_ordinal = ordinal
                if record.txid and self.pager.wait_for_commit(record.txid, self):
                    # Its transaction is not committed yet: nothing behind it goes first.
                    self._reader = None
                    return None
                self._peeked = (ordinal, record)
                return self._peeked
            self._reader = None
            if self._reader_final:
                self._page_read_out = True
                continue
            if fresh and saw_all:
                return None  # the live page: everything appended so far is read
            # The reader saw the page as it was when made: records may have been appended or
            # written since (and the page closed). Read on once what was appended is written.
            if not store.fully_readable(self._read_page):
                self._wait_for_write()
                return None

    def _next_page(self) -> int | None:
        later = [p for p in self.pages if p > self._read_page]
        return min(later) if later else None

    def _wait_for_write(self) -> None:
        if self._waiting_for_write:
            return
        self._waiting_for_write = True
        self.pager.store.flush().add_done_callback(self._written)

    def _written(self, _future: asyncio.Future[None]) -> None:
        self._waiting_for_write = False
        self.queue.dispatch()

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
        found = self._next_record() if self.unread > 0 else None
        self._release_below(found[1].message_id if found is not None else None)

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
        found = self._next_record() if self.unread > 0 else None
        message_id = ref.message.message_id
        if found is None or message_id < found[1].message_id:
            return False
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

    def _position(self) -> tuple[int, int]:
        """The queue's read position: everything before it is in memory or acknowledged."""
        if self._read_page in self.pages and not self._page_read_out:
            return self._read_page, self._read_ordinal
        later = self._next_page()
        return (later, 0) if later is not None else (self._read_page + 1, 0)

    def look_ahead(self, consumer: Consumer) -> None:
        """Deliver paged messages matching `consumer`'s selector from beyond the queue's read
        position, so it never starves behind messages it does not want (Artemis and HornetQ
        do starve it). Pages whose summary cannot match are skipped without reading them.
        Held-back refs it accepts are delivered at their place among them."""
        if self.unread > 0 and consumer.has_credit():
            self._look_ahead(consumer)
        if self.queue.held:
            # Claims may have moved the queue's next paged message on: let in what is due.
            self._release_due()
            if self.unread <= 0:
                self.pager.maybe_leave_paging()

    def _look_ahead(self, consumer: Consumer) -> None:
        start = self._position()
        scan = self._scans.get(consumer)
        if scan is None or (scan.page_no, scan.ordinal) < start:
            scan = self._scans[consumer] = _Scan(*start)
        store = self.pager.store
        live = store.live_page_no()
        for page_no in sorted(p for p in self.pages if p >= scan.page_no):
            if page_no > scan.page_no:
                scan.page_no, scan.ordinal = page_no, 0
            page = self.pages.get(page_no)
            if page is None:
                continue
            if page_no != live and not self.pager.may_match(page_no, consumer.selector):
                continue
            complete = store.fully_readable(page_no)  # before reading: see _next_record
            if not self._scan_page(consumer, scan, page):
                return
            if not complete:
                # Records appended to this page are not readable yet: stay on it and look
                # again once they are (the queue's own read may be held by its limits and
                # never ask), rather than move on past them. It was written after the
                # restart: every held-back ref is older than what is still to come.
                if self.queue.held:
                    self._offer_held(consumer, scan, None)
                self._wait_for_write()
                return
        if self.queue.held and not self._offer_held(consumer, scan, None):
            return
        self.pager.maybe_leave_paging()

    def _scan_page(self, consumer: Consumer, scan: _Scan, page: CursorPage) -> bool:
        """Claim and deliver matches of one page; False once the consumer has no credit."""
        queue_id = self.queue.queue_id
        address = self.pager.address.name
        page_no = scan.page_no
        for ordinal, record in self.pager.store.read_page(page_no, scan.ordinal):
            scan.ordinal = ordinal + 1
            if (queue_id not in record.queue_ids or ordinal in page.acked or ordinal in page.claimed
                    or ordinal in page.lost):
                continue
            if record.txid and self.pager.wait_for_commit(record.txid, self):
                scan.ordinal = ordinal  # looked at again once its transaction is decided
                return False
            message = decode_message(record.message, address)
            if not consumer.accepts(message):
                continue
            if self.queue.held and not self._offer_held(consumer, scan, record.message_id):
                scan.ordinal = ordinal  # this one next time, after the older held-back ones
                return False
            page.claimed.add(ordinal)
            self._into_memory(message.memory_size)
            consumer.deliver(self._ref(message, page_no, ordinal))
            if not consumer.has_credit():
                return False
        return True

    def _into_memory(self, size: int) -> None:
        """One record read from disk is now held in memory (charged to the budgets)."""
        self.unread -= 1
        self.in_memory += 1
        self.bytes_in_memory += size
        self.pager.charge(size)

    def _ref(self, message: Message, page_no: int, ordinal: int) -> MessageRef:
        ref = MessageRef(message, (page_no, ordinal))
        if self._returned:
            ref.delivery_count = self._returned.pop((page_no, ordinal), 0)
        return ref

    def is_ahead(self, ref: MessageRef) -> bool:
        """Claimed beyond the queue's read position: its place in the queue is on disk."""
        return ref.page_pos is not None and ref.page_pos >= self._position()

    def put_back(self, ref: MessageRef) -> None:
        """An unacknowledged ref claimed ahead returns to its place in the page files, so it
        is delivered again in queue order, not before the messages in front of it."""
        assert ref.page_pos is not None
        self._returned[ref.page_pos] = ref.delivery_count
        self.settle(ref, acked=False)
        page_no, ordinal = ref.page_pos
        for scan in self._scans.values():
            if (scan.page_no, scan.ordinal) > (page_no, ordinal):
                scan.page_no, scan.ordinal = page_no, ordinal

    def forget(self, consumer: object) -> None:
        self._scans.pop(consumer, None)

    def browse(self, selector: Selector | None) -> Iterator[MessageRef]:
        """Paged messages of this queue from its read position *now* on, in order, read-only;
        the refs held back behind them at their place."""
        paged = self._browse_from(*self._position(), selector)
        if not self.queue.held:
            return paged
        held = [ref for ref in self.queue.held
                if selector is None or selector.matches_headers(message_view(ref.message))]
        return _merged(paged, held)

    def _browse_from(self, page_no: int, ordinal: int, selector: Selector | None) -> Iterator[MessageRef]:
        queue_id = self.queue.queue_id
        address = self.pager.address.name
        store = self.pager.store
        for number in sorted(p for p in self.pages if p >= page_no):
            page = self.pages.get(number)
            if page is None or (
                selector is not None and number != store.live_page_no()
                and not self.pager.may_match(number, selector)
            ):
                continue
            start = ordinal if number == page_no else 0
            for index, record in store.read_page(number, start):
                # Claimed ones are shown here, at their place (the in-memory part skips them).
                if queue_id not in record.queue_ids or index in page.acked or index in page.lost:
                    continue
                if record.txid and self.pager.is_pending(record.txid):
                    continue  # not committed (yet): not in the queue
                message = decode_message(record.message, address)
                if selector is None or selector.matches_headers(message_view(message)):
                    yield MessageRef(message, (number, index))

    # -- acknowledgements -----------------------------------------------------------------

    def settle(self, ref: MessageRef, *, acked: bool, journaled: bool = False) -> None:
        """A depaged ref leaves memory: acknowledged (durably) or to be read again later.

        `journaled`: the caller wrote the ack itself (a COMMIT's, in its journal transaction,
        from `ack_records`), so it is not gathered for the next cursor-acks record."""
        size = ref.message.memory_size
        self.in_memory -= 1
        self.bytes_in_memory -= size
        self.pager.release(size)
        if not acked:
            if ref.page_pos is not None:
                page_no, ordinal = ref.page_pos
                page = self.pages.get(page_no)
                if page is not None and ordinal in page.claimed:
                    page.claimed.discard(ordinal)
                    if ordinal not in page.lost:
                        self.unread += 1  # back on disk only, for whoever reads that position next
                    else:  # its bytes were damaged since it was read: never to be read again
                        self._returned.pop(ref.page_pos, None)
                        page.count -= 1
                        self._maybe_done(page_no, page)
            return
        assert ref.page_pos is not None
        page_no, ordinal = ref.page_pos
        page = self.pages.get(page_no)
        if page is None or ordinal in page.acked:
            return
        page.claimed.discard(ordinal)
        page.acked.add(ordinal)
        if ref.message.persistent and not journaled:
            # A non-persistent record is gone after a restart (the page store skips it and
            # counts persistent records only): a journaled ack of it would be counted
            # against a persistent one at recovery and hide it.
            if not page.unwritten:
                self.pager.broker.acks_to_write(self)
            page.unwritten.append(ordinal)
        self._maybe_done(page_no, page)

    def _maybe_done(self, page_no: int, page: CursorPage) -> None:
        if len(page.acked) >= page.count:
            if page_no != self.pager.store.live_page_no():
                self._complete(page_no)
            else:
                self.pager.live_page_caught_up(page_no)

    def records_lost(self, page_no: int, lost: int, ordinals: frozenset[int]) -> int:
        """Damage took `lost` of this queue's records of the page, somewhere in `ordinals`:
        those still unread are never to be read, so they stop counting (unread, the page's
        count). Those it had read or claimed (in memory) or acknowledged stay as they are.
        Returns how many stopped counting."""
        page = self.pages.get(page_no)
        if page is None:
            return 0
        known = sum(1 for o in ordinals if o in page.acked or o in page.claimed or o in page.read)
        gone = max(0, min(lost - known, self.unread))
        page.lost = ordinals if not page.lost else page.lost | ordinals
        page.count -= gone
        self.unread -= gone
        return gone

    def write_acks(self) -> None:
        """Write the acks gathered since the last call, one cursor-acks record per page.

        Called once per loop turn (and before any receipt that promises them), so a burst
        of ACK frames costs one journal record rather than one per message.
        """
        store = self.pager.broker.store
        for page_no, page in self.pages.items():
            if page.unwritten:
                self._write_page_acks(store, page_no, page)

    def ack_records(self, refs: list[MessageRef]) -> list[CursorAck]:
        """Cursor-ack records for `refs` (about to be settled with `journaled=True`), one per
        page, for the caller to write in its own journal transaction."""
        by_page: dict[int, list[int]] = {}
        for ref in refs:
            assert ref.page_pos is not None
            page_no, ordinal = ref.page_pos
            page = self.pages.get(page_no)
            if ref.message.persistent and page is not None and ordinal not in page.acked:
                by_page.setdefault(page_no, []).append(ordinal)
        records = []
        for page_no, ordinals in by_page.items():
            record = CursorAck(self.pager.broker.new_id(), self.queue.queue_id, page_no, tuple(ordinals))
            self.pages[page_no].ack_ids.append(record.record_id)
            records.append(record)
        return records

    def void(self, page_no: int, ordinals: list[int]) -> None:
        """Records of a transaction that never committed: not this queue's any more (never
        read, counted or journaled; at a restart the missing commit record voids them again)."""
        page = self.pages.get(page_no)
        if page is None:
            return
        for ordinal in ordinals:
            if ordinal not in page.acked:
                page.acked.add(ordinal)
                self.unread -= 1
                self.queue.counters.added -= 1
        if len(page.acked) >= page.count:
            if page_no != self.pager.store.live_page_no():
                self._complete(page_no)
            else:
                self.pager.live_page_caught_up(page_no)

    def _write_page_acks(self, store: MessageStore, page_no: int, page: CursorPage) -> None:
        record_id = self.pager.broker.new_id()
        store.cursor_ack(CursorAck(record_id, self.queue.queue_id, page_no, tuple(page.unwritten)))
        page.ack_ids.append(record_id)
        page.unwritten.clear()

    def complete_closed(self, live_page_no: int) -> None:
        """Complete the pages before the live one that this queue has fully acknowledged.

        A page is never completed while it is the live page: records for this queue may
        still be appended to it, and a "complete" record would hide them at the next start.
        """
        for page_no in [p for p, page in self.pages.items()
                        if p < live_page_no and len(page.acked) >= page.count]:
            self._complete(page_no)

    def _complete(self, page_no: int) -> None:
        page = self.pages[page_no]
        if page.unwritten:
            # If every queue is now done, the page file's deletion (not in the journal)
            # would stand for these acks: written first, a receipt's flush covers them.
            self._write_page_acks(self.pager.broker.store, page_no, page)
        del self.pages[page_no]
        if self._read_page == page_no:
            self._reader = None  # nothing left for us in it
            self._peeked = None
        self.pager.queue_done_with(self.queue.queue_id, page_no, page.ack_ids)

    def drop(self) -> None:
        """The queue is deleted: it holds no page any more."""
        for page_no in list(self.pages):
            page = self.pages.pop(page_no)
            self.pager.queue_done_with(self.queue.queue_id, page_no, page.ack_ids)
        self.unread = 0
        self._reader = self._peeked = None
        self._holding = False


def _message_id(ref: MessageRef) -> int:
    return ref.message.message_id


def _merged(paged: Iterator[MessageRef], held: list[MessageRef]) -> Iterator[MessageRef]:
    """Paged refs with the held-back ones (both in id order) in between, by id."""
    index = 0
    for ref in paged:
        message_id = ref.message.message_id
        while index < len(held) and held[index].message.message_id < message_id:
            yield held[index]
            index += 1
        yield ref
    yield from held[index:]


class AddressPager:
    """Owns one address's page store, its queues' cursors and page completion."""

    def __init__(self, broker: PagingHost, address: Address, store: PageStore) -> None:
        self.broker = broker
        self.address = address
        self.store = store
        self.cursors: dict[int, PageCursor] = {}
        # page -> queue ids with records in it that have not completed it yet
        self._open: dict[int, set[int]] = {}
        # page -> "complete" and page-transaction record ids to delete with the page
        self._complete_ids: dict[int, list[int]] = {}
        # transaction id -> (page, first ordinal, queues of each record) of its batch here,
        # while its commit is being decided; and the cursors stopped in front of it
        self._pending_tx: dict[int, tuple[int, int, list[list[Queue]]]] = {}
        self._tx_waiters: dict[int, set[PageCursor]] = {}
        # pages done with, deleted once the journal has synced (see _delete_page)
        self._deleting: set[int] = set()
        self.records_on_disk = 0
        self.bytes_on_disk = 0
        self._summaries: dict[int, PageSummary | None] = {}
        self._page_sizes: dict[int, tuple[int, int]] = {}  # page -> (records, bytes) on disk
        self._live_seen = store.live_page_no()
        # write batch -> its appends (page, queues, records, bytes), undone if it fails
        self._unsynced: dict[asyncio.Future[None], list[tuple[int, list[Queue], int, int]]] = {}
        store.on_records_lost = self.records_lost

    def drop_cursor(self, queue_id: int) -> None:
        """The queue is deleted: its cursor holds no page any more, and goes."""
        cursor = self.cursors.get(queue_id)
        if cursor is not None:
            cursor.drop()
            del self.cursors[queue_id]

    def cursor(self, queue: Queue) -> PageCursor:
        cursor = self.cursors.get(queue.queue_id)
        if cursor is None:
            cursor = self.cursors[queue.queue_id] = PageCursor(self, queue)
            queue.cursor = cursor
        return cursor

    # -- writing --------------------------------------------------------------------------

    def page(self, items: list[tuple[Message, list[Queue]]], *, txid: int = 0) -> asyncio.Future[None] | None:
        """Append messages (several = one atomic batch) and hand them to their queues' cursors.

        With a `txid` the batch belongs to a transaction committed elsewhere (the journal, or
        other addresses too): counted now, read by no cursor until `commit_tx` (or dropped by
        `abandon_tx`), and dropped at a restart unless its `PageTxCommit` record is durable.
        """
        records = []
        routed: list[Queue] = []
        size = 0
        for message, queues in items:
            data = encode_message(message)
            size += len(data)
            records.append(PagedRecord(
                message.message_id, tuple([q.queue_id for q in queues]), message.persistent, data, txid
            ))
            routed += queues
        page_no, first, future = self.store.append(records, summary_input=[m for m, _ in items])
        if txid:
            self._pending_tx[txid] = (page_no, first, [queues for _m, queues in items])
        self._note_live_page()
        self._on_disk(page_no, len(records), size)
        holders = self._open.setdefault(page_no, set())
        for queue in routed:
            holders.add(queue.queue_id)
            queue.counters.added += 1
            self.cursor(queue).on_paged(page_no)
        if future is not None:
            self._watch(future, (page_no, routed, len(records), size))
        for queue in dict.fromkeys(routed):
            if queue.consumers:
                queue.dispatch()
        return future

    def _watch(self, future: asyncio.Future[None], append: tuple[int, list[Queue], int, int]) -> None:
        """Undo the append if its write fails; one callback per write batch, not per message."""
        appends = self._unsynced.get(future)
        if appends is None:
            appends = self._unsynced[future] = []
            future.add_done_callback(self._synced)
        appends.append(append)

    def _synced(self, future: asyncio.Future[None]) -> None:
        appends = self._unsynced.pop(future, [])
        if future.cancelled() or future.exception() is None:
            return
        for page_no, queues, records, size in appends:
            self._append_failed(page_no, queues, records, size)

    # -- transactions -----------------------------------------------------------------------

    def is_pending(self, txid: int) -> bool:
        return txid in self._pending_tx

    def wait_for_commit(self, txid: int, cursor: PageCursor) -> bool:
        """True (and `cursor` is dispatched again once it is decided) while `txid` is pending."""
        if txid not in self._pending_tx:
            return False
        self._tx_waiters.setdefault(txid, set()).add(cursor)
        return True

    def commit_tx(self, txid: int) -> PageTxCommit:
        """The record committing the transaction's batch here, for its journal transaction;
        it goes with the page when the page goes. Cursors wait on until `release_tx`."""
        page_no, _first, _queues = self._pending_tx[txid]
        record = PageTxCommit(self.broker.new_id(), txid, self.address.name, page_no)
        self._complete_ids.setdefault(page_no, []).append(record.record_id)
        return record

    def release_tx(self, txid: int) -> None:
        """After `commit_tx`'s record went to the journal and the commit's in-memory sends
        reached their queues: cursors read on past the batch."""
        del self._pending_tx[txid]
        self._wake(txid)

    def abandon_tx(self, txid: int, *, written: bool) -> None:
        """The transaction did not commit: its batch, if `written` (else the page store took
        it back and `_append_failed` uncounted it), is nobody's."""
        pending = self._pending_tx.pop(txid, None)
        if pending is not None and written:
            page_no, first, routed = pending
            by_cursor: dict[PageCursor, list[int]] = {}
            for ordinal, queues in enumerate(routed, first):
                for queue in queues:
                    cursor = self.cursors.get(queue.queue_id)
                    if cursor is not None:
                        by_cursor.setdefault(cursor, []).append(ordinal)
            for cursor, ordinals in by_cursor.items():
                cursor.void(page_no, ordinals)
        self._wake(txid)

    def _wake(self, txid: int) -> None:
        for cursor in self._tx_waiters.pop(txid, ()):
            cursor.queue.dispatch()

    def may_match(self, page_no: int, selector: Selector | None) -> bool:
        """False when the page's summary proves no message in it matches `selector`."""
        if selector is None:
            return True
        if page_no not in self._summaries:
            info = self.store.page_info(page_no)
            blob = info.selector_summary if info is not None and info.closed else None
            summary = None
            if blob:
                try:
                    summary = PageSummary.from_bytes(blob)
                except ValueError:
                    log.warning("page %d of %r: unreadable selector summary", page_no, self.address.name)
            if info is None or not info.closed:
                return True  # not final yet: do not cache
            self._summaries[page_no] = summary
        summary = self._summaries[page_no]
        return summary is None or selector.may_match(summary)

    def _on_disk(self, page_no: int, records: int, size: int) -> None:
        self.records_on_disk += records
        self.bytes_on_disk += size
        counted = self._page_sizes.get(page_no, (0, 0))
        self._page_sizes[page_no] = (counted[0] + records, counted[1] + size)

    def live_page_caught_up(self, page_no: int) -> None:
        """A queue acknowledged all it has on the live page: once every queue with records
        in it has, the page is closed (and so completed and deleted), as Artemis forces a
        new page rather than delete the live one."""
        for queue_id in self._open.get(page_no, ()):
            cursor = self.cursors.get(queue_id)
            page = cursor.pages.get(page_no) if cursor is not None else None
            if page is not None and len(page.acked) < page.count:
                return
        self.store.roll()
        self._note_live_page()

    def _note_live_page(self) -> None:
        """After the page store may have rolled: pages that closed can now be completed."""
        live = self.store.live_page_no()
        if live == self._live_seen:
            return
        self._live_seen = live
        self._complete_closed()

    def _complete_closed(self) -> None:
        for cursor in list(self.cursors.values()):
            cursor.complete_closed(self._live_seen)

    def _append_failed(self, page_no: int, queues: list[Queue], records: int, size: int) -> None:
        """The page store truncated a failed batch away: its records will never be read."""
        self._on_disk(page_no, -records, -size)
        for queue in queues:
            queue.counters.added -= 1
            cursor = self.cursors.get(queue.queue_id)
            page = cursor.pages.get(page_no) if cursor is not None else None
            if cursor is None or page is None:
                continue
            cursor.unread -= 1
            page.count -= 1
        self._live_seen = self.store.live_page_no()
        self._complete_closed()  # counts dropped: pages may be fully acknowledged now

    def records_lost(self, lost: RecordsLost) -> None:
        """Damage found while reading a page took records (the page store re-counted it):
        the queues stop counting those they had not read, so their counts, the address's
        page mode and page completion no longer wait for messages nobody can receive."""
        if lost.page_no in self._page_sizes:
            self._on_disk(lost.page_no, -lost.records, 0)
        dropped = []
        for queue_id, count in sorted(lost.queues.items()):
            cursor = self.cursors.get(queue_id)
            gone = cursor.records_lost(lost.page_no, count, lost.ordinals) if cursor is not None else 0
            if gone:
                dropped.append(f"{cursor.queue.name!r} {gone}")  # type: ignore[union-attr]
        log.warning("paging %r: %s: %d record(s) lost to damage; no longer counted as messages of "
                    "queues: %s", self.address.name, lost.path, lost.records,
                    ", ".join(dropped) or "none (all were read or acknowledged before)")
        self._live_seen = self.store.live_page_no()
        self._complete_closed()  # counts dropped: pages may be fully acknowledged now
        self.maybe_leave_paging()
        for queue_id in lost.queues:
            cursor = self.cursors.get(queue_id)
            if cursor is not None and cursor.queue.consumers:
                cursor.queue.dispatch()

    # -- memory ---------------------------------------------------------------------------

    def charge(self, size: int) -> None:
        self.address.charge(size)
        self.broker.memory.charge(size)

    def release(self, size: int) -> None:
        self.address.release(size)
        self.broker.memory.release(size)

    # -- completion -----------------------------------------------------------------------

    def queue_done_with(self, queue_id: int, page_no: int, ack_ids: list[int]) -> None:
        holders = self._open.get(page_no)
        store = self.broker.store
        if holders is not None:
            holders.discard(queue_id)
            if not holders:
                self._delete_page(page_no, ack_ids)
                return
        record_id = self.broker.new_id()
        store.cursor_complete(CursorComplete(record_id, queue_id, page_no))
        self._complete_ids.setdefault(page_no, []).append(record_id)
        for ack_id in ack_ids:
            store.delete_record(ack_id)

    def _delete_page(self, page_no: int, ack_ids: list[int]) -> None:
        """Every queue is done with the page: the file and its cursor records go.

        The file goes once the journal has made durable what made the page done (the acks,
        a COMMIT's journal transaction): a crash between the two must not leave the page's
        messages gone and the acks or the commit that consumed them undone. Its records go
        once the file is gone for good: the other order, cut by a crash, would bring the
        page back with no acks and redeliver it.
        """
        self._open.pop(page_no, None)
        self._summaries.pop(page_no, None)
        records, size = self._page_sizes.pop(page_no, (0, 0))
        self.records_on_disk -= records
        self.bytes_on_disk -= size
        if page_no == self.store.live_page_no():
            self.store.roll()
        self._note_live_page()
        record_ids = ack_ids + self._complete_ids.pop(page_no, [])
        self._deleting.add(page_no)
        self.broker.store.flush().add_done_callback(
            lambda done: self._journal_synced(done, page_no, record_ids))

    def _journal_synced(self, done: asyncio.Future[None], page_no: int, record_ids: list[int]) -> None:
        self._deleting.discard(page_no)
        if done.cancelled() or done.exception() is not None:
            return  # kept: at the next start-up its acks (if they were written) complete it
        try:
            self.store.delete_page(page_no)
        except RuntimeError:  # the page store closed meanwhile (shutdown): the next start-up
            return            # finds the page fully acknowledged and deletes it then
        if not record_ids:
            return

        def forget(deleted: asyncio.Future[None]) -> None:
            if deleted.cancelled() or deleted.exception() is not None:
                return
            for record_id in record_ids:
                self.broker.forget_record(record_id)

        self.store.flush().add_done_callback(forget)

    def _forget_stale(
        self,
        pages: list[PageInfo],
        acked: dict[tuple[int, int], list[CursorAck]],
        completes: list[CursorComplete],
    ) -> None:
        """Cursor records of this address's queues whose page is gone (a crash after the page
        was deleted and before its records were): deleted once the journal runs."""
        present = {info.page_no for info in pages}
        mine = {q.queue_id for q in self.address.queues.values()}
        stale = [a.record_id for (queue_id, page_no), acks in acked.items()
                 if queue_id in mine and page_no not in present for a in acks]
        stale += [c.record_id for c in completes if c.queue_id in mine and c.page_no not in present]
        for page_no in [p for p in self._complete_ids if p not in present]:
            del self._complete_ids[page_no]
        self.broker.stale_records.extend(stale)

    def _recover_transactions(
        self, pages: list[PageInfo], tx_commits: list[PageTxCommit]
    ) -> dict[tuple[int, int], set[int]]:
        """(queue, page) -> ordinals of transactional batches whose commit never became
        durable; commit records are kept with their page, or forgotten if it is gone."""
        mine = {c.txid: c for c in tx_commits if c.address == self.address.name}
        present = {info.page_no for info in pages}
        for commit in mine.values():
            if commit.page_no in present:
                self._complete_ids.setdefault(commit.page_no, []).append(commit.record_id)
            else:
                self.broker.stale_records.append(commit.record_id)
        voided: dict[tuple[int, int], set[int]] = {}
        for info in pages:
            for txid, first, count in info.tx_batches:
                if txid in mine:
                    continue
                log.info("paging %r: page %d: %d record(s) of transaction %d, which never "
                         "committed, are dropped", self.address.name, info.page_no, count, txid)
                for ordinal, record in self.store.read_page(info.page_no, first):
                    if ordinal >= first + count:
                        break
                    for queue_id in record.queue_ids:
                        voided.setdefault((queue_id, info.page_no), set()).add(ordinal)
        return voided

    def maybe_leave_paging(self) -> None:
        """The backlog is read into memory: new messages can stay in memory again (FIFO holds).

        Any ref still held back goes into its queue first: a new message must come after it.
        """
        if self.address.paging and all(c.unread == 0 for c in self.cursors.values()):
            for cursor in self.cursors.values():
                if cursor.queue.held:
                    cursor.release_held()
                    cursor.queue.dispatch()
            self.address.paging = False

    @property
    def messages_paged(self) -> int:
        return sum(c.unread for c in self.cursors.values())

    def page_files(self) -> int:
        return self.store.page_count() - len(self._deleting)

    # -- start-up -------------------------------------------------------------------------

    def recover(
        self,
        pages: list[PageInfo],
        acks: list[CursorAck],
        completes: list[CursorComplete],
        tx_commits: list[PageTxCommit],
    ) -> None:
        """Rebuild counts and cursors from page summaries and cursor records.

        `acks` and `completes` are every address's: page numbers are per address, so only
        this address's queues' records may be matched with its pages (another address's page
        1 is not ours, and deleting ours must not take its records along). Transactional
        batches without a commit record in `tx_commits` are voided (read, for their queues).
        """
        queues = {q.queue_id: q for q in self.address.queues.values()}
        acks = [a for a in acks if a.queue_id in queues]
        completes = [c for c in completes if c.queue_id in queues]
        done: set[tuple[int, int]] = set()
        for record in completes:
            done.add((record.queue_id, record.page_no))
            self._complete_ids.setdefault(record.page_no, []).append(record.record_id)
        acked: dict[tuple[int, int], list[CursorAck]] = {}
        for ack in acks:
            acked.setdefault((ack.queue_id, ack.page_no), []).append(ack)
        self._forget_stale(pages, acked, completes)
        voided = self._recover_transactions(pages, tx_commits)
        oldest: dict[int, int] = {}  # queue -> first message id of its first page
        for info in pages:
            self._on_disk(info.page_no, info.persistent_count, info.size)
            holders: set[int] = set()
            for queue_id, count in info.queue_counts.items():
                queue = queues.get(queue_id)
                if queue is None or count == 0 or (queue_id, info.page_no) in done:
                    continue
                page_acks = acked.get((queue_id, info.page_no), [])
                cursor = self.cursor(queue)
                page = cursor.pages[info.page_no] = CursorPage(count)
                page.acked = {ordinal for a in page_acks for ordinal in a.ordinals}
                page.acked |= voided.get((queue_id, info.page_no), set())
                page.ack_ids = [a.record_id for a in page_acks]
                remaining = count - len(page.acked)
                if remaining <= 0:
                    del cursor.pages[info.page_no]
                    continue
                cursor.unread += remaining
                queue.counters.added += remaining
                holders.add(queue_id)
                oldest.setdefault(queue_id, info.first_id)
            if holders:
                self._open[info.page_no] = holders
            else:
                self._delete_page(info.page_no, [a.record_id for k, v in acked.items()
                                                 if k[1] == info.page_no for a in v])
        for queue_id, first_id in oldest.items():
            # The journal's refs are in the queue already: those newer than a paged message
            # wait for the cursor to read past it (FIFO across the restart).
            self.cursors[queue_id].hold_back(first_id)
        self.address.paging = self.messages_paged > 0

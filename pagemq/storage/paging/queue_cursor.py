"""One queue's bookkeeping in its address's paged data: read position, acks, claims, completion.

Per page a queue holds a `CursorPage`: how many of the page's records are meant for it and
which of them it acknowledged (`acked`, written to the journal as cursor-ack records,
`ack_ids`), claimed ahead of its read position, read, or lost to damage. Once it has
acknowledged every record of a page meant for it (and the page is no longer the live one),
it is *done* with the page and tells its owner (`CursorOwner.queue_done_with`), which
writes a "page complete" record or, the last queue done, deletes the page.

Reading: the queue reads the page files in order from its position; `peek` looks at the next
record it would take without taking it (the core's held-back refs and selective consumers
need its message id), `take` passes it. A page not yet fully written (a batch still with the
page writer) is waited for (`wait_for_write`) rather than taken as read; a record of an
undecided transaction stops the reading until the transaction is decided. Over a medium with
a page-I/O worker (`page_io`), the page file's bytes are read there ranges ahead and decoded
here: while the next range is being read the queue's reading answers None (`reading`) and is
woken when it is in, or at the next loop turn if the page is completed (and its read dropped)
before it is.

Loop-only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from typing import Protocol

from pagemq.storage.api import CursorAck
from pagemq.storage.paging.ordinal_set import OrdinalSet
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.page_io import CHUNK_BYTES, ReadSize
from pagemq.storage.paging.page_medium import PageMedium
from pagemq.storage.paging.queue_store import CursorJournal, Entry, PageFrames, PageSpan, Position

_NONE: frozenset[int] = frozenset()


class CursorOwner(Protocol):
    """What a queue's bookkeeping needs of its address's (`paged_queues.PagedQueues`)."""

    medium: PageMedium
    journal: CursorJournal

    def new_id(self) -> int: ...

    def acks_gathered(self, cursor: QueueCursor) -> None: ...

    def waits_for_commit(self, txid: int, queue_id: int) -> bool: ...

    def is_pending(self, txid: int) -> bool: ...

    def wake(self, queue_id: int) -> None: ...

    def live_page_caught_up(self, page_no: int) -> None: ...

    def queue_done_with(self, queue_id: int, page_no: int, ack_ids: list[int], *,
                        recorded: bool = False) -> None: ...

    def roll_live(self) -> None: ...

    def released(self, page_no: int) -> None:
        """Records of the page are no longer held by this queue (acknowledged, completed,
        dropped, lost, voided): what page limits count (`PagedQueues.records_held`)."""


class CursorPage:
    """One page as one queue sees it: how many of its records are for the queue, which are acked."""

    __slots__ = ("ack_ids", "acked", "claimed", "count", "lost", "read", "unwritten")

    def __init__(self, count: int = 0) -> None:
        self.count = count
        self.acked = OrdinalSet()  # a bitmap: it grows with the page (ordinal_set)
        self.ack_ids: list[int] = []
        # Acked this loop turn, not yet in a cursor-acks record (see QueueCursor.write_acks).
        self.unwritten: list[int] = []
        # Read ahead of the queue's position by a selective consumer: in memory, skip them.
        # A bitmap too, emptied as they are acknowledged: a set keeps the table of its
        # largest size (64 KiB a page here) on every page a selector leaves half unread.
        self.claimed = OrdinalSet()
        # Read into memory by the queue's own reading (acknowledged or not) in this run: a
        # record damaged after it was read is not one this queue has lost.
        self.read = OrdinalSet()
        # Ordinals damage took (any queue's; see QueueCursor.records_lost).
        self.lost: frozenset[int] | set[int] = _NONE


class QueueCursor:
    """A queue's place in its address's paged data (the `queue_store.PagedQueue` contract)."""

    def __init__(self, owner: CursorOwner, queue_id: int) -> None:
        self._owner = owner
        self._medium = owner.medium
        self.queue_id = queue_id
        self.pages: dict[int, CursorPage] = {}
        self.unread = 0            # records for this queue on disk, not read into memory
        self._read_size = ReadSize(CHUNK_BYTES)  # see PagedQueue.read_chunk_bytes
        self.waiting_for_write = False
        self._read_page = -1       # page being read; -1 = before the first
        self._read_ordinal = 0     # next ordinal to read in it
        self._page_read_out = False
        # The record at (_read_page, _read_ordinal), read from the page but not yet taken.
        self._peeked: Entry | None = None
        self._reader: Iterator[tuple[int, PagedRecord] | None] | None = None
        # The reader yielded None: its next bytes are being read in the page-I/O worker (see
        # page_io), `_chunk_in` follows.
        self._pending = False
        # The reader covers the whole page: made after it closed and every batch was written.
        self._reader_final = False
        # Every record appended was readable when the reader was made, and none for this
        # queue was appended since: once the reader is read out, so is the page for now.
        self._reader_saw_all = False

    @property
    def read_chunk_bytes(self) -> int:
        return self._read_size.bytes

    @read_chunk_bytes.setter
    def read_chunk_bytes(self, size: int) -> None:
        self._read_size.bytes = size  # the next read of the reader and read-ahead use it

    def on_paged(self, page_no: int, count: int = 1) -> None:
        """`count` records for this queue were appended to page `page_no`."""
        page = self.pages.get(page_no)
        if page is None:
            page = self.pages[page_no] = CursorPage()
        page.count += count
        self.unread += count
        self._reader_saw_all = False

    # -- reading in order -----------------------------------------------------------------

    def take(self) -> Entry | None:
        found = self.peek()
        if found is None:
            return None
        page_no, ordinal, _record = found
        self._peeked = None
        self._read_ordinal = ordinal + 1
        page = self.pages.get(page_no)
        if page is not None:
            page.read.add(ordinal)
        self.unread -= 1
        return found

    def peek(self) -> Entry | None:
        peeked = self._peeked
        if peeked is not None:
            page = self.pages.get(self._read_page)
            ordinal = peeked[1]
            if (page is not None and ordinal not in page.acked and ordinal not in page.claimed
                    and ordinal not in page.lost):
                return peeked
            self._peeked = None  # claimed meanwhile: read on
            self._read_ordinal = ordinal + 1
        queue_id = self.queue_id
        medium = self._medium
        while True:
            reader = self._reader
            if reader is None:
                reader = self._open_reader()
                if reader is None:
                    return None
            page = self.pages.get(self._read_page)
            # Records share their queue-id tuples (page_format): asked once per tuple, not
            # once per record (a record of 200 queues is a scan of 200 ids).
            seen_ids: tuple[int, ...] | None = None
            mine = False
            self._pending = False
            for entry in reader:
                if entry is None:
                    self._pending = True
                    return None  # the next bytes are being read: `_chunk_in` wakes the queue
                ordinal, record = entry
                self._read_ordinal = ordinal + 1
                if record.queue_ids is not seen_ids:
                    seen_ids = record.queue_ids
                    mine = queue_id in seen_ids
                if page is None or not mine or (ordinal <= page.acked.top and ordinal in page.acked):
                    continue
                # Claimed: a selective consumer took it ahead of us (already counted). Lost: a
                # reader made before the damage; it no longer counts (records_lost).
                if ordinal in page.claimed or ordinal in page.lost:
                    continue
                self._read_ordinal = ordinal
                if record.txid and self._owner.waits_for_commit(record.txid, queue_id):
                    # Its transaction is not committed yet: nothing behind it goes first.
                    self._drop_reader()
                    return None
                self._peeked = (self._read_page, ordinal, record)
                return self._peeked
            self._drop_reader()
            if self._reader_final:
                self._page_read_out = True
                continue
            if self._reader_saw_all:
                return None  # the live page: everything appended so far is read
            # The reader saw the page as it was when made: records may have been appended or
            # written since (and the page closed). Read on once what was appended is written.
            if not medium.fully_readable(self._read_page):
                self.wait_for_write()
                return None

    def _open_reader(self) -> Iterator[tuple[int, PagedRecord] | None] | None:
        """A reader from the read position, moved to the next page if this one is read out;
        None when no page is left."""
        medium = self._medium
        if self._read_page not in self.pages or self._page_read_out:
            page_no = self._next_page()
            if page_no is None:
                return None
            self._read_page, self._read_ordinal = page_no, 0
            self._page_read_out = False
        # Asked before the reader is made: the writer thread may make more readable
        # meanwhile, and a later answer would not be about what this reader sees.
        saw_all = self._reader_saw_all = medium.fully_readable(self._read_page)
        self._reader_final = saw_all and self._read_page != medium.live_page_no()
        reader = self._reader = medium.read_page_ahead(self._read_page, self._read_ordinal,
                                                       size=self._read_size, arrived=self._chunk_in)
        return reader

    @property
    def reading(self) -> bool:
        """`peek` found nothing because a chunk of the page is being read: a wake follows."""
        return self._pending

    def _chunk_in(self) -> None:
        self._pending = False
        self._owner.wake(self.queue_id)

    def _wake_soon(self) -> None:
        """Wake the queue at the next loop turn (at once with no loop running)."""
        try:
            asyncio.get_running_loop().call_soon(self._owner.wake, self.queue_id)
        except RuntimeError:
            self._owner.wake(self.queue_id)

    def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        self._pending = False
        close = getattr(reader, "close", None)
        if close is not None:
            close()  # a read-ahead in flight is dropped (no `arrived` for it)

    def _next_page(self) -> int | None:
        later = [p for p in self.pages if p > self._read_page]
        return min(later) if later else None

    def wait_for_write(self) -> None:
        if self.waiting_for_write:
            return
        self.waiting_for_write = True
        self._medium.flush().add_done_callback(self._written)

    def _written(self, _future: asyncio.Future[None]) -> None:
        self.waiting_for_write = False
        self._owner.wake(self.queue_id)

    def waits_for_commit(self, txid: int) -> bool:
        return self._owner.waits_for_commit(txid, self.queue_id)

    def position(self) -> Position:
        if self._read_page in self.pages and not self._page_read_out:
            return self._read_page, self._read_ordinal
        later = self._next_page()
        return (later, 0) if later is not None else (self._read_page + 1, 0)

    # -- reading anywhere -----------------------------------------------------------------

    def pages_from(self, page_no: int) -> list[int]:
        return sorted(p for p in self.pages if p >= page_no)

    def read(self, page_no: int, ordinal: int = 0, *, claimed: bool = False
             ) -> Iterator[tuple[int, PagedRecord]]:
        page = self.pages.get(page_no)
        if page is None:
            return iter(())
        return self._visible(page, self._medium.read_page(page_no, ordinal), claimed)

    def frames(self, page_no: int, ordinal: int = 0) -> PageFrames | None:
        page = self.pages.get(page_no)
        if page is None:
            return None
        frames = self._medium.frame_spans(page_no, ordinal)
        if frames is None:
            return None

        def shown(index: int) -> bool:  # as `_shown`, the queue id aside (the reader checks it)
            acked, claimed = page.acked, page.claimed  # (`top` answers most without a call)
            return not ((index <= acked.top and index in acked) or index in page.lost
                        or (index <= claimed.top and index in claimed))

        def shown_from(index: int) -> bool:  # `shown` of every ordinal from `index` on
            lost = page.lost
            return (index > page.acked.top and index > page.claimed.top
                    and (not lost or index > max(lost)))

        return replace(frames, queue_id=self.queue_id, shown=shown, shown_from=shown_from)

    def read_ahead(self, page_no: int, ordinal: int, arrived: Callable[[], None], size: ReadSize, *,
                   claimed: bool = False) -> Iterator[tuple[int, PagedRecord] | None]:
        page = self.pages.get(page_no)
        if page is None:
            return
        medium = self._medium
        if medium.page_io is not None and not medium.fully_readable(page_no):
            # A batch appended to the page is still with the page writer: a read made now
            # would end before its records (the queue's own reading waits the same way).
            written = medium.flush()
            written.add_done_callback(lambda _done: arrived())
            while not written.done():
                yield None
            if self.pages.get(page_no) is not page:
                return
        records = medium.read_page_ahead(page_no, ordinal, size=size, arrived=arrived)
        try:
            for entry in records:
                if entry is None:
                    yield None  # the next bytes are being read: `arrived` follows
                    if self.pages.get(page_no) is not page:
                        return
                elif self._shown(page, *entry, claimed):
                    yield entry
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                close()

    def _visible(self, page: CursorPage, records: Iterator[tuple[int, PagedRecord]], claimed: bool
                 ) -> Iterator[tuple[int, PagedRecord]]:
        return (entry for entry in records if self._shown(page, *entry, claimed))

    def _shown(self, page: CursorPage, index: int, record: PagedRecord, claimed: bool) -> bool:
        """A record of the page this queue still has on disk (or claimed, when asked for)."""
        return not (self.queue_id not in record.queue_ids or index in page.acked or index in page.lost
                    or (not claimed and index in page.claimed))

    def claim_unread(self, page_no: int, ordinal: int) -> bool:
        """Claim the record if it is still on disk only (not read, claimed, acknowledged or
        lost): a management move takes it without reading it into the queue."""
        page = self.pages.get(page_no)
        if page is None or (ordinal in page.acked or ordinal in page.claimed or ordinal in page.read
                            or ordinal in page.lost):
            return False
        self.claim(page_no, ordinal)
        return True

    def claim(self, page_no: int, ordinal: int) -> None:
        page = self.pages.get(page_no)
        if page is not None:
            page.claimed.add(ordinal)
        self.unread -= 1

    def unclaim(self, page_no: int, ordinal: int) -> bool:
        page = self.pages.get(page_no)
        if page is None or ordinal not in page.claimed:
            return True
        page.claimed.discard(ordinal)
        if ordinal not in page.lost:
            self.unread += 1  # back on disk only, for whoever reads that position next
            return True
        page.count -= 1  # its bytes were damaged since it was read: never to be read again
        self._owner.released(page_no)
        self._maybe_done(page_no, page)
        return False

    # -- streaming readers: whole pages ----------------------------------------------------

    def span(self, page_no: int) -> PageSpan | None:
        page = self.pages.get(page_no)
        medium = self._medium
        info = medium.page_info(page_no)
        if (page is None or info is None or not medium.fully_readable(page_no)
                or any(self._owner.is_pending(txid) for txid, _first, _n in info.tx_batches)):
            return None
        in_memory = len(page.claimed) + (page.read.count_outside(page.acked) if page.read else 0)
        on_disk = page.count - len(page.acked) - in_memory
        return PageSpan(page_no, info.first_id, info.last_id, max(0, on_disk))

    def complete_served(self, page_no: int, served: Collection[int]) -> int:
        page = self.pages.get(page_no)
        if (page is None or page.claimed or page.lost or page_no == self._medium.live_page_no()
                or self.span(page_no) is None):
            return 0  # (a live page may still get records for the queue)
        if page.read and page.read.count_outside(page.acked):
            return 0  # some are in memory: they are acknowledged one by one as they settle
        left = page.count - len(page.acked)
        if left <= 0:
            return 0
        mine = served if isinstance(served, OrdinalSet) else OrdinalSet(served)
        if mine.count_outside(page.acked) != left:
            return 0  # the reader was not served every one the queue still has here
        self.unread -= left
        # No ack stands for these records: the complete record must (as a purge's).
        self._complete(page_no, recorded=True)
        return left

    # -- acknowledgements -----------------------------------------------------------------

    def acknowledge(self, page_no: int, ordinal: int, *, journal: bool) -> None:
        page = self.pages.get(page_no)
        if page is None or not page.acked.add(ordinal):
            return  # (acknowledged before)
        self._owner.released(page_no)
        if page.claimed:
            page.claimed.discard(ordinal)
        if journal:
            if not page.unwritten:
                self._owner.acks_gathered(self)
            page.unwritten.append(ordinal)
        self._maybe_done(page_no, page)

    def ack_records(self, positions: Sequence[Position]) -> list[CursorAck]:
        by_page: dict[int, list[int]] = {}
        for page_no, ordinal in positions:
            page = self.pages.get(page_no)
            if page is not None and ordinal not in page.acked:
                by_page.setdefault(page_no, []).append(ordinal)
        records = []
        for page_no, ordinals in by_page.items():
            record = CursorAck(self._owner.new_id(), self.queue_id, page_no, tuple(ordinals))
            self.pages[page_no].ack_ids.append(record.record_id)
            records.append(record)
        return records

    def write_acks(self) -> None:
        """Write the acks gathered since the last call, one cursor-acks record per page."""
        for page_no, page in self.pages.items():
            if page.unwritten:
                self._write_page_acks(page_no, page)

    def _write_page_acks(self, page_no: int, page: CursorPage) -> None:
        record_id = self._owner.new_id()
        self._owner.journal.cursor_ack(CursorAck(record_id, self.queue_id, page_no, tuple(page.unwritten)))
        page.ack_ids.append(record_id)
        page.unwritten.clear()

    def void(self, page_no: int, ordinals: list[int]) -> int:
        """Records of a transaction that never committed: not this queue's any more (never
        read, counted or journaled; at a restart the missing commit record voids them again).
        Returns how many stopped counting."""
        page = self.pages.get(page_no)
        if page is None:
            return 0
        voided = 0
        for ordinal in ordinals:
            if ordinal not in page.acked:
                page.acked.add(ordinal)
                self.unread -= 1
                voided += 1
        if voided:
            self._owner.released(page_no)
        self._maybe_done(page_no, page)
        return voided

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

    # -- completion -----------------------------------------------------------------------

    def _maybe_done(self, page_no: int, page: CursorPage) -> None:
        if page.acked.count >= page.count:
            if page_no != self._medium.live_page_no():
                self._complete(page_no)
            else:
                self._owner.live_page_caught_up(page_no)

    def _release_rest(self, page_no: int, page: CursorPage) -> None:
        """The queue no longer holds its records of the page not acknowledged one by one."""
        if page.count > len(page.acked):
            self._owner.released(page_no)

    def caught_up(self, page_no: int) -> bool:
        """Acknowledged every record of the page meant for it (or holds none of it)."""
        page = self.pages.get(page_no)
        return page is None or len(page.acked) >= page.count

    def complete_closed(self, live_page_no: int) -> None:
        """Complete the pages before the live one that this queue has fully acknowledged.

        A page is never completed while it is the live page: records for this queue may
        still be appended to it, and a "complete" record would hide them at the next start.
        """
        for page_no in [p for p, page in self.pages.items()
                        if p < live_page_no and len(page.acked) >= page.count]:
            self._complete(page_no)

    def _complete(self, page_no: int, *, recorded: bool = False) -> None:
        page = self.pages[page_no]
        self._release_rest(page_no, page)  # (a purge's or a stream's completion: no ack each)
        if page.unwritten:
            # If every queue is now done, the page file's deletion (not in the journal)
            # would stand for these acks: written first, a receipt's flush covers them.
            self._write_page_acks(page_no, page)
        del self.pages[page_no]
        if self._read_page == page_no:
            owed = self.reading
            self._drop_reader()  # nothing left for us in it
            self._peeked = None
            if owed:
                # `peek` answered "nothing now" while a chunk of this page was being read, and
                # the core waits for the wake that chunk would have brought; closing the read
                # cancelled it. Records of later pages are still to be read: wake the queue
                # (next loop turn: this runs inside its dispatch, an auto ack completing the
                # page, where a dispatch asked for now would do nothing).
                self._wake_soon()
        self._owner.queue_done_with(self.queue_id, page_no, page.ack_ids, recorded=recorded)

    def purge(self) -> tuple[int, asyncio.Future[None] | None]:
        """Acknowledge every record of the queue that is on disk only (see the contract).

        A page holding none of the queue's records in memory is completed as a whole, without
        reading it: one "page complete" record (or the page's deletion), whatever its size.
        A page with records in memory (delivering, or read and not yet settled) is read to
        find the others' ordinals, which are acknowledged one by one. The live page is rolled
        first, so it can be completed too."""
        if self._medium.live_page_no() in self.pages:
            self._owner.roll_live()
        purged = 0
        unreadable = False
        for page_no in sorted(self.pages):
            page = self.pages.get(page_no)
            if page is None:
                continue  # completed meanwhile (the roll above)
            in_memory = any(o not in page.acked for o in (*page.read, *page.claimed))
            if page_no != self._medium.live_page_no() and not in_memory:
                left = page.count - len(page.acked)
                purged += left
                self.unread -= left
                # No ack stands for these records: the complete record must, even if the page
                # goes (a crash before its file is deleted would bring it back unacked).
                self._complete(page_no, recorded=True)
                continue
            if not self._medium.fully_readable(page_no):
                unreadable = True
            queue_id = self.queue_id
            for ordinal, record in self._medium.read_page(page_no, 0):
                if (queue_id in record.queue_ids and ordinal not in page.acked
                        and ordinal not in page.claimed and ordinal not in page.read
                        and ordinal not in page.lost):
                    self.claim(page_no, ordinal)
                    self.acknowledge(page_no, ordinal, journal=record.persistent)
                    purged += 1
        self._peeked = None
        self._drop_reader()
        return purged, (self._medium.flush() if unreadable else None)

    def drop(self) -> None:
        """The queue is deleted: it holds no page any more."""
        for page_no in list(self.pages):
            page = self.pages.pop(page_no)
            self._release_rest(page_no, page)
            self._owner.queue_done_with(self.queue_id, page_no, page.ack_ids)
        self.unread = 0
        self._drop_reader()
        self._peeked = None

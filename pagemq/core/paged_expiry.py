"""Expiry of messages that are still in page files: Artemis' expiry scan over paging.

An expiry timer starts when a message is in memory (routed, read back, recovered,
returned: core/expiry.py). A queue reads its page files back only for its consumers, so a
message that expires while paged, in a queue nobody consumes, would stay on disk, counted
in the queue, until a consumer came. Every `message-expiry-scan-period` the broker walks
the page files of each queue that has messages on disk, as Artemis' expiry reaper walks its
queues' page cursors, and moves each due one to the expiry address exactly as an expired
message in memory moves (`DeadLetters.expired`: a copy in one transaction with the
original's acknowledgement).

What keeps the scan cheap when nothing is due, so that thousands of paging queues and deep
backlogs cost little (`AddressPager.may_expire`):
- a page whose summary's `JMSExpiration` range rules out a due message is not read;
- a page written in this run is read only if a message with an expiration that has come
  was appended to it;
- a page an earlier run wrote, read whole at start-up (its live page after a crash), is
  read only if its records' soonest expiration has come (`PageScan.soonest_expiration`);
- a page scanned whole is not read again before the soonest expiration it still holds (or
  ever, with none), unless a record is appended or returned to it, even during that scan
  (a change while the page is being scanned voids what the scan finds: helper 39 lost an
  appended record to that race).
Pages are read in the page-I/O worker a chunk at a time (never on the loop), each record's
expiration comes from its codec head, and only due records are decoded; the loop is given
back every `_SLICE` records. A due record is claimed where it lies, so the queue's reading
and its consumers skip it.

Loop-only: the scan is a task on the event loop; its page reads are the page-I/O worker's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pagemq.core.memory import BROWSE_PART
from pagemq.core.paging import BROWSE_CHUNKS_HELD
from pagemq.core.selector import compile as compile_selector
from pagemq.storage.message_codec import CodecError, read_expiration
from pagemq.storage.paging.page_io import ReadSize

if TYPE_CHECKING:
    from pagemq.core.consumer import MessageRef
    from pagemq.core.paging import AddressPager, PageCursor
    from pagemq.core.queue import Queue
    from pagemq.core.selector import Selector
    from pagemq.storage.paging.page_format import PagedRecord

log = logging.getLogger("pagemq.broker")

__all__ = ["PagedExpiry"]

_SLICE = 64  # records looked at between two returns to the event loop
_ADDRESSES_PER_TURN = 100  # paging addresses looked at (their pages not read) in one turn
_NEVER = 2 ** 62  # a page scanned with nothing left to expire (ms since the epoch)


class PagedExpiry:
    """The periodic scan; `scan()` is one pass over every paging queue."""

    def __init__(self, pagers: dict[str, AddressPager],
                 expired: Callable[[Queue, list[MessageRef]], None]) -> None:
        self._pagers = pagers
        self._expired = expired
        self._running = False

    async def scan(self) -> int:
        """One pass: how many paged messages expired (a pass still running when the next
        is due is not doubled)."""
        if self._running:
            return 0
        self._running = True
        try:
            now_ms = int(time.time() * 1000)
            due = compile_selector(f"JMSExpiration > 0 AND JMSExpiration <= {now_ms}")
            expired = 0
            for n, pager in enumerate(list(self._pagers.values()), 1):
                expired += await self._scan_address(pager, now_ms, due)
                if n % _ADDRESSES_PER_TURN == 0:
                    await asyncio.sleep(0)  # thousands of paging addresses: not in one turn
            if expired:
                log.info("%d paged message(s) expired", expired)
            return expired
        finally:
            self._running = False

    async def _scan_address(self, pager: AddressPager, now_ms: int, due: Selector) -> int:
        expired = 0
        for cursor in list(pager.cursors.values()):
            pages = cursor.book.pages_from(0)
            queue = cursor.queue
            if queue.deleted or cursor.book.unread <= 0:
                continue
            first = cursor.book.position()
            for page_no in [p for p in pages if p >= first[0]]:
                if not pager.may_expire(page_no, queue.queue_id, now_ms, due):
                    continue
                expired += await self._scan_page(cursor, page_no, first[1] if page_no == first[0] else 0,
                                                 now_ms)
                if queue.deleted:
                    break
        held: set[int] = set()  # (as they are now: a page may have begun meanwhile)
        for cursor in pager.cursors.values():
            held.update(cursor.book.pages_from(0))
        pager.forget_scans(held)
        if expired:  # the last paged messages gone: new sends stay in memory again
            pager.maybe_leave_paging()
        return expired

    async def _scan_page(self, cursor: PageCursor, page_no: int, ordinal: int, now_ms: int) -> int:
        """Expire the queue's due records of one page; note when its next one is due. The
        chunks read ahead are charged to the budget as a browse's are."""
        queue = cursor.queue
        pager = cursor.pager
        arrived = asyncio.Event()
        size = ReadSize(cursor.chunk_bytes())
        charged = BROWSE_CHUNKS_HELD * size.bytes
        pager.scan_begins(page_no)
        pager.budget.charge_part(BROWSE_PART, charged)
        records: Iterator[tuple[int, PagedRecord] | None] = cursor.book.read_ahead(
            page_no, ordinal, arrived.set, size)
        refs: list[MessageRef] = []
        expired = 0
        next_due = _NEVER
        seen = 0
        whole = False
        try:
            for entry in records:
                if entry is None:
                    await arrived.wait()
                    arrived.clear()
                    continue
                index, record = entry
                seen += 1
                if seen % _SLICE == 0:
                    expired += self._move(queue, refs)
                    await asyncio.sleep(0)
                    if queue.deleted:
                        break
                if record.txid and pager.store.is_pending(record.txid):
                    next_due = -1  # not in the queue yet: looked at again next time
                    continue
                try:
                    expiration = read_expiration(record.message)
                except CodecError:
                    continue  # the queue's reading reports it
                if not expiration:
                    continue
                if expiration > now_ms:
                    next_due = min(next_due, expiration)
                    continue
                ref = cursor.claim_expired(page_no, index, record)
                if ref is not None:
                    refs.append(ref)
            else:
                whole = next_due >= 0
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                close()
            pager.budget.charge_part(BROWSE_PART, -charged)
            pager.scanned(page_no, queue.queue_id, next_due if whole else None)
        expired += self._move(queue, refs)
        return expired

    def _move(self, queue: Queue, refs: list[MessageRef]) -> int:
        if not refs:
            return 0
        taken = list(refs)
        refs.clear()
        self._expired(queue, taken)
        return len(taken)

"""An address's paged queues: the bookkeeping behind the paged-queue store contract.

Over a `PageMedium` (page files, or pages in memory) and the journal's cursor records, this
keeps which queues still hold each page (`_open`), the records that go with a page when it
goes (complete records, page-transaction commits), transactional batches not yet decided,
what is on disk, and each queue's `QueueCursor`. `FilePagedQueueStore` and
`MemoryPagedQueueStore` are this over their medium (`queue_store` has the contract).

Page deletion: once every queue is done with a page, the page goes once the journal has made
durable what made it done (the acks, a COMMIT's journal transaction): a crash between the
two must not leave the page's messages gone and the acks or the commit that consumed them
undone. Its cursor records go once the page is gone for good: the other order, cut by a
crash, would bring the page back with no acks and redeliver it.

Start-up rebuilds all of this from the medium's per-page summaries and the cursor records:
no page body is read but a transaction's batch whose commit record never came.

Loop-only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from itertools import chain

from pagemq.storage.api import CursorAck, CursorComplete, PageTxCommit
from pagemq.storage.disk_space import is_no_space
from pagemq.storage.paging.held_records import HeldRecords
from pagemq.storage.paging.ordinal_set import OrdinalSet
from pagemq.storage.paging.page_format import PagedRecord, page_file_name
from pagemq.storage.paging.page_medium import PageMedium
from pagemq.storage.paging.page_store import PageInfo, RecordsLost
from pagemq.storage.paging.queue_cursor import CursorPage, QueueCursor
from pagemq.storage.paging.queue_store import (
    AckWriter,
    Appended,
    CursorRecords,
    PagedRecovery,
    PageView,
    QueueStoreListener,
    RecoveredQueue,
)

NO_SPACE_RETRY = 1.0  # seconds before a page deletion held by a journal out of space asks again

log = logging.getLogger("pagemq.paging")

# A write batch's appends: (page, queue id of each record routed, records, bytes).
_Append = tuple[int, list[int], int, int]


class _Unheard:
    """The listener until an owner sets its own."""

    def wake(self, queue_id: int) -> None:
        return None

    def withdrawn(self, queue_ids: list[int]) -> None:
        return None

    def records_lost(self, lost: RecordsLost, gone: dict[int, int]) -> None:
        return None


def write_soon(writer: AckWriter) -> None:
    """Write `writer`'s gathered acks at the end of this loop turn (at once with no loop)."""
    try:
        asyncio.get_running_loop().call_soon(writer.write_acks)
    except RuntimeError:
        writer.write_acks()


class PagedQueues:
    """One address's paged data and its queues' places in it (`queue_store.PagedQueueStore`)."""

    def __init__(self, medium: PageMedium, records: CursorRecords, *,
                 summaries: Callable[[bytes], object] | None = None) -> None:
        self.medium = medium
        self.address = medium.address
        self.journal = records.journal
        self.new_id = records.new_id
        self._acks_gathered = records.acks_gathered or write_soon
        self._decode_summary = summaries
        self.listener: QueueStoreListener = _Unheard()
        self.cursors: dict[int, QueueCursor] = {}
        # Cursors holding acks not yet in a cursor-acks record (see write_acks).
        self._unwritten: dict[QueueCursor, None] = {}
        # page -> queue ids with records in it that have not completed it yet
        self._open: dict[int, set[int]] = {}
        # page -> "complete" and page-transaction record ids to delete with the page
        self._complete_ids: dict[int, list[int]] = {}
        # transaction id -> (page, first ordinal, queue ids of each record) of its batch here,
        # while its commit is being decided; and the queues stopped in front of it
        self._pending_tx: dict[int, tuple[int, int, list[tuple[int, ...]]]] = {}
        self._tx_waiters: dict[int, set[int]] = {}
        # pages done with, deleted once the journal has synced (see _delete_page)
        self._deleting: set[int] = set()
        self._removing: set[int] = set()  # out of the medium, its file not removed yet
        self.records_on_disk = 0
        self.bytes_on_disk = 0
        self._summaries: dict[int, object | None] = {}
        self._page_sizes: dict[int, tuple[int, int]] = {}  # page -> (records, bytes) on disk
        self._held = HeldRecords(self._page_sizes, self.cursors, self._open)  # what page limits count
        self._live_seen = medium.live_page_no()
        # write batch -> its appends, undone if it fails
        self._unsynced: dict[asyncio.Future[None], list[_Append]] = {}
        medium.on_records_lost = self._records_lost

    def queue(self, queue_id: int) -> QueueCursor:
        cursor = self.cursors.get(queue_id)
        if cursor is None:
            cursor = self.cursors[queue_id] = QueueCursor(self, queue_id)
        return cursor

    def drop_queue(self, queue_id: int) -> None:
        cursor = self.cursors.pop(queue_id, None)
        if cursor is not None:
            cursor.drop()

    def wake(self, queue_id: int) -> None:
        self.listener.wake(queue_id)

    # -- writing --------------------------------------------------------------------------

    def append(self, records: Sequence[PagedRecord], *, summary_input: Sequence[object] | None = None,
               atomic: bool = True) -> Appended:
        page_no, first, future = self.medium.append(records, summary_input=summary_input, atomic=atomic)
        txid = records[0].txid
        if txid:
            self._pending_tx[txid] = (page_no, first, [record.queue_ids for record in records])
        if page_no != self._live_seen:  # appended past the page seen live: it rolled
            self._note_live_page()
        size = sum([len(record.message) for record in records])
        routed = [*chain.from_iterable([record.queue_ids for record in records])]
        self._held.routed(page_no, first, records, fanout=len(routed) > len(records))
        self._on_disk(page_no, len(records), size)
        holders = self._open.setdefault(page_no, set())
        cursors = self.cursors
        for queue_id, count in Counter(routed).items():  # once per queue, not per record
            holders.add(queue_id)
            (cursors.get(queue_id) or self.queue(queue_id)).on_paged(page_no, count)
        if future is not None:
            self._watch(future, (page_no, routed, len(records), size))
        return Appended(page_no, first, future)

    def room(self, size: int) -> int:
        return self.medium.room(size)

    def _watch(self, future: asyncio.Future[None], append: _Append) -> None:
        """Undo the append if its write fails; one callback per write batch, not per record."""
        appends = self._unsynced.get(future)
        if appends is None:
            appends = self._unsynced[future] = []
            future.add_done_callback(self._synced)
        appends.append(append)

    def _synced(self, future: asyncio.Future[None]) -> None:
        appends = self._unsynced.pop(future, [])
        if future.cancelled() or future.exception() is None:
            return
        for page_no, queue_ids, records, size in appends:
            self._append_failed(page_no, queue_ids, records, size)

    def _append_failed(self, page_no: int, queue_ids: list[int], records: int, size: int) -> None:
        """The medium truncated a failed batch away: its records will never be read."""
        self._on_disk(page_no, -records, -size)
        self._held.touched(page_no)
        for queue_id in queue_ids:
            cursor = self.cursors.get(queue_id)
            page = cursor.pages.get(page_no) if cursor is not None else None
            if cursor is None or page is None:
                continue
            cursor.unread -= 1
            page.count -= 1
        self._live_seen = self.medium.live_page_no()
        self._complete_closed()  # counts dropped: pages may be fully acknowledged now
        self.listener.withdrawn(queue_ids)

    def _on_disk(self, page_no: int, records: int, size: int) -> None:
        self.records_on_disk += records
        self.bytes_on_disk += size
        counted = self._page_sizes.get(page_no, (0, 0))
        self._page_sizes[page_no] = (counted[0] + records, counted[1] + size)
        self._held.resized(page_no, records, size)

    # -- what page limits count -------------------------------------------------------------

    @property
    def records_held(self) -> int:
        """Records in page files not yet acknowledged by every queue they are for."""
        return self._held.records

    @property
    def bytes_held(self) -> int:
        """Their bytes: a page's bytes in proportion to its records still held."""
        return self._held.bytes

    def released(self, page_no: int) -> None:
        self._held.touched(page_no)

    # -- transactions ---------------------------------------------------------------------

    def is_pending(self, txid: int) -> bool:
        return txid in self._pending_tx

    def waits_for_commit(self, txid: int, queue_id: int) -> bool:
        """True (and the queue is woken once it is decided) while `txid` is pending."""
        if txid not in self._pending_tx:
            return False
        self._tx_waiters.setdefault(txid, set()).add(queue_id)
        return True

    def commit_tx(self, txid: int) -> PageTxCommit:
        page_no, _first, _queues = self._pending_tx[txid]
        record = PageTxCommit(self.new_id(), txid, self.address, page_no)
        self._complete_ids.setdefault(page_no, []).append(record.record_id)
        return record

    def release_tx(self, txid: int) -> None:
        del self._pending_tx[txid]
        self._wake_waiters(txid)

    def abandon_tx(self, txid: int, *, written: bool) -> None:
        """`written` False: the medium took the batch back (`_append_failed` uncounted it)."""
        pending = self._pending_tx.pop(txid, None)
        if pending is not None and written:
            page_no, first, routed = pending
            by_cursor: dict[QueueCursor, list[int]] = {}
            for ordinal, queue_ids in enumerate(routed, first):
                for queue_id in queue_ids:
                    cursor = self.cursors.get(queue_id)
                    if cursor is not None:
                        by_cursor.setdefault(cursor, []).append(ordinal)
            withdrawn: list[int] = []
            for cursor, ordinals in by_cursor.items():
                withdrawn += [cursor.queue_id] * cursor.void(page_no, ordinals)
            if withdrawn:
                self.listener.withdrawn(withdrawn)
        self._wake_waiters(txid)

    def _wake_waiters(self, txid: int) -> None:
        for queue_id in self._tx_waiters.pop(txid, ()):
            self.listener.wake(queue_id)

    # -- reading --------------------------------------------------------------------------

    def summary(self, page_no: int) -> object | None:
        if page_no not in self._summaries:
            info = self.medium.page_info(page_no)
            if info is None or not info.closed:
                return None  # not final yet: do not cache
            summary = None
            blob = info.selector_summary
            if blob and self._decode_summary is not None:
                try:
                    summary = self._decode_summary(blob)
                except ValueError:
                    log.warning("page %d of %r: unreadable selector summary", page_no, self.address)
            self._summaries[page_no] = summary
        return self._summaries[page_no]

    def soonest_expiration(self, page_no: int) -> int | None:
        info = self.medium.page_info(page_no)
        return info.soonest_expiration if info is not None else None

    def fully_readable(self, page_no: int) -> bool:
        return self.medium.fully_readable(page_no)

    def last_id(self, page_no: int) -> int:
        info = self.medium.page_info(page_no)
        return info.last_id if info is not None else 0

    def messages_paged(self) -> int:
        return sum(c.unread for c in self.cursors.values())

    def page_files(self) -> int:
        """`.page` files on disk now: a page every queue is done with counts until its file
        is removed (after the journal synced the acks that finished it, then the writer's
        removal), so "0" means no file is left."""
        return self.medium.page_count() + len(self._removing)

    def last_message_id(self) -> int:
        return max((info.last_id for info in self.medium.pages()), default=0)

    def page_views(self, queue_id: int | None = None) -> list[PageView]:
        """For operators (the console's page list); a few dicts per page, made when asked."""
        cursor = self.cursors.get(queue_id) if queue_id is not None else None
        if queue_id is not None and cursor is None:
            return []
        live = self.medium.live_page_no()
        views = []
        for info in self.medium.pages():
            page_no = info.page_no
            if page_no in self._deleting:
                continue
            share = cursor.pages.get(page_no) if cursor is not None else None
            if cursor is not None and share is None:
                continue  # the queue is done with it (or never had a record in it)
            views.append(PageView(
                page_no, page_file_name(page_no), info.first_id, info.last_id,
                info.persistent_count if info.previous_run else info.count, info.size,
                page_no == live and not info.closed, len(self._open.get(page_no, ())),
                share.count if share is not None else None,
                len(share.acked) if share is not None else None,
            ))
        return views

    def _records_lost(self, lost: RecordsLost) -> None:
        """Damage found while reading a page took records (the medium re-counted it): the
        queues stop counting those they had not read, so their counts and page completion
        no longer wait for messages nobody can receive."""
        if lost.page_no in self._page_sizes:
            self._on_disk(lost.page_no, -lost.records, 0)
        gone: dict[int, int] = {}
        for queue_id, count in sorted(lost.queues.items()):
            cursor = self.cursors.get(queue_id)
            taken = cursor.records_lost(lost.page_no, count, lost.ordinals) if cursor is not None else 0
            if taken:
                gone[queue_id] = taken
                self._held.touched(lost.page_no)
        self._live_seen = self.medium.live_page_no()
        self._complete_closed()  # counts dropped: pages may be fully acknowledged now
        self.listener.records_lost(lost, gone)

    # -- acknowledgements -----------------------------------------------------------------

    def acks_gathered(self, cursor: QueueCursor) -> None:
        first = not self._unwritten
        self._unwritten[cursor] = None
        if first:
            self._acks_gathered(self)

    def write_acks(self) -> None:
        cursors, self._unwritten = self._unwritten, {}
        for cursor in cursors:
            cursor.write_acks()

    # -- completion -----------------------------------------------------------------------

    def live_page_caught_up(self, page_no: int) -> None:
        """A queue acknowledged all it has on the live page: once every queue with records
        in it has, the page is closed (and so completed and deleted), as Artemis forces a
        new page rather than delete the live one."""
        for queue_id in self._open.get(page_no, ()):
            cursor = self.cursors.get(queue_id)
            if cursor is not None and not cursor.caught_up(page_no):
                return
        self.medium.roll()
        self._note_live_page()

    def roll_live(self) -> None:
        """Close the live page now (a purge completes it rather than wait for it to fill)."""
        self.medium.roll()
        self._note_live_page()

    def _note_live_page(self) -> None:
        """After the medium may have rolled: pages that closed can now be completed."""
        live = self.medium.live_page_no()
        if live == self._live_seen:
            return
        self._live_seen = live
        self._complete_closed()

    def _complete_closed(self) -> None:
        for cursor in list(self.cursors.values()):
            cursor.complete_closed(self._live_seen)

    def queue_done_with(self, queue_id: int, page_no: int, ack_ids: list[int], *,
                        recorded: bool = False) -> None:
        """`recorded`: write the complete record even when the page then goes (a purge:
        no ack in the journal stands for the records, so the record must until the page
        file is gone; it is deleted with the page's other records)."""
        holders = self._open.get(page_no)
        if holders is not None and holders <= {queue_id} and not recorded:
            holders.discard(queue_id)
            self._delete_page(page_no, ack_ids)
            return
        record_id = self.new_id()
        self.journal.cursor_complete(CursorComplete(record_id, queue_id, page_no))
        self._complete_ids.setdefault(page_no, []).append(record_id)
        if holders is not None:
            holders.discard(queue_id)
            if not holders:
                self._delete_page(page_no, ack_ids)
                return
        for ack_id in ack_ids:
            self.journal.delete_record(ack_id)
        if holders and page_no == self.medium.live_page_no():
            # A queue deleted while holding the live page: the others may all have caught up
            # on it already, and were waiting for this one to roll it (live_page_caught_up).
            self.live_page_caught_up(page_no)

    def _delete_page(self, page_no: int, ack_ids: list[int]) -> None:
        """Every queue is done with the page: the page and its cursor records go (see the
        module docstring for the order)."""
        self._open.pop(page_no, None)
        self._summaries.pop(page_no, None)
        self._held.forget(page_no)
        records, size = self._page_sizes.pop(page_no, (0, 0))
        self.records_on_disk -= records
        self.bytes_on_disk -= size
        if page_no == self.medium.live_page_no():
            self.medium.roll()
        self._note_live_page()
        record_ids = ack_ids + self._complete_ids.pop(page_no, [])
        self._deleting.add(page_no)
        self._sync_then_delete(page_no, record_ids)

    def _sync_then_delete(self, page_no: int, record_ids: list[int]) -> None:
        """The page goes once the journal has synced the acks that finished it."""
        try:
            flushed = self.journal.flush()
        except RuntimeError:  # the journal closed meanwhile: the next start-up deletes it
            self._deleting.discard(page_no)
            return
        flushed.add_done_callback(lambda done: self._journal_synced(done, page_no, record_ids))

    def _journal_synced(self, done: asyncio.Future[None], page_no: int, record_ids: list[int]) -> None:
        self._deleting.discard(page_no)
        if done.cancelled() or done.exception() is not None:
            if not done.cancelled() and is_no_space(done.exception()):
                # The journal keeps a batch that found no space and writes it once there is
                # room: ask again (a second later, so a journal that gave up is not spun on).
                self._deleting.add(page_no)
                done.get_loop().call_later(NO_SPACE_RETRY, self._sync_then_delete, page_no, record_ids)
            return  # kept: at the next start-up its acks (if they were written) complete it
        try:
            removal = self.medium.delete_page(page_no)
        except RuntimeError:  # the medium closed meanwhile (shutdown): the next start-up
            return            # finds the page fully acknowledged and deletes it then
        if removal is not None and not removal.done():
            self._removing.add(page_no)
            removal.add_done_callback(lambda _removal: self._removing.discard(page_no))
        if not record_ids:
            return

        def forget(deleted: asyncio.Future[None]) -> None:
            if deleted.cancelled() or deleted.exception() is not None:
                return
            for record_id in record_ids:
                self._forget(record_id)

        self.medium.flush().add_done_callback(forget)

    def _forget(self, record_id: int) -> None:
        """Delete a cursor record; after shutdown began, the next start-up finds it stale."""
        try:
            self.journal.delete_record(record_id)
        except (OSError, LookupError) as exc:
            log.debug("cursor record %d kept for the next start-up: %s", record_id, exc)

    # -- start-up -------------------------------------------------------------------------

    def queue_ids_on_disk(self) -> set[int]:
        return {queue_id for info in self.medium.pages()
                for queue_id, count in info.queue_counts.items() if count}

    def recover(self, queue_ids: Collection[int], acks: Sequence[CursorAck],
                completes: Sequence[CursorComplete], tx_commits: Sequence[PageTxCommit]) -> PagedRecovery:
        """Page numbers are per address, so only `queue_ids`' records may be matched with
        these pages (another address's page 1 is not ours, and deleting ours must not take
        its records along). Transactional batches without a commit record in `tx_commits`
        are voided (read, for their queues)."""
        mine = set(queue_ids)
        pages = self.medium.pages()
        completes = [c for c in completes if c.queue_id in mine]
        done: set[tuple[int, int]] = set()
        for record in completes:
            done.add((record.queue_id, record.page_no))
            self._complete_ids.setdefault(record.page_no, []).append(record.record_id)
        acked: dict[tuple[int, int], list[CursorAck]] = {}
        for ack in acks:
            if ack.queue_id in mine:
                acked.setdefault((ack.queue_id, ack.page_no), []).append(ack)
        recovery = PagedRecovery(stale=self._stale(pages, acked, completes))
        voided = self._recover_transactions(pages, tx_commits, recovery.stale)
        for info in pages:
            # (A queue deleted since holds nothing: its records count for the others only.)
            self._held.recovered(info.page_no, {queue_id: count for queue_id, count
                                                in info.queue_counts.items() if count and queue_id in mine},
                                 info.persistent_count)
            self._on_disk(info.page_no, info.persistent_count, info.size)
            holders: set[int] = set()
            finished: list[int] = []  # ack records of queues done with the page through them
            unacked = 0
            for queue_id, count in info.queue_counts.items():
                if queue_id not in mine or count == 0 or (queue_id, info.page_no) in done:
                    continue
                page_acks = acked.get((queue_id, info.page_no), [])
                page = CursorPage(count)
                page.acked = OrdinalSet(ordinal for a in page_acks for ordinal in a.ordinals)
                page.acked |= voided.get((queue_id, info.page_no), set())
                page.ack_ids = [a.record_id for a in page_acks]
                remaining = count - len(page.acked)
                if remaining <= 0:
                    finished += page.ack_ids
                    continue
                cursor = self.queue(queue_id)
                cursor.pages[info.page_no] = page
                cursor.unread += remaining
                unacked += remaining
                holders.add(queue_id)
                held = recovery.queues.setdefault(queue_id, RecoveredQueue(0, info.first_id))
                held.paged += remaining
            if holders:
                self._open[info.page_no] = holders
                self._held.touched(info.page_no)
                # A queue that acknowledged all of a live page has no complete record: its
                # acks stand for one, and go with the page's other records when it goes.
                self._complete_ids.setdefault(info.page_no, []).extend(finished)
            else:
                self._delete_page(info.page_no, [a.record_id for k, v in acked.items()
                                                 if k[1] == info.page_no for a in v])
        return recovery

    def _stale(
        self,
        pages: list[PageInfo],
        acked: dict[tuple[int, int], list[CursorAck]],
        completes: list[CursorComplete],
    ) -> list[int]:
        """Cursor records whose page is gone (a crash after the page was deleted and before
        its records were): to delete once the journal runs."""
        present = {info.page_no for info in pages}
        stale = [a.record_id for (_queue_id, page_no), acks in acked.items()
                 if page_no not in present for a in acks]
        stale += [c.record_id for c in completes if c.page_no not in present]
        for page_no in [p for p in self._complete_ids if p not in present]:
            del self._complete_ids[page_no]
        return stale

    def _recover_transactions(
        self, pages: list[PageInfo], tx_commits: Sequence[PageTxCommit], stale: list[int]
    ) -> dict[tuple[int, int], set[int]]:
        """(queue, page) -> ordinals of transactional batches whose commit never became
        durable; commit records are kept with their page, or `stale` if it is gone."""
        mine = {c.txid: c for c in tx_commits if c.address == self.address}
        present = {info.page_no for info in pages}
        for commit in mine.values():
            if commit.page_no in present:
                self._complete_ids.setdefault(commit.page_no, []).append(commit.record_id)
            else:
                stale.append(commit.record_id)
        voided: dict[tuple[int, int], set[int]] = {}
        for info in pages:
            for txid, first, count in info.tx_batches:
                if txid in mine:
                    continue
                log.info("paging %r: page %d: %d record(s) of transaction %d, which never "
                         "committed, are dropped", self.address, info.page_no, count, txid)
                for ordinal, record in self.medium.read_page(info.page_no, first):
                    if ordinal >= first + count:
                        break
                    for queue_id in record.queue_ids:
                        voided.setdefault((queue_id, info.page_no), set()).add(ordinal)
        return voided

    async def close(self) -> None:
        """Close the medium (the live page is closed, so the next open reads its summary)."""
        self.write_acks()
        await self.medium.close()

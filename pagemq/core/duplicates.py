"""Duplicate detection: a send whose `_AMQ_DUPL_ID` an address has seen lately is dropped.

Artemis' duplicate detection (`DuplicateIDCache`): each address remembers the last
`id-cache-size` ids (default 20,000) sent to it in the header `_AMQ_DUPL_ID`; a send
carrying one of them is not stored but still succeeds (its RECEIPT comes), so a producer
that retries after a lost RECEIPT, or a Spark task that is re-run, stores nothing twice.

The ids of persistent messages are persisted: one journal record for the ids a send, or a
COMMIT, gives one address (a transaction of hundreds of sends writes one record, not
hundreds), in the journal transaction that stores the message (journaled) or commits its
page write (paged: core/routing.py `_page_once`, core/commit.py), so a crash keeps both or
neither and the message's RECEIPT also covers its id. Ids leave the cache
oldest first, so those a record has lost are always its first ones: an update of the record
says how many (or the record is deleted once all are gone), written only once the write of
the ids that pushed them out is done, so a crash before that forgets none of them. Start-up
rebuilds every cache from the records, in the order they were written, less each record's
ids gone. The id of a non-persistent message is remembered in memory only: the message
itself does not survive a restart either.

An id is remembered from the moment its send is accepted, before it is durable, so a quick
retry is caught too; the retry's RECEIPT then waits for the original's write. If that write
fails, the id is forgotten again, so the producer's retry of the failed send is stored.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pagemq.core.futures import failure
from pagemq.storage.api import DuplicateIdRecord

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from pagemq.core.ids import Ids
    from pagemq.storage.api import MessageStore

DUPLICATE_ID_HEADER = "_AMQ_DUPL_ID"
ENTRY_BYTES = 256
"""About what one remembered id costs (tracemalloc, CPython 3.11: ~220 bytes plus the id's
length; 244 for a 24-character id). Not charged to the memory budget: the caches are bounded
by count (`id-cache-size` per address), so at most addresses x id-cache-size x this; shown
in `GET /api/broker` memory `counted`."""


class _Group:
    """The ids remembered together (a send's, or a COMMIT's to one address): their journal
    record (0: not persisted, or deleted), the write that makes them durable, how many of
    them are still in the cache and how many have left it (the first ones), and how many
    of those the record says are gone."""

    __slots__ = ("gone", "gone_written", "live", "pending", "record_id")

    def __init__(self, record_id: int, gone: int = 0) -> None:
        self.record_id = record_id
        self.live = 0
        self.gone = self.gone_written = gone
        self.pending: asyncio.Future[None] | None = None


@dataclass(slots=True)
class Remembered:
    """What `remember_all` remembered (per group: its address and ids), and the older groups
    that lost ids to them, each with its count of ids gone and left just after: their
    records change once these ids' write, and every write remembered before, is done."""

    groups: list[tuple[str, list[str], _Group]] = field(default_factory=list)
    evicted: list[tuple[_Group, int, int]] = field(default_factory=list)
    done: bool = False


class DuplicateIds:
    """The duplicate-id caches of every address, by address name.

    A cache exists only for an address that has seen an id, so addresses whose producers
    never set the header cost nothing. `cache_size(address)` says how many ids an address
    keeps (its `id-cache-size`; 0 turns detection off for it).
    """

    def __init__(self, store: MessageStore, ids: Ids, cache_size: Callable[[str], int]) -> None:
        self.store = store
        self.ids = ids
        self.cache_size = cache_size
        self.caches: dict[str, OrderedDict[str, _Group]] = {}
        self._recovered: list[_Group] = []  # groups recovery took ids from (`write_recovered`)
        # Remembered, in the order remembered, until its write and every one before it is
        # done: a record gives up ids only then, so a crash forgets none that a send not
        # yet durable pushed out (the ids of a later write count after those of an earlier).
        self._unsettled: deque[Remembered] = deque()

    def seen(self, address: str, dup_id: str) -> tuple[bool, asyncio.Future[None] | None]:
        """(True, what a duplicate's RECEIPT must wait for) when `address` has `dup_id`."""
        cache = self.caches.get(address)
        group = cache.get(dup_id) if cache is not None else None
        if group is None:
            return False, None
        pending = group.pending
        if pending is not None and pending.done():
            group.pending = pending = None
        return True, pending

    def remember(self, address: str, dup_id: str, *, persistent: bool
                 ) -> tuple[list[DuplicateIdRecord], Remembered]:
        """Remember one send's id: see `remember_all`."""
        return self.remember_all(((address, dup_id, persistent),))

    def remember_all(self, sends: Sequence[tuple[str, str, bool]]
                     ) -> tuple[list[DuplicateIdRecord], Remembered]:
        """Remember the ids of a COMMIT's sends, (address, id, persistent) in order, once all
        of them were routed (so a COMMIT that fails to route evicts nothing). Returns the
        journal records to write with the sends (one per address, holding the ids of its
        persistent sends) and what was remembered, for `written` (or `failed`), which the
        caller must call. An address keeps its last `id-cache-size` ids, so of more than
        that in one COMMIT only the last are remembered: the same COMMIT would evict the
        earlier ones before their record was written."""
        counts: dict[str, int] = {}
        for address, _dup_id, _persistent in sends:
            counts[address] = counts.get(address, 0) + 1
        sizes = {address: self.cache_size(address) for address in counts}
        skip = {address: count - sizes[address] for address, count in counts.items()}
        groups: dict[tuple[str, bool], tuple[str, list[str], _Group]] = {}
        evicted: dict[int, _Group] = {}
        first_address, _first_id, first_persistent = sends[0] if sends else ("", "", False)
        if (len(counts) == 1 and skip[first_address] <= 0
                and all(persistent is first_persistent for _a, _i, persistent in sends)):
            # One address, one group, all ids kept (the Spark sink's COMMIT): one pass.
            group = _Group(self.ids.new_id() if first_persistent else 0)
            dup_ids = [dup_id for _address, dup_id, _persistent in sends]
            groups[first_address, first_persistent] = (first_address, dup_ids, group)
            self._insert_all(first_address, dup_ids, group, sizes[first_address], evicted)
            sends = ()
        for address, dup_id, persistent in sends:
            if skip[address] > 0:
                skip[address] -= 1
                continue
            found = groups.get((address, persistent))
            if found is None:
                group = _Group(self.ids.new_id() if persistent else 0)
                found = groups[address, persistent] = (address, [], group)
            found[1].append(dup_id)
            self._insert(address, dup_id, found[2], sizes[address], evicted)
        remembered = Remembered(list(groups.values()),
                                [(group, group.gone, group.live) for group in evicted.values()])
        self._unsettled.append(remembered)
        records = [DuplicateIdRecord(group.record_id, address, tuple(dup_ids), cache_size=sizes[address])
                   for address, dup_ids, group in remembered.groups if group.record_id]
        return records, remembered

    def written(self, remembered: Remembered, future: asyncio.Future[None] | None) -> None:
        """The sends of these ids are being made durable by `future` (None: nothing to wait
        for): a duplicate's RECEIPT waits for it, a failed write forgets the ids again, and
        the records of the ids they pushed out change once it is done."""
        if future is None:
            self._settle(remembered)
            return
        for _address, _ids, group in remembered.groups:
            group.pending = future

        def done(result: asyncio.Future[None]) -> None:
            failed = failure(result) is not None
            for address, dup_ids, group in remembered.groups:
                if group.pending is result:
                    group.pending = None
                if failed:
                    self._forget_failed(address, dup_ids, group)
            self._settle(remembered)

        future.add_done_callback(done)

    def failed(self, remembered: Remembered) -> None:
        """The sends of these ids were not stored at all (their write raised at once)."""
        for address, dup_ids, group in remembered.groups:
            self._forget_failed(address, dup_ids, group)
        self._settle(remembered)

    def _forget_failed(self, address: str, dup_ids: list[str], group: _Group) -> None:
        """The write that was to store these ids' sends failed: forget the ids, and delete
        their journal record if it got written (a paged send's or COMMIT's id record is
        written only after its page files, so a failed page write leaves none)."""
        cache = self.caches.get(address)
        if cache is not None:
            for dup_id in dup_ids:
                if cache.get(dup_id) is group:
                    del cache[dup_id]
        group.live = 0
        record_id, group.record_id = group.record_id, 0
        if record_id:
            try:
                self.store.delete_record(record_id)
            except LookupError:
                pass  # never written

    def _settle(self, remembered: Remembered) -> None:
        """A write is done: for it and every one done before it in order, delete the records
        of the groups they left with no id, and note in the others how many of their first
        ids are gone."""
        remembered.done = True
        unsettled = self._unsettled
        while unsettled and unsettled[0].done:
            for group, gone, live in unsettled.popleft().evicted:
                if live <= 0:
                    self._drop_record(group)
                else:
                    self._write_gone(group, gone)

    def recover(self, records: Iterable[DuplicateIdRecord]) -> list[int]:
        """Rebuild the caches from the journal's records, oldest first, less each record's
        ids gone, each record's ids pushing out the oldest past the smaller of the
        `id-cache-size` it was written with and today's (so what a durable record pushed out
        stays out even when the update saying so was lost in a crash, and a larger size
        today brings nothing back). Returns the records none of whose ids is left (an
        `id-cache-size` lowered, or 0), to delete once the journal runs
        (`Recovery.forget_stale`, which also calls `write_recovered`): not yet, here."""
        touched: dict[int, _Group] = {}
        dropped: list[int] = []
        for record in records:
            size = self.cache_size(record.address)
            if record.cache_size:  # the ids it pushed out then stay out, noted gone or not
                size = min(size, record.cache_size)
            group = _Group(record.record_id, record.gone)
            if size > 0:
                for dup_id in record.dup_ids[record.gone:]:
                    self._insert(record.address, dup_id, group, size, touched)
            if not group.live:
                dropped.append(record.record_id)
                group.record_id = 0
        self._recovered = [group for group in touched.values() if group.record_id]
        for group in self._recovered:
            if group.live <= 0:
                dropped.append(group.record_id)
                group.record_id = 0
        return dropped

    def write_recovered(self) -> None:
        """Note in their records the ids recovery left out (a lowered `id-cache-size`), so a
        later start-up with a larger one does not remember them again."""
        recovered, self._recovered = self._recovered, []
        for group in recovered:
            self._write_gone(group, group.gone)

    def drop_address(self, address: str) -> None:
        """An address was deleted: so are its remembered ids."""
        cache = self.caches.pop(address, None)
        if cache is None:
            return
        for group in {id(group): group for group in cache.values()}.values():
            self._drop_record(group)

    def total(self) -> int:
        """Ids remembered by every address."""
        return sum(len(cache) for cache in self.caches.values())

    def count(self, address: str) -> int:
        cache = self.caches.get(address)
        return len(cache) if cache is not None else 0

    def _insert(self, address: str, dup_id: str, group: _Group, size: int,
                evicted: dict[int, _Group]) -> None:
        """Remember an id, evicting the oldest past `size` (listed in `evicted`: their records
        change later, see `_settle`)."""
        cache = self.caches.get(address)
        if cache is None:
            cache = self.caches[address] = OrderedDict()
        group.live += 1
        old = cache.pop(dup_id, None)
        cache[dup_id] = group
        if old is not None:  # (at start-up only: an id again in a later record) not first
            old.live -= 1
            evicted[id(old)] = old
        while len(cache) > size:
            oldest = cache.popitem(last=False)[1]
            oldest.live -= 1
            oldest.gone += 1
            evicted[id(oldest)] = oldest

    def _insert_all(self, address: str, dup_ids: list[str], group: _Group, size: int,
                    evicted: dict[int, _Group]) -> None:
        """`_insert` of each id in turn, as one loop: no more ids than `size` (so evicting
        the oldest once all are in leaves what evicting as they go would), none repeated."""
        cache = self.caches.get(address)
        if cache is None:
            cache = self.caches[address] = OrderedDict()
        group.live += len(dup_ids)
        pop = cache.pop
        for dup_id in dup_ids:
            old = pop(dup_id, None)
            cache[dup_id] = group
            if old is not None:
                old.live -= 1
                evicted[id(old)] = old
        popitem = cache.popitem
        for _ in range(len(cache) - size):
            oldest = popitem(last=False)[1]
            oldest.live -= 1
            oldest.gone += 1
            evicted[id(oldest)] = oldest

    def _write_gone(self, group: _Group, gone: int) -> None:
        """Note in the group's record that its first `gone` ids have left the cache."""

        def write() -> None:
            if group.record_id and gone > group.gone_written:
                group.gone_written = gone
                self.store.duplicate_ids_gone(group.record_id, gone)

        if group.record_id and gone > group.gone_written:
            _once_written(group.pending, write)

    def _drop_record(self, group: _Group) -> None:
        """Delete a group's journal record (`_forget_failed` sees to one whose write failed)."""
        record_id, group.record_id = group.record_id, 0
        if record_id:
            _once_written(group.pending, lambda: self.store.delete_record(record_id))


def _once_written(pending: asyncio.Future[None] | None, action: Callable[[], None]) -> None:
    """Run `action` on a group's record once its write is done, and not at all if it failed:
    a paged COMMIT writes its id record only once its page files are written, and changing
    the record before would name one the journal does not have yet."""
    if pending is None or (pending.done() and failure(pending) is None):
        action()
    elif not pending.done():
        pending.add_done_callback(lambda result: None if failure(result) else action())

"""Duplicate detection: a send whose `_AMQ_DUPL_ID` an address has seen lately is dropped.

Artemis' duplicate detection (`DuplicateIDCache`): each address remembers the last
`id-cache-size` ids (default 20,000) sent to it in the header `_AMQ_DUPL_ID`; a send
carrying one of them is not stored but still succeeds (its RECEIPT comes), so a producer
that retries after a lost RECEIPT, or a Spark task that is re-run, stores nothing twice.

The ids of persistent messages are persisted: one journal record per id, written with the
message (in the same journal transaction when the message is journaled; after the page
write when it is paged, so a crash between the two leaves a message without its id, which
a retry stores again, never an id without its message, whose retry would be dropped), so
the message's RECEIPT also covers its id; deleted when the id falls out of the cache;
start-up rebuilds every cache from those records in the order they were written. The
id of a non-persistent message is remembered in memory only: the message itself does not
survive a restart either.

An id is remembered from the moment its send is accepted, before it is durable, so a quick
retry is caught too; the retry's RECEIPT then waits for the original's write. If that write
fails, the id is forgotten again, so the producer's retry of the failed send is stored.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING

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


class _Entry:
    """One remembered id: its journal record (0: not persisted) and the send's durability."""

    __slots__ = ("pending", "record_id")

    def __init__(self, record_id: int, pending: asyncio.Future[None] | None) -> None:
        self.record_id = record_id
        self.pending = pending


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
        self.caches: dict[str, OrderedDict[str, _Entry]] = {}

    def seen(self, address: str, dup_id: str) -> tuple[bool, asyncio.Future[None] | None]:
        """(True, what a duplicate's RECEIPT must wait for) when `address` has `dup_id`."""
        cache = self.caches.get(address)
        entry = cache.get(dup_id) if cache is not None else None
        if entry is None:
            return False, None
        pending = entry.pending
        if pending is not None and pending.done():
            entry.pending = pending = None
        return True, pending

    def remember(self, address: str, dup_id: str, *, persistent: bool) -> DuplicateIdRecord | None:
        """Remember `dup_id` for `address`; the journal record to write with the message when
        it is persistent (None: not persisted, or detection is off for the address)."""
        size = self.cache_size(address)
        if size <= 0:
            return None
        record = DuplicateIdRecord(self.ids.new_id(), address, dup_id) if persistent else None
        self._insert(address, dup_id, _Entry(record.record_id if record else 0, None), size)
        return record

    def remember_all(self, sends: Sequence[tuple[str, str, bool]]) -> list[DuplicateIdRecord]:
        """Remember the ids of a COMMIT's sends, (address, id, persistent) in order, once all
        of them were routed (so a COMMIT that fails to route evicts nothing); the journal
        records to write with them. An address keeps its last `id-cache-size` ids, so of more
        than that in one COMMIT only the last are remembered: the same COMMIT would evict the
        earlier ones before their records were written."""
        per_address: dict[str, int] = {}
        for address, _dup_id, _persistent in sends:
            per_address[address] = per_address.get(address, 0) + 1
        skip = {address: count - self.cache_size(address) for address, count in per_address.items()}
        records = []
        for address, dup_id, persistent in sends:
            if skip[address] > 0:
                skip[address] -= 1
                continue
            record = self.remember(address, dup_id, persistent=persistent)
            if record is not None:
                records.append(record)
        return records

    def written(self, sent: Sequence[tuple[str, str]], future: asyncio.Future[None] | None) -> None:
        """The sends of these (address, id) pairs are being made durable by `future`: a
        duplicate's RECEIPT waits for it, and a failed write forgets the ids again. (One
        callback for all of them: a COMMIT's sends share one write.)"""
        if future is None:
            return
        caches = self.caches
        entries: list[tuple[str, str, _Entry]] = []
        for address, dup_id in sent:
            cache = caches.get(address)
            entry = cache.get(dup_id) if cache is not None else None
            if entry is not None:
                entry.pending = future
                entries.append((address, dup_id, entry))
        if not entries:
            return

        def done(result: asyncio.Future[None]) -> None:
            failed = result.cancelled() or result.exception() is not None
            for address, dup_id, entry in entries:
                if entry.pending is result:
                    entry.pending = None
                if failed:
                    self._forget_failed(address, dup_id, entry)

        future.add_done_callback(done)

    def _forget_failed(self, address: str, dup_id: str, entry: _Entry) -> None:
        """The write that was to store `dup_id`'s send failed: forget the id, and delete its
        journal record if that got written (a paged send's or COMMIT's id records are
        written only after its page files, so a failed page write leaves none)."""
        cache = self.caches.get(address)
        if cache is not None and cache.get(dup_id) is entry:
            del cache[dup_id]
        if entry.record_id:
            try:
                self.store.delete_record(entry.record_id)
            except LookupError:
                pass  # never written

    def recover(self, records: Iterable[DuplicateIdRecord]) -> list[int]:
        """Rebuild the caches from the journal's records, oldest first. Returns the records
        of the ids beyond an address's (possibly lowered, or 0) `id-cache-size`, to delete
        once the journal runs (`Recovery.forget_stale`): it does not yet, here."""
        dropped: list[int] = []
        for record in records:
            size = self.cache_size(record.address)
            if size <= 0:
                dropped.append(record.record_id)
                continue
            self._insert(record.address, record.dup_id, _Entry(record.record_id, None), size, dropped)
        return dropped

    def drop_address(self, address: str) -> None:
        """An address was deleted: so are its remembered ids."""
        cache = self.caches.pop(address, None)
        for entry in (cache or {}).values():
            self._drop_record(entry)

    def total(self) -> int:
        """Ids remembered by every address."""
        return sum(len(cache) for cache in self.caches.values())

    def count(self, address: str) -> int:
        cache = self.caches.get(address)
        return len(cache) if cache is not None else 0

    def _insert(self, address: str, dup_id: str, entry: _Entry, size: int,
                dropped: list[int] | None = None) -> None:
        """Remember an id, evicting the oldest past `size`; their records are deleted, or
        with `dropped` (at start-up, before the journal runs) listed there instead."""
        cache = self.caches.get(address)
        if cache is None:
            cache = self.caches[address] = OrderedDict()
        gone = [old] if (old := cache.pop(dup_id, None)) is not None else []
        cache[dup_id] = entry
        while len(cache) > size:
            gone.append(cache.popitem(last=False)[1])
        for evicted in gone:
            if dropped is None:
                self._drop_record(evicted)
            elif evicted.record_id:
                dropped.append(evicted.record_id)

    def _drop_record(self, entry: _Entry) -> None:
        """Delete an id's journal record; one whose write is still under way (a paged
        COMMIT writes its id records once its page files are written) is deleted once that
        write is done, and not at all if it failed: deleting it now would name a record
        the journal does not have yet."""
        record_id = entry.record_id
        if not record_id:
            return
        pending = entry.pending
        if pending is None or pending.done():
            self.store.delete_record(record_id)
            return

        def written(result: asyncio.Future[None]) -> None:
            if not result.cancelled() and result.exception() is None:
                self.store.delete_record(record_id)

        pending.add_done_callback(written)

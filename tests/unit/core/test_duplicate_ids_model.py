"""Duplicate-id caches against a reference, in random sequences: sends and COMMITs with
persistent and non-persistent ids, writes that succeed or fail (at once or later), and
restarts from the records left in a simulated journal, with `id-cache-size` changing.

What must hold at every step:
- an address remembers exactly its last `id-cache-size` ids, in the order they were
  remembered, less those whose write failed (the reference is a plain list);
- the journal never deletes a record it does not hold, and once every write is done it
  holds no record none of whose ids is remembered (no leak);
- a clean restart remembers exactly the last `id-cache-size` (the new one) of the ids it
  remembered of persistent sends whose write succeeded (none pushed out comes back, not
  even after a lowered size was raised again);
- a crash loses none of those either (a record gives up ids only once the write of the
  ids that pushed them out is done), and brings back no id of a non-persistent or failed
  send.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from pagemq.core.duplicates import DuplicateIds
from pagemq.core.ids import Ids
from pagemq.storage.api import DuplicateIdRecord, MemoryStore

ADDRESSES = ("a", "b")


class Journal(MemoryStore):
    """The records the caches write and delete, as the journal would hold them."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[int, DuplicateIdRecord] = {}

    def write(self, records: list[DuplicateIdRecord]) -> None:
        for record in records:
            assert record.record_id not in self.records
            self.records[record.record_id] = record

    def delete_record(self, record_id: int) -> None:
        if record_id not in self.records:
            raise LookupError(f"record {record_id} is not live")
        del self.records[record_id]

    def duplicate_ids_gone(self, record_id: int, gone: int) -> None:
        record = self.records[record_id]  # (KeyError: a record not written, or deleted)
        assert record.gone < gone <= len(record.dup_ids)
        self.records[record_id] = dataclasses.replace(record, gone=gone)


class Reference:
    """Per address, the ids remembered, oldest first, and which are durable; and what
    happened to the cache since the last restart (ids remembered, ids forgotten after a
    failed write), to tell what a crash must keep."""

    def __init__(self) -> None:
        self.ids: dict[str, list[str]] = {address: [] for address in ADDRESSES}
        self.durable: set[str] = set()  # persistent ids whose write succeeded
        self.events: dict[str, list[tuple[str, str]]] = {address: [] for address in ADDRESSES}

    def remember(self, address: str, dup_id: str, size: int) -> None:
        self.ids[address].append(dup_id)
        del self.ids[address][:-size or len(self.ids[address])]
        self.events[address].append(("remember", dup_id))

    def forget(self, address: str, dup_id: str) -> None:
        if dup_id in self.ids[address]:
            self.ids[address].remove(dup_id)
        self.events[address].append(("forget", dup_id))

    def without(self, address: str, lost: set[str], size: int) -> list[str]:
        """The durable ids the cache would hold had the sends of `lost` never come (they
        were in flight at a crash): a crash must forget none of them."""
        cache = list(self.start[address])
        for event, dup_id in self.events[address]:
            if dup_id in lost:
                continue
            if event == "remember":
                cache.append(dup_id)
                del cache[:-size or len(cache)]
            elif dup_id in cache:
                cache.remove(dup_id)
        return [dup_id for dup_id in cache if dup_id in self.durable]

    def restarted(self) -> None:
        self.start = {address: list(self.ids[address]) for address in ADDRESSES}
        self.events = {address: [] for address in ADDRESSES}


Sent = list[tuple[str, str]]
Write = tuple["asyncio.Future[None]", list[DuplicateIdRecord], Sent, bool, Sent]
"""A write in flight: its future, the records it writes, the ids it makes durable (or, failing,
forgets), whether it succeeds, and every id it remembered."""


class Simulation:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rnd = random.Random(seed)
        self.loop = asyncio.new_event_loop()
        self.journal = Journal()
        self.ids = Ids()
        self.size = self.rnd.choice([1, 2, 3, 5, 8])
        self.duplicates = self._caches(self.size)
        self.reference = Reference()
        self.reference.restarted()
        self.pending: list[Write] = []
        self.counter = 0

    def _caches(self, size: int) -> DuplicateIds:
        return DuplicateIds(self.journal, self.ids, lambda address: size)

    def commit(self) -> None:
        """A COMMIT (or, with one id, a plain SEND) of new ids, its write done now or later."""
        rnd = self.rnd
        sends = []
        if rnd.random() < 0.3:  # the Spark sink's shape: one address, the same persistence
            address, persistent = rnd.choice(ADDRESSES), rnd.random() < 0.8
            for _ in range(rnd.choice([2, 5, 12, 30])):
                self.counter += 1
                sends.append((address, f"id{self.counter}", persistent))
        for _ in range(rnd.choice([1, 1, 2, 3, 6, 10]) if not sends else 0):
            self.counter += 1
            sends.append((rnd.choice(ADDRESSES), f"id{self.counter}", rnd.random() < 0.8))
        records, remembered = self.duplicates.remember_all(sends)
        kept = {(address, dup_id) for address, dup_ids, _group in remembered.groups for dup_id in dup_ids}
        for address, dup_id, _persistent in sends:
            if (address, dup_id) in kept:
                self.reference.remember(address, dup_id, self.size)
        future: asyncio.Future[None] = self.loop.create_future()
        self.duplicates.written(remembered, future)
        if rnd.random() < 0.9:
            durable = [(a, d) for a, d, p in sends if p and (a, d) in kept]
            write = (future, records, durable, True, sorted(kept))
        else:  # a failed write forgets every id of the COMMIT
            write = (future, records, sorted(kept), False, sorted(kept))
        if rnd.random() < 0.5:
            self.settle(write)
        else:
            self.pending.append(write)

    def settle(self, write: Write) -> None:
        future, records, sent, succeeds, _remembered = write
        if succeeds:
            self.journal.write(records)  # the records are in the journal once written
            future.set_result(None)
            self.reference.durable.update(dup_id for _address, dup_id in sent)
        else:
            future.set_exception(OSError("write failed"))
            future.exception()  # (retrieved: a COMMIT that remembered no id has no callback)
            for address, dup_id in sent:
                self.reference.forget(address, dup_id)
        self.loop.run_until_complete(asyncio.sleep(0))  # the caches' callbacks run

    def restart(self, *, crash: bool) -> None:
        """A restart, maybe with a new size: after a clean stop every write is done first;
        after a crash those in flight never finish (their records are not in the journal,
        and the records of the ids they pushed out are as they were)."""
        reference = self.reference
        lost = {dup_id for write in self.pending for _address, dup_id in write[4]} if crash else set()
        if crash:
            self.pending.clear()
        while self.pending:
            self.settle(self.pending.pop(0))
        before = {address: reference.without(address, lost, self.size) for address in ADDRESSES}
        size = self.size if self.rnd.random() < 0.7 else self.rnd.choice([0, 1, 2, 3, 5, 8])
        self.duplicates = self._caches(size)
        stale = self.duplicates.recover(sorted(self.journal.records.values(), key=lambda r: r.record_id))
        for record_id in stale:
            self.journal.delete_record(record_id)
        self.duplicates.write_recovered()  # as Recovery.forget_stale does
        for address in ADDRESSES:
            after = list(self.duplicates.caches.get(address, {}))
            kept = before[address][-size:] if size else []
            if crash:  # nothing remembered and durable is lost; nothing else comes back
                assert set(kept) <= set(after), (self.seed, address, "a remembered id lost by the crash")
                assert set(after) <= reference.durable, (self.seed, address, "an id never made durable")
                assert len(after) <= size and after == sorted(after, key=lambda d: int(d[2:])), self.seed
            else:
                assert after == kept, (self.seed, address, size)
            reference.ids[address] = after
        reference.restarted()
        self.size = size

    def check(self) -> None:
        for address in ADDRESSES:
            remembered = list(self.duplicates.caches.get(address, {}))
            assert remembered == self.reference.ids[address], (self.seed, address)
        if not self.pending:
            caches = self.duplicates.caches.values()
            live = {group.record_id for cache in caches for group in cache.values()}
            assert set(self.journal.records) <= live, (self.seed, "records no remembered id needs")

    def run(self) -> None:
        for _step in range(self.rnd.randint(20, 120)):
            action = self.rnd.random()
            if action < 0.55:
                self.commit()
            elif action < 0.8 and self.pending:  # a write in flight is done
                self.settle(self.pending.pop(self.rnd.randrange(len(self.pending))))
            elif action < 0.9:
                self.restart(crash=self.rnd.random() < 0.4)
            self.check()
        while self.pending:
            self.settle(self.pending.pop(0))
        self.check()
        self.loop.close()


@pytest.mark.parametrize("seed", range(300))
def test_duplicate_id_caches_match_the_reference(seed: int) -> None:
    Simulation(seed).run()

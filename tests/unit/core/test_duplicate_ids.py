"""Duplicate-id caches: one journal record per COMMIT and address, deleted once all its ids
are gone from the cache (the e2e behaviour is in tests/e2e/test_duplicate_detection.py)."""

from __future__ import annotations

import asyncio

from pagemq.core.duplicates import DuplicateIds
from pagemq.core.ids import Ids
from pagemq.storage.api import DuplicateIdRecord, MemoryStore


class DeletingStore(MemoryStore):
    """Remembers which records the cache deletes."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[int] = []
        self.gone: list[tuple[int, int]] = []

    def delete_record(self, record_id: int) -> None:
        self.deleted.append(record_id)

    def duplicate_ids_gone(self, record_id: int, gone: int) -> None:
        self.gone.append((record_id, gone))


def caches(size: int = 4) -> tuple[DuplicateIds, DeletingStore]:
    store = DeletingStore()
    return DuplicateIds(store, Ids(), lambda address: size), store


def sends(address: str, *ids: str, persistent: bool = True) -> list[tuple[str, str, bool]]:
    return [(address, dup_id, persistent) for dup_id in ids]


def test_a_commits_ids_for_one_address_are_one_record() -> None:
    duplicates, _store = caches()
    records, _remembered = duplicates.remember_all(sends("a", "1", "2") + sends("b", "3") + sends("a", "4"))
    assert [(r.address, r.dup_ids) for r in records] == [("a", ("1", "2", "4")), ("b", ("3",))]
    assert all(duplicates.seen("a", dup_id)[0] for dup_id in "124")


def test_non_persistent_ids_are_remembered_without_a_record() -> None:
    duplicates, _store = caches()
    records, _remembered = duplicates.remember_all(sends("a", "1") + sends("a", "2", persistent=False))
    assert [r.dup_ids for r in records] == [("1",)]
    assert duplicates.seen("a", "2")[0]


def test_a_record_is_deleted_once_all_its_ids_are_evicted() -> None:
    duplicates, store = caches(size=4)
    (first,), remembered = duplicates.remember_all(sends("a", "1", "2", "3"))
    duplicates.written(remembered, None)
    duplicates.written(duplicates.remember_all(sends("a", "4", "5"))[1], None)
    assert store.deleted == []  # "1" is gone, "2" and "3" still hold the record
    assert store.gone == [(first.record_id, 1)]
    duplicates.written(duplicates.remember_all(sends("a", "6", "7"))[1], None)
    assert store.deleted == [first.record_id]
    assert not duplicates.seen("a", "3")[0] and duplicates.seen("a", "4")[0]


def test_of_more_ids_than_the_cache_holds_only_the_last_are_recorded() -> None:
    duplicates, _store = caches(size=2)
    records, _ = duplicates.remember_all(sends("a", "1", "2", "3"))
    assert [r.dup_ids for r in records] == [("2", "3")]  # (the COMMIT would evict "1" itself)
    assert duplicates.count("a") == 2


def test_a_failed_write_forgets_its_ids_and_deletes_its_record() -> None:
    async def body() -> None:
        duplicates, store = caches()
        records, remembered = duplicates.remember_all(sends("a", "1", "2"))
        write: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        duplicates.written(remembered, write)
        assert duplicates.seen("a", "1") == (True, write)
        write.set_exception(OSError("disk"))
        await asyncio.sleep(0)
        assert not duplicates.seen("a", "1")[0] and not duplicates.seen("a", "2")[0]
        assert store.deleted == [records[0].record_id]

    asyncio.run(body())


def test_a_record_evicted_while_its_write_is_pending_is_deleted_after_it() -> None:
    async def body() -> None:
        duplicates, store = caches(size=1)
        (first,), remembered = duplicates.remember_all(sends("a", "1"))
        write: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        duplicates.written(remembered, write)
        duplicates.written(duplicates.remember_all(sends("a", "2"))[1], None)
        assert store.deleted == []
        write.set_result(None)
        await asyncio.sleep(0)
        assert store.deleted == [first.record_id]

    asyncio.run(body())


def test_evicted_ids_stay_in_the_journal_until_the_ids_that_pushed_them_out_are_written() -> None:
    """A crash before the newer ids are durable must not forget the older, receipted ones."""
    async def body() -> None:
        duplicates, store = caches(size=2)
        (first,), remembered = duplicates.remember_all(sends("a", "1", "2"))
        duplicates.written(remembered, None)
        _records, newer = duplicates.remember_all(sends("a", "3"))
        write: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        duplicates.written(newer, write)
        assert not duplicates.seen("a", "1")[0] and store.gone == []
        write.set_result(None)
        await asyncio.sleep(0)
        assert store.gone == [(first.record_id, 1)]

    asyncio.run(body())


def test_recovery_drops_only_records_none_of_whose_ids_fit_a_lowered_cache() -> None:
    duplicates, store = caches(size=2)
    stale = duplicates.recover([
        DuplicateIdRecord(1, "a", ("1", "2")),
        DuplicateIdRecord(2, "a", ("3", "4", "5"), gone=1),
        DuplicateIdRecord(3, "a", ("6",)),
    ])
    assert stale == [1]
    assert [dup_id for dup_id in "123456" if duplicates.seen("a", dup_id)[0]] == ["5", "6"]
    duplicates.write_recovered()
    assert store.gone == [(2, 2)]  # "4" is gone too now: a larger size later does not bring it back


def test_recovery_with_detection_off_drops_every_record() -> None:
    duplicates, _store = caches(size=0)
    records = [DuplicateIdRecord(1, "a", ("1",)), DuplicateIdRecord(2, "a", ("2",))]
    assert duplicates.recover(records) == [1, 2]
    assert duplicates.total() == 0


def test_dropping_an_address_deletes_each_of_its_records_once() -> None:
    duplicates, store = caches()
    (first,), _ = duplicates.remember_all(sends("a", "1", "2"))
    (second,), _ = duplicates.remember_all(sends("a", "3"))
    duplicates.drop_address("a")
    assert sorted(store.deleted) == [first.record_id, second.record_id]


def test_ids_a_durable_record_pushed_out_stay_out_when_the_update_saying_so_was_lost() -> None:
    """A kill -9 just after a2's write: the update dropping a1 never reached the disk. A
    larger id-cache-size at the restart must not bring a1 back: the records are replayed
    with the size they were written with."""
    duplicates, _store = caches(size=5)
    stale = duplicates.recover([DuplicateIdRecord(1, "a", ("a1",), cache_size=1),
                                DuplicateIdRecord(2, "a", ("a2",), cache_size=1)])
    assert stale == [1]
    assert not duplicates.seen("a", "a1")[0] and duplicates.seen("a", "a2")[0]

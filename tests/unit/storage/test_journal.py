"""Journal appends, group commit, file rolling, restart and failure reporting."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from pagemq.storage import records as rec
from pagemq.storage.fileio import FaultyFileIO, FileIO
from pagemq.storage.journal import (
    DuplicateRecordError,
    Journal,
    JournalError,
    LiveRecord,
    OpKind,
    UnknownRecordError,
)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


async def started(directory: Path, **options: object) -> Journal:
    journal = Journal(directory, **options)  # type: ignore[arg-type]
    journal.load()
    journal.start(asyncio.get_running_loop())
    return journal


def reload(directory: Path, fileio: FileIO | None = None) -> list[LiveRecord]:
    journal = Journal(directory, fileio=fileio) if fileio else Journal(directory)
    return journal.load().records


def test_records_survive_restart_in_append_order_with_their_updates(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        journal.add(5, 1, b"five")
        journal.add(3, 2, b"three")
        journal.update(5, 7, b"u1")
        journal.add(9, 1, b"nine")
        journal.update(5, 8, b"u2")
        await journal.delete(9, sync=True)  # type: ignore[misc]
        await journal.close()

    run(body)
    result = Journal(tmp_path).load()
    assert result.records == [
        LiveRecord(5, 1, b"five", [(7, b"u1"), (8, b"u2")]),
        LiveRecord(3, 2, b"three", []),
    ]
    assert result.max_id == 9
    assert result.dropped == []


def test_a_restart_appends_to_a_new_file_and_continues_the_seq(tmp_path: Path) -> None:
    async def body() -> None:
        for round_no in range(3):
            journal = await started(tmp_path)
            await journal.add(round_no, 1, b"x", sync=True)  # type: ignore[misc]
            await journal.close()

    run(body)
    journal = Journal(tmp_path)
    assert [r.id for r in journal.load().records] == [0, 1, 2]
    infos = journal.files()
    assert [i.file_no for i in infos] == [1, 2, 3]
    assert [i.first_seq for i in infos] == [1, 2, 3]


def test_sync_appends_of_one_batch_share_one_future_and_one_fsync(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio)
        fio.hold_fsync()
        first = journal.add(0, 1, b"first", sync=True)
        await asyncio.to_thread(fio.fsync_waiting.wait, 5)  # batch 1 is in its fsync
        futures = [journal.add(i, 1, b"x" * 100, sync=True) for i in range(1, 101)]
        assert len({id(f) for f in futures}) == 1 and futures[0] is not first
        fsyncs_before = fio.fsyncs
        fio.release_fsync()
        await asyncio.gather(first, *futures)  # type: ignore[arg-type]
        assert fio.fsyncs - fsyncs_before == 2  # batch 1, then the 100 appends together
        assert journal.stats()["batches"] == 2
        await journal.close()

    run(body)


def test_a_sync_future_resolves_only_after_the_fsync(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio)
        fio.hold_fsync()
        future = journal.add(1, 1, b"x", sync=True)
        assert future is not None
        await asyncio.to_thread(fio.fsync_waiting.wait, 5)
        await asyncio.sleep(0.02)
        assert not future.done()
        fio.release_fsync()
        await future
        await journal.close()

    run(body)


def test_without_journal_sync_futures_resolve_after_write_with_no_fsync(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio, sync=False)
        await asyncio.gather(*(journal.add(i, 1, b"x", sync=True) for i in range(10)))  # type: ignore[misc]
        await journal.close()
        assert fio.fsyncs == 0

    run(body)
    assert len(reload(tmp_path)) == 10


def test_non_sync_appends_return_none_and_are_written_in_order(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        assert journal.add(1, 1, b"a") is None
        assert journal.update(1, 2, b"b") is None
        assert journal.add(2, 1, b"c") is None
        await journal.flush()
        assert journal.stats()["records_written"] == 3
        await journal.close()

    run(body)
    assert reload(tmp_path) == [LiveRecord(1, 1, b"a", [(2, b"b")]), LiveRecord(2, 1, b"c", [])]


def test_adds_and_deletes_of_a_loop_turn_are_written_at_its_end_in_order(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        for id in range(1, 6):
            journal.add(id, 1, b"x%d" % id)
        journal.delete(5)  # added and deleted in the same turn
        with pytest.raises(DuplicateRecordError):
            journal.add(3, 1, b"")  # added, even if not yet written
        assert journal._gathered  # held until the turn ends
        await asyncio.sleep(0)
        assert not journal._gathered
        assert journal.stats()["records_written"] == 6  # still one record each
        for id in (1, 2, 3):
            assert journal.delete(id) is None
        with pytest.raises(UnknownRecordError):
            journal.delete(3)  # deleted, even if not yet written
        with pytest.raises(UnknownRecordError):
            journal.update(2, 1, b"")  # written first, then refused
        journal.delete(4)
        journal.add(6, 1, b"y")
        journal.update(6, 2, b"z")  # the gathered DELETE and ADD go first
        assert journal.stats()["records_written"] == 12
        await journal.flush()
        await journal.close()

    run(body)
    assert reload(tmp_path) == [LiveRecord(6, 1, b"y", [(2, b"z")])]


def test_a_sync_add_resolves_once_its_gathered_record_is_durable(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        first = journal.add(1, 1, b"a", sync=True)
        second = journal.add(2, 1, b"b", sync=True)
        assert first is second is not None and not first.done()
        await first
        assert [record.id for record in reload(tmp_path)] == [1, 2]
        await journal.close()

    run(body)


def test_a_gathered_delete_is_durable_once_a_flush_resolves(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        journal.add(1, 1, b"x")
        journal.add(2, 1, b"x")
        journal.delete(1)
        await journal.flush()  # what a RECEIPT for the ACK waits for
        assert reload(tmp_path) == [LiveRecord(2, 1, b"x", [])]
        await journal.close()

    run(body)


def test_flush_with_nothing_pending_resolves_at_once(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        assert journal.flush().done()
        await journal.close()

    run(body)


def test_update_or_delete_of_an_id_that_is_not_live_is_refused(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        with pytest.raises(UnknownRecordError):
            journal.update(1, 1, b"")
        with pytest.raises(UnknownRecordError):
            journal.delete(1)
        journal.add(1, 1, b"")
        with pytest.raises(DuplicateRecordError):
            journal.add(1, 1, b"")
        assert journal.stats()["records_written"] == 1
        await journal.close()

    run(body)


def test_an_invalid_transaction_is_refused_whole(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        with pytest.raises(UnknownRecordError):
            journal.transaction([(OpKind.ADD, 1, 1, b"a"), (OpKind.DELETE, 2, 0, b"")])
        assert journal.stats()["records_written"] == 0
        # ops see the earlier ops of the same transaction
        await journal.transaction([(OpKind.ADD, 1, 1, b"a"), (OpKind.UPDATE, 1, 2, b"u"),
                                   (OpKind.ADD, 2, 1, b"b"), (OpKind.DELETE, 2, 0, b"")],
                                  sync=True)  # type: ignore[misc]
        await journal.close()

    run(body)
    assert reload(tmp_path) == [LiveRecord(1, 1, b"a", [(2, b"u")])]


def test_files_roll_at_file_size_and_a_big_record_gets_a_file_of_its_own(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path, file_size=1024)
        for i in range(20):
            journal.add(i, 1, b"x" * 100)
        journal.add(100, 1, b"B" * 5000)
        journal.add(101, 1, b"after")
        await journal.flush()
        await journal.close()

    run(body)
    sizes = [p.stat().st_size for p in sorted(tmp_path.glob("*.jnl"))]
    assert all(size <= 1024 for size in sizes[:-2])
    assert sizes[-2] == rec.FILE_HEADER.size + rec.RECORD_OVERHEAD + 5000
    records = reload(tmp_path)
    assert [r.id for r in records] == [*range(20), 100, 101]
    assert records[20].payload == b"B" * 5000


def test_enospc_fails_the_batch_then_writes_it_once_there_is_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that finds no space fails its waiters, is cut back so the file ends on a
    whole record, and is written again (ahead of later appends) once a retry succeeds;
    the loop hears of the stall once and of the recovery once."""
    monkeypatch.setattr("pagemq.storage.group_commit.RETRY_PERIOD", 0.05)
    fio = FaultyFileIO()
    heard: list[OSError | None] = []

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio)
        journal.on_space = heard.append
        await journal.add(1, 1, b"before", sync=True)  # type: ignore[misc]
        size = (tmp_path / rec.file_name(1)).stat().st_size
        for n in (1, 2, 3):  # the write and two retries find no space
            fio.fail_write(n, errno.ENOSPC)
        future = journal.add(2, 1, b"kept", sync=True)
        with pytest.raises(JournalError) as info:
            await future  # type: ignore[misc]
        assert info.value.errno == errno.ENOSPC
        assert journal.stalled
        assert (tmp_path / rec.file_name(1)).stat().st_size == size  # cut back: well-formed
        later = journal.add(3, 1, b"after", sync=True)  # accepted; durable once room is back
        await asyncio.wait_for(later, 5)  # type: ignore[arg-type]
        assert not journal.stalled
        await journal.close()

    with caplog.at_level(logging.DEBUG, logger="pagemq.journal"):
        run(body)
    assert [type(e) for e in heard] == [JournalError, type(None)]
    assert sum("batch is kept" in r.message for r in caplog.records) == 1  # logged once
    assert [r.id for r in reload(tmp_path)] == [1, 2, 3]


def test_a_batch_across_a_roll_that_finds_no_space_is_cut_back_in_both_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed batch ends one file and starts the next: the first is cut back to its size
    before the batch, the new one removed (it held only this batch), and the retry writes
    both again."""
    monkeypatch.setattr("pagemq.storage.group_commit.RETRY_PERIOD", 0.05)
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio, file_size=1024)
        await journal.add(1, 1, b"a" * 600, sync=True)  # type: ignore[misc]
        size = (tmp_path / rec.file_name(1)).stat().st_size
        fio.fail_write(2, errno.ENOSPC)  # the write to the new file, after the first one's
        first = journal.add(2, 1, b"b" * 300, sync=False)
        rolled = journal.add(3, 1, b"c" * 600, sync=True)  # does not fit: file 2
        assert first is None
        with pytest.raises(JournalError):
            await rolled  # type: ignore[misc]
        assert (tmp_path / rec.file_name(1)).stat().st_size == size
        assert not (tmp_path / rec.file_name(2)).exists()
        await asyncio.wait_for(journal.flush(), 5)
        await journal.close()

    run(body)
    assert [r.id for r in reload(tmp_path)] == [1, 2, 3]


def test_a_failure_other_than_no_space_still_stops_the_journal(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio)
        await journal.add(1, 1, b"before", sync=True)  # type: ignore[misc]
        fio.fail_write(1, errno.EIO)
        with pytest.raises(JournalError):
            await journal.add(2, 1, b"lost", sync=True)  # type: ignore[misc]
        with pytest.raises(JournalError, match="refuses appends"):
            journal.add(3, 1, b"refused")
        await journal.close()

    run(body)
    assert [r.id for r in reload(tmp_path)] == [1]


def test_a_journal_stalled_for_space_closes_without_waiting_for_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pagemq.storage.group_commit.RETRY_PERIOD", 0.05)
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio)
        await journal.add(1, 1, b"before", sync=True)  # type: ignore[misc]
        for n in range(1, 200):
            fio.fail_write(n, errno.ENOSPC)
        with pytest.raises(JournalError):
            await journal.add(2, 1, b"never", sync=True)  # type: ignore[misc]
        await asyncio.wait_for(journal.close(), 5)

    run(body)
    assert [r.id for r in reload(tmp_path)] == [1]


def test_appends_before_start_and_after_close_are_refused(tmp_path: Path) -> None:
    async def body() -> None:
        journal = Journal(tmp_path)
        journal.load()
        with pytest.raises(JournalError):
            journal.add(1, 1, b"")
        journal.start(asyncio.get_running_loop())
        await journal.close()
        with pytest.raises(JournalError):
            journal.add(2, 1, b"")

    run(body)


def test_start_before_load_is_a_programming_error(tmp_path: Path) -> None:
    async def body() -> None:
        with pytest.raises(RuntimeError, match="load"):
            Journal(tmp_path).start(asyncio.get_running_loop())

    run(body)


def test_stats_count_records_files_flushes_and_live_records(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        for i in range(5):
            journal.add(i, 1, b"x")
        await journal.delete(0, sync=True)  # type: ignore[misc]
        stats = journal.stats()
        assert stats["records_written"] == 6
        assert stats["live_records"] == 4
        assert stats["files"] == 1
        assert stats["flushes"] >= 1
        assert stats["bytes"] == (tmp_path / rec.file_name(1)).stat().st_size
        await journal.close()

    run(body)

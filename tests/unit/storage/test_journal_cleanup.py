"""Cleanup: spent files deleted or archived, replay-safety of removals, compaction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from pagemq.storage import records as rec
from pagemq.storage.fileio import FaultyFileIO
from pagemq.storage.journal import Journal, LiveRecord

SMALL = 2048
PAYLOAD = b"m" * 100


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


async def started(directory: Path, **options: object) -> Journal:
    journal = Journal(directory, file_size=SMALL, **options)  # type: ignore[arg-type]
    journal.load()
    journal.start(asyncio.get_running_loop())
    return journal


def data_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.jnl"))


def test_files_whose_records_are_all_deleted_are_removed(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        for i in range(60):
            journal.add(i, 1, PAYLOAD)
        for i in range(60):
            journal.delete(i)
        journal.add(999, 1, b"keep")
        await journal.flush()
        assert len(data_files(tmp_path)) > 3
        report = journal.cleanup()
        assert report.deleted >= 3 and report.errors == 0
        assert data_files(tmp_path) == [rec.file_name(journal.files()[-1].file_no)]
        assert journal.stats()["files_deleted"] == report.deleted
        await journal.close()

    run(body)
    assert Journal(tmp_path).load().records == [LiveRecord(999, 1, b"keep", [])]


def test_spent_files_are_moved_to_the_archive_directory_when_set(tmp_path: Path) -> None:
    archive = tmp_path / "archive" / "journal"
    directory = tmp_path / "journal"

    async def body() -> None:
        journal = await started(directory, archive_directory=archive)
        for i in range(40):
            journal.add(i, 1, PAYLOAD)
            journal.delete(i)
        journal.add(999, 1, b"keep")
        await journal.flush()
        files_before = set(data_files(directory))
        report = journal.cleanup()
        assert report.archived > 0 and report.deleted == 0
        assert set(data_files(archive)) == files_before - set(data_files(directory))
        assert journal.stats()["files_archived"] == report.archived
        await journal.close()

    run(body)


def test_a_file_holding_deletes_of_older_live_files_records_is_kept(tmp_path: Path) -> None:
    """Removing the DELETE while its ADD's file exists would resurrect the record."""

    async def body() -> None:
        journal = await started(tmp_path, compact_min_live_ratio=0.0)
        journal.add(1, 1, b"stays")
        for i in range(10, 25):
            journal.add(i, 1, PAYLOAD)  # fills file 1
        for i in range(10, 25):
            journal.delete(i)  # file 2 kills file 1's records
        for i in range(100, 140):
            journal.add(i, 1, PAYLOAD)  # later files, live
        await journal.flush()
        journal.cleanup()
        assert rec.file_name(1) in data_files(tmp_path)
        assert rec.file_name(2) in data_files(tmp_path)
        await journal.close()

    run(body)
    ids = [r.id for r in Journal(tmp_path).load().records]
    assert ids == [1, *range(100, 140)]


def test_one_old_live_record_does_not_pin_every_later_file(tmp_path: Path) -> None:
    """AMQ-3978: KahaDB keeps every log after one unacknowledged message; we compact."""
    directory = tmp_path / "journal"

    async def body() -> None:
        journal = await started(directory)
        journal.add(1, 7, b"the early unacknowledged message")
        journal.update(1, 8, b"delivery count 1")
        next_id = 2
        for _ in range(400):  # many files' worth of messages produced and consumed
            journal.add(next_id, 7, PAYLOAD)
            if next_id > 2:
                journal.delete(next_id - 1)
            next_id += 1
        journal.delete(next_id - 1)
        await journal.flush()
        assert len(data_files(directory)) > 20
        report = journal.cleanup()
        assert report.compacted_files >= 1
        assert len(data_files(directory)) <= 2
        assert journal.stats()["compactions"] == 1
        await journal.close()

    run(body)
    result = Journal(directory, file_size=SMALL).load()
    assert result.records == [LiveRecord(1, 7, b"the early unacknowledged message",
                                         [(8, b"delivery count 1")])]
    assert result.dropped == []


def test_compaction_keeps_updates_that_live_in_other_files(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        journal.add(1, 1, b"a")
        for i in range(2, 40):
            journal.add(i, 1, PAYLOAD)
            journal.delete(i)
        journal.update(1, 2, b"late update")
        for i in range(40, 60):
            journal.add(i, 1, PAYLOAD)
            journal.delete(i)
        await journal.flush()
        journal.cleanup()
        journal.update(1, 3, b"after compaction")
        journal.cleanup()
        await journal.close()

    run(body)
    assert Journal(tmp_path).load().records == [
        LiveRecord(1, 1, b"a", [(2, b"late update"), (3, b"after compaction")])]


def test_deletes_of_compacted_records_are_honoured_after_restart(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        journal.add(1, 1, b"one")
        journal.add(2, 1, b"two")
        for i in range(3, 60):
            journal.add(i, 1, PAYLOAD)
            journal.delete(i)
        await journal.flush()
        assert journal.cleanup().compacted_files >= 1
        journal.delete(1)
        for i in range(60, 100):  # roll past the file holding the delete
            journal.add(i, 1, PAYLOAD)
            journal.delete(i)
        await journal.flush()
        journal.cleanup()
        await journal.close()

    run(body)
    assert [r.id for r in Journal(tmp_path).load().records] == [2]


def test_cleanup_leaves_files_whose_deletes_are_not_yet_durable(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fileio=fio)
        for i in range(40):
            journal.add(i, 1, PAYLOAD)
        await journal.flush()
        fio.hold_fsync()
        journal.add(1000, 1, b"x", sync=True)  # writer now waits in fsync
        await asyncio.to_thread(fio.fsync_waiting.wait, 5)
        for i in range(40):
            journal.delete(i)  # buffered behind the held fsync: not durable
        before = data_files(tmp_path)
        report = journal.cleanup()
        assert report.deleted == 0 and report.compacted_files == 0
        assert data_files(tmp_path) == before
        fio.release_fsync()
        await journal.flush()
        assert journal.cleanup().deleted > 0
        await journal.close()

    run(body)
    assert [r.id for r in Journal(tmp_path).load().records] == [1000]


def test_cleanup_never_touches_the_file_being_appended_to(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path)
        journal.add(1, 1, b"a")
        journal.delete(1)
        await journal.flush()
        report = journal.cleanup()
        assert report.deleted == 0
        assert data_files(tmp_path) == [rec.file_name(1)]
        journal.add(2, 1, b"b")
        await journal.close()

    run(body)
    assert [r.id for r in Journal(tmp_path).load().records] == [2]


def test_compaction_carries_deletes_that_still_shadow_an_older_file(tmp_path: Path) -> None:
    """File 1 stays (mostly live); file 2 is sparse but holds DELETEs of file 1's records."""

    async def body() -> None:
        journal = await started(tmp_path)
        for i in range(1, 17):
            journal.add(i, 1, PAYLOAD)  # 1..15 fill file 1; 16 starts file 2
        journal.delete(1)
        journal.delete(2)
        journal.add(500, 1, b"live in file 2")
        for i in range(600, 640):
            journal.add(i, 1, PAYLOAD)
            journal.delete(i)
        await journal.flush()
        report = journal.cleanup()
        assert report.compacted_files >= 1
        assert rec.file_name(1) in data_files(tmp_path)
        assert rec.file_name(2) not in data_files(tmp_path)
        compacted = [info for info in journal.files() if info.compacted_from]
        assert compacted and compacted[0].needed_deletes == 2
        await journal.close()

    run(body)
    assert [r.id for r in Journal(tmp_path).load().records] == [*range(3, 17), 500]


def test_a_drained_journal_shrinks_back_to_one_header_only_file(tmp_path: Path) -> None:
    """Nothing live and a big current file: cleanup starts a fresh file and removes the rest."""

    async def body() -> None:
        journal = Journal(tmp_path, file_size=8 << 20)
        journal.load()
        journal.start(asyncio.get_running_loop())
        payload = b"x" * 1024
        for i in range(2000):
            journal.add(i, 1, payload)
        for i in range(2000):
            journal.delete(i)
        await journal.flush()
        assert sum(p.stat().st_size for p in tmp_path.glob("*.jnl")) > 2_000_000
        journal.cleanup()
        await journal.flush()
        journal.cleanup()
        files = list(tmp_path.glob("*.jnl"))
        assert len(files) == 1 and files[0].stat().st_size < 1024
        await journal.close()

    run(body)
    assert Journal(tmp_path).load().records == []


def test_a_big_spent_current_file_goes_even_while_older_records_live(tmp_path: Path) -> None:
    """Queue definitions stay live in file 1; the drained traffic after them must not pin
    the big current file for ever (what a drained broker's data directory looked like)."""

    async def body() -> None:
        journal = Journal(tmp_path, file_size=8 << 20)
        journal.load()
        journal.start(asyncio.get_running_loop())
        journal.add(1, 2, b"queue definition")
        payload = b"x" * 1024
        for i in range(100, 2100):
            journal.add(i, 1, payload)
        for i in range(100, 2100):
            journal.delete(i)
        await journal.flush()
        journal.cleanup()
        await journal.flush()
        journal.cleanup()
        assert sum(p.stat().st_size for p in tmp_path.glob("*.jnl")) < 4096
        await journal.close()

    run(body)
    assert [r.id for r in Journal(tmp_path).load().records] == [1]


def test_a_big_current_file_that_is_mostly_live_is_kept(tmp_path: Path) -> None:
    async def body() -> None:
        journal = Journal(tmp_path, file_size=8 << 20)
        journal.load()
        journal.start(asyncio.get_running_loop())
        for i in range(2000):
            journal.add(i, 1, b"x" * 1024)
        await journal.flush()
        journal.cleanup()
        await journal.flush()
        journal.cleanup()
        assert data_files(tmp_path) == [rec.file_name(1)]
        await journal.close()

    run(body)
    assert len(Journal(tmp_path).load().records) == 2000


def test_a_cleanup_is_wanted_once_cleanup_bytes_were_appended_and_not_after_it(tmp_path: Path) -> None:
    async def body() -> None:
        journal = await started(tmp_path, cleanup_bytes=1000)
        assert not journal.cleanup_wanted()
        for i in range(8):
            journal.add(i, 1, PAYLOAD)  # 127 bytes each
        assert journal.cleanup_wanted()
        await journal.flush()
        journal.cleanup()
        assert not journal.cleanup_wanted()
        await journal.close()

    run(body)
    assert Journal(tmp_path, file_size=32 << 20).cleanup_bytes == 2 << 20  # 1/16 of a file
    assert Journal(tmp_path, file_size=1 << 20).cleanup_bytes == 1 << 20  # at least 1 MiB


def test_a_load_then_cleanup_removes_what_the_last_run_left_spent(tmp_path: Path) -> None:
    """What the broker does right after start-up: the files a killed run filled with
    produced-and-consumed records go at once, not a cleanup period later."""
    async def crashed_run() -> None:
        journal = await started(tmp_path)
        for i in range(200):
            journal.add(i, 1, PAYLOAD)
            journal.delete(i)
        journal.add(1000, 1, b"live")
        await journal.flush()
        await journal.close()  # no cleanup ran: like a broker killed before its period

    run(crashed_run)
    assert len(data_files(tmp_path)) > 10

    async def start() -> None:
        journal = Journal(tmp_path, file_size=SMALL)
        assert [r.id for r in journal.load().records] == [1000]
        journal.start(asyncio.get_running_loop())
        journal.cleanup()
        await journal.flush()
        journal.cleanup()
        await journal.close()

    run(start)
    assert len(data_files(tmp_path)) <= 2
    assert [r.id for r in Journal(tmp_path).load().records] == [1000]


def test_a_cleanup_that_had_to_leave_unsettled_files_is_wanted_again_once_they_are_durable(
    tmp_path: Path,
) -> None:
    """The deletes that spend a file may not be durable when a cleanup runs; with no more
    writes after it, nothing else would bring the cleanup back before its period."""
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, cleanup_bytes=1 << 30, fileio=fio)
        for i in range(60):
            journal.add(i, 1, PAYLOAD)
        await journal.flush()
        fio.hold_fsync()
        for i in range(60):
            journal.delete(i)  # not durable yet: the fsync is held
        journal.add(999, 1, b"keep")
        flushed = journal.flush()
        await asyncio.to_thread(fio.fsync_waiting.wait, 5)
        before = data_files(tmp_path)
        assert journal.cleanup().deleted == 0
        assert not journal.cleanup_wanted()
        fio.release_fsync()
        await flushed
        assert journal.cleanup_wanted()
        assert journal.cleanup().deleted > 0
        assert len(data_files(tmp_path)) < len(before)
        assert not journal.cleanup_wanted()
        await journal.close()

    run(body)

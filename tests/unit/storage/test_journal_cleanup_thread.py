"""Cleanup with its file work in the cleanup thread while the loop goes on appending.

The hard case is compaction: records whose ADDs are being copied are deleted, updated or
outlived while the copy is written. Their copies are dead, and their DELETEs must shadow
the copy from then on, or a later cleanup would drop the DELETE and a restart resurrect
the record (`Journal._redirect_late_kills`).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from pagemq.storage import records as rec
from pagemq.storage.fileio import FaultyFileIO
from pagemq.storage.journal import Journal, LiveRecord

SMALL = 2048
PAYLOAD = b"m" * 100


class GatedFileIO(FaultyFileIO):
    """Holds the compacted copy's rename (its bytes written and fsynced) until `go_on`."""

    def __init__(self) -> None:
        super().__init__()
        self.copying = threading.Event()
        self.go_on = threading.Event()
        self.renamed_on: list[str] = []

    def rename(self, src: Path, dst: Path) -> None:
        if src.name.endswith(rec.TEMP_SUFFIX):
            self.renamed_on.append(threading.current_thread().name)
            if not self.go_on.is_set():
                self.copying.set()
                self.go_on.wait(10)
        super().rename(src, dst)


async def started(directory: Path, fio: FaultyFileIO) -> Journal:
    journal = Journal(directory, file_size=SMALL, fileio=fio)
    journal.load()
    journal.start(asyncio.get_running_loop())
    return journal


def fill(journal: Journal) -> None:
    """Records 1-3 early in file 1, then many files of produced-and-consumed messages."""
    for i in (1, 2, 3):
        journal.add(i, 7, b"early %d" % i)
    for i in range(10, 300):
        journal.add(i, 7, PAYLOAD)
        journal.delete(i)
    journal.add(5000, 7, b"late")


def churn(journal: Journal, start: int) -> None:
    """Enough produced-and-consumed records to roll past the current file."""
    for i in range(start, start + 60):
        journal.add(i, 7, PAYLOAD)
        journal.delete(i)


async def settle(journal: Journal) -> None:
    """What the broker's cleanup loop does, twice: every removable file goes."""
    for _ in range(2):
        await journal.flush()
        await journal.cleanup_in_thread()


async def compaction_held(directory: Path, fio: GatedFileIO) -> tuple[Journal, asyncio.Task[object]]:
    """A journal (`fill`ed) whose cleanup is under way: its compacted copy, written and
    fsynced, waits for its rename."""
    journal = await started(directory, fio)
    fill(journal)
    await journal.flush()
    task: asyncio.Task[object] = asyncio.ensure_future(journal.cleanup_in_thread())
    assert await asyncio.to_thread(fio.copying.wait, 10)
    return journal, task


def test_records_changed_while_their_copy_is_written_keep_their_fate(tmp_path: Path) -> None:
    fio = GatedFileIO()

    async def body() -> None:
        journal, task = await compaction_held(tmp_path, fio)
        journal.delete(1)  # its ADD is in the copy being written
        journal.update(2, 8, b"redelivered")
        # the loop is not held up by the cleanup: a synced append completes meanwhile
        await asyncio.wait_for(journal.add(6000, 7, b"during", sync=True), 5)  # type: ignore[arg-type]
        assert not task.done()
        fio.go_on.set()
        report = await task
        assert report.compacted_files > 0 and report.errors == 0  # type: ignore[attr-defined]
        assert fio.renamed_on and all(name.startswith("pagemq-journal-cleanup") for name in fio.renamed_on)
        churn(journal, 7000)  # the DELETE of record 1 is in a file that is no longer current
        await settle(journal)
        await journal.close()

    asyncio.run(body())
    assert Journal(tmp_path).load().records == [
        LiveRecord(2, 7, b"early 2", [(8, b"redelivered")]), LiveRecord(3, 7, b"early 3", []),
        LiveRecord(5000, 7, b"late", []), LiveRecord(6000, 7, b"during", []),
    ]

    async def drain() -> None:
        journal = Journal(tmp_path, file_size=SMALL)
        journal.load()
        journal.start(asyncio.get_running_loop())
        for i in (2, 3, 5000, 6000):
            journal.delete(i)
        churn(journal, 8000)
        await settle(journal)
        await journal.close()

    asyncio.run(drain())
    assert len(list(tmp_path.glob("*.jnl"))) <= 2
    assert Journal(tmp_path).load().records == []


def test_power_lost_after_a_compaction_keeps_what_was_not_durable_undone(tmp_path: Path) -> None:
    """A kill -9 while the copy's sources are gone but a DELETE appended during the copy is
    not durable: the record comes back (its acknowledgement was never promised)."""
    fio = GatedFileIO()

    async def body() -> None:
        journal, task = await compaction_held(tmp_path, fio)
        fio.hold_fsync()
        journal.delete(1)
        journal.update(2, 8, b"redelivered")
        journal.flush()
        fio.go_on.set()
        report = await task
        assert report.compacted_files > 0  # type: ignore[attr-defined]
        fio.crash()
        await journal.close()

    asyncio.run(body())
    assert Journal(tmp_path).load().records == [
        LiveRecord(1, 7, b"early 1", []), LiveRecord(2, 7, b"early 2", []),
        LiveRecord(3, 7, b"early 3", []), LiveRecord(5000, 7, b"late", []),
    ]


def test_a_closing_journal_waits_for_a_cleanup_whose_caller_was_cancelled(tmp_path: Path) -> None:
    fio = GatedFileIO()

    async def body() -> None:
        journal, task = await compaction_held(tmp_path, fio)
        task.cancel()
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(journal.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
        fio.go_on.set()
        await closing

    asyncio.run(body())
    assert not list(tmp_path.glob("*" + rec.TEMP_SUFFIX))
    assert [r.id for r in Journal(tmp_path).load().records] == [1, 2, 3, 5000]


class _NoWalk(dict[int, object]):
    """The index's live records, refusing to be walked whole."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("cleanup walked every live record")

    def items(self):  # type: ignore[no-untyped-def]
        raise AssertionError("cleanup walked every live record")

    def values(self):  # type: ignore[no-untyped-def]
        raise AssertionError("cleanup walked every live record")


def test_compaction_looks_only_at_the_live_records_of_its_sources(tmp_path: Path) -> None:
    async def body() -> None:
        journal = Journal(tmp_path, file_size=SMALL)
        journal.load()
        journal.start(asyncio.get_running_loop())
        fill(journal)
        for i in range(20_000, 20_300):
            journal.add(i, 7, PAYLOAD)  # many live records in later files
        await journal.flush()
        journal._records = _NoWalk(journal._records)  # type: ignore[assignment]
        report = await journal.cleanup_in_thread()
        assert report.compacted_files > 0 and report.compacted_records == 3
        journal._records = dict(journal._records)  # type: ignore[assignment]
        await journal.close()

    asyncio.run(body())
    assert len(Journal(tmp_path).load().records) == 304


def test_a_cancelled_waiter_does_not_void_the_batch_others_wait_on(tmp_path: Path) -> None:
    """The broker's cleanup loop, cancelled at shutdown while it awaits a flush, cancels the
    future it awaits: the batch's shared one, which SENDs and `close` wait on too."""
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fio)
        fio.hold_fsync()
        journal.add(1, 7, b"first", sync=True)
        await asyncio.to_thread(fio.fsync_waiting.wait, 5)  # that batch is being written
        send = journal.add(2, 7, b"second", sync=True)  # the next batch's future
        waiter = asyncio.ensure_future(journal.flush())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        later = journal.add(3, 7, b"third", sync=True)
        fio.release_fsync()
        await asyncio.wait_for(asyncio.gather(journal.flush(), later), 5)  # type: ignore[arg-type]
        assert send is not None and send.cancelled()  # the one the cancelled task awaited
        await journal.close()

    asyncio.run(body())
    assert [r.id for r in Journal(tmp_path).load().records] == [1, 2, 3]

"""Journal under injected faults; each test names the fault (`FaultyFileIO`) it injects.

A simulated crash keeps exactly the bytes that were fsynced (plus, for a torn write, the
part the disk got); recovery must then keep every acknowledged record, apply transactions
whole or not at all, and never duplicate or resurrect a record.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from pagemq.storage import records as rec
from pagemq.storage.fileio import FaultyFileIO, SimulatedCrash
from pagemq.storage.journal import CleanupReport, Journal, JournalError, LiveRecord, OpKind

SMALL = 2048
PAYLOAD = b"m" * 100


async def started(directory: Path, fio: FaultyFileIO, **options: object) -> Journal:
    journal = Journal(directory, fileio=fio, **options)  # type: ignore[arg-type]
    journal.load()
    journal.start(asyncio.get_running_loop())
    return journal


def ids(directory: Path) -> list[int]:
    return [r.id for r in Journal(directory).load().records]


TX_OPS = [(OpKind.ADD, 20, 1, b"tx-a"), (OpKind.UPDATE, 0, 2, b"tx-u"),
          (OpKind.DELETE, 1, 0, b""), (OpKind.ADD, 21, 1, b"tx-b")]
ADD_10 = len(rec.AddRecord(1, 10, 1, b"plain").encode())
TX_LEN = len(rec.TransactionRecord(1, tuple(rec.TxOp(k, i, t, p) for k, i, t, p in TX_OPS)).encode())


@pytest.mark.parametrize("tear_at", [0, 1, ADD_10 - 1, ADD_10, ADD_10 + 1, ADD_10 + 23,
                                     ADD_10 + TX_LEN // 2, ADD_10 + TX_LEN - 1, ADD_10 + TX_LEN])
def test_fault_torn_batch_write_keeps_a_transaction_whole_or_not_at_all(tmp_path: Path, tear_at: int) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fio)
        for i in range(5):
            journal.add(i, 1, b"durable")
        await journal.flush()
        fio.hold_fsync()
        held = journal.add(100, 1, b"held", sync=True)
        await asyncio.to_thread(fio.fsync_waiting.wait, 5)
        fio.tear_write(1, tear_at)  # the next batch's one write is torn, then power is lost
        journal.add(10, 1, b"plain")
        torn = journal.transaction(TX_OPS, sync=True)
        fio.release_fsync()
        await held  # type: ignore[misc]
        with pytest.raises(JournalError):
            await torn  # type: ignore[misc]
        await journal.close()

    asyncio.run(body())
    fio.crash()
    found = Journal(tmp_path).load()
    expected = [0, 1, 2, 3, 4, 100]
    if tear_at >= ADD_10:
        expected.append(10)
    if tear_at >= ADD_10 + TX_LEN:
        expected = [0, 2, 3, 4, 100, 10, 20, 21]
        assert found.records[0] == LiveRecord(0, 1, b"durable", [(2, b"tx-u")])
    assert [r.id for r in found.records] == expected
    assert len(found.dropped) == (0 if tear_at in (0, ADD_10, ADD_10 + TX_LEN) else 1)


def test_fault_crash_loses_no_acknowledged_record(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fio, file_size=SMALL)
        futures = [journal.add(i, 1, PAYLOAD, sync=True) for i in range(50)]
        await asyncio.gather(*futures)  # type: ignore[arg-type]
        fio.hold_fsync()
        pending = journal.add(50, 1, b"unacknowledged", sync=True)
        await asyncio.to_thread(fio.fsync_waiting.wait, 5)
        fio.crash()  # power lost while the fsync of record 50 was under way
        with pytest.raises(JournalError):
            await pending  # type: ignore[misc]
        await journal.close()

    asyncio.run(body())
    assert ids(tmp_path)[:50] == list(range(50))


def test_fault_failed_fsync_fails_the_batch_future(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fio)
        await journal.add(1, 1, b"x", sync=True)  # type: ignore[misc]
        fio.crash_after(2)  # the write succeeds, the fsync dies
        with pytest.raises(JournalError, match="fsync failed"):
            await journal.add(2, 1, b"y", sync=True)  # type: ignore[misc]
        await journal.close()

    asyncio.run(body())


def _fill(journal: Journal) -> None:
    """One early live record, then many files of produced-and-consumed messages."""
    journal.add(1, 7, b"early")
    journal.update(1, 8, b"redelivered")
    for i in range(2, 300):
        journal.add(i, 7, PAYLOAD)
        journal.delete(i)
    journal.add(5000, 7, b"late")


async def _cleanup(journal: Journal, in_thread: bool) -> CleanupReport:
    """As tools do (file work on this thread), or as the broker does (in the cleanup thread)."""
    return await journal.cleanup_in_thread() if in_thread else journal.cleanup()


def _cleanup_steps(directory: Path, in_thread: bool) -> int:
    fio = FaultyFileIO()

    async def body() -> int:
        journal = await started(directory, fio, file_size=SMALL)
        _fill(journal)
        await journal.flush()
        before = fio.steps
        report = await _cleanup(journal, in_thread)
        assert report.compacted_files > 0 and report.errors == 0
        await journal.close()
        return fio.steps - before

    return asyncio.run(body())


EXPECTED = [LiveRecord(1, 7, b"early", [(8, b"redelivered")]), LiveRecord(5000, 7, b"late", [])]


@pytest.mark.parametrize("in_thread", [False, True], ids=["inline", "cleanup-thread"])
@pytest.mark.parametrize("removes_survive", [False, True], ids=["power-loss", "removals-durable"])
def test_fault_crash_at_every_step_of_cleanup_loses_and_duplicates_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, removes_survive: bool, in_thread: bool
) -> None:
    """Power lost at each step of a cleanup (compaction included): entries and bytes not
    fsynced are gone; in the second variant the file system had made the removals durable
    but nothing else, which is what a source removed before its copy's name was durable
    would turn into lost records."""
    steps = _cleanup_steps(tmp_path / "dry-run", in_thread)
    assert steps > 5
    finished_on_load = 0
    for crash_at in range(1, steps + 1):
        directory = tmp_path / f"crash{crash_at}"
        fio = FaultyFileIO()

        async def body(fio: FaultyFileIO = fio, directory: Path = directory, n: int = crash_at) -> None:
            journal = await started(directory, fio, file_size=SMALL)
            _fill(journal)
            await journal.flush()
            fio.crash_after(n)
            report = await _cleanup(journal, in_thread)
            assert report.errors > 0
            await journal.close()

        asyncio.run(body())
        fio.crash(removes_survive=removes_survive)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pagemq.journal"):
            result = Journal(directory, file_size=SMALL).load()
        assert result.records == EXPECTED, crash_at
        assert result.dropped == [], crash_at
        finished_on_load += "finishing an interrupted compaction" in caplog.text
        _cleanup_and_check(directory)
    assert finished_on_load > 0


def _cleanup_and_check(directory: Path) -> None:
    """After recovery a normal cleanup completes and the state survives one more restart."""

    async def body() -> None:
        journal = Journal(directory, file_size=SMALL)
        journal.load()
        journal.start(asyncio.get_running_loop())
        journal.cleanup()
        await journal.close()

    asyncio.run(body())
    assert len(list(directory.glob("*.jnl"))) <= 2
    assert Journal(directory, file_size=SMALL).load().records == EXPECTED


def test_fault_simulated_crash_is_an_oserror_the_cleanup_reports(tmp_path: Path) -> None:
    fio = FaultyFileIO()

    async def body() -> None:
        journal = await started(tmp_path, fio, file_size=SMALL)
        _fill(journal)
        await journal.flush()
        fio.crash_after(1)
        assert journal.cleanup().errors >= 1
        with pytest.raises(SimulatedCrash):
            fio.remove(tmp_path / "anything")
        await journal.close()

    asyncio.run(body())


@pytest.mark.parametrize("step", range(1, 40, 2))
def test_power_loss_at_any_step_of_appends_across_new_files_keeps_every_receipted_record(
    tmp_path: Path, step: int
) -> None:
    """Fault: power cut at the n-th step while records fill several small files. A new
    file's name must be durable (directory fsynced) before a future of a record in it
    resolves; a file must be fsynced before the next one starts."""
    fio = FaultyFileIO()
    acked: list[int] = []

    async def body() -> None:
        journal = await started(tmp_path, fio, file_size=SMALL)
        fio.crash_after(step)
        try:
            for i in range(60):
                future = journal.add(i, 1, PAYLOAD, sync=(i % 5 == 4))
                if future is not None:
                    await future
                    acked.extend(range(i - 4, i + 1))
        except JournalError:
            pass
        await journal.close()

    asyncio.run(body())
    fio.crash()
    found = ids(tmp_path)
    assert found[: len(acked)] == acked, (step, acked[-3:], found[-3:])

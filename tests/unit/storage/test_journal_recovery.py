"""Recovery by replay: torn tails, damage, no-op recovery (ZODB testRecover), never a crash."""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pagemq.storage import records as rec
from pagemq.storage.fileio import REAL_FILE_IO
from pagemq.storage.journal import Journal, LiveRecord, OpKind


def build(directory: Path, write: Callable[[Journal], None], **options: object) -> None:
    """Run `write` against a started journal, then flush and close it."""

    async def body() -> None:
        journal = Journal(directory, **options)  # type: ignore[arg-type]
        journal.load()
        journal.start(asyncio.get_running_loop())
        write(journal)
        await journal.flush()
        await journal.close()

    asyncio.run(body())


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_a_torn_last_record_is_cut_at_every_offset_and_nothing_before_it_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Truncate the tail record at each byte; the earlier records always come back."""
    origin = tmp_path / "origin"
    build(origin, lambda j: [j.add(i, 1, bytes([i]) * 10) for i in range(3)])
    path = origin / rec.file_name(1)
    before = path.stat().st_size
    # after a restart the tail record, a transaction, starts a file of its own
    build(origin, lambda j: j.transaction([(OpKind.ADD, 7, 2, b"tx"), (OpKind.DELETE, 0, 0, b"")]))
    last = origin / rec.file_name(2)
    whole = last.read_bytes()
    record_start = rec.FILE_HEADER.size
    assert path.stat().st_size == before
    for cut in range(record_start, len(whole)):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(origin, work)
        (work / last.name).write_bytes(whole[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pagemq.journal"):
            result = Journal(work).load()
        assert [r.id for r in result.records] == [0, 1, 2], cut
        if cut > record_start:
            assert result.dropped == [
                f"{last.name}: torn tail at offset {record_start}: {cut - record_start} bytes dropped "
                f"({result.dropped[0].split('(', 1)[1]}"]
            assert f"torn tail at offset {record_start}" in caplog.text
        assert (work / last.name).stat().st_size == record_start
        assert snapshot(work)[path.name] == path.read_bytes()


def test_recovering_an_undamaged_journal_leaves_every_file_byte_identical(tmp_path: Path) -> None:
    def write(journal: Journal) -> None:
        for i in range(200):
            journal.add(i, i % 3, b"p" * (i % 50))
            if i % 4 == 0:
                journal.update(i, 9, b"u")
            if i % 3 == 0:
                journal.delete(i)
        journal.transaction([(OpKind.ADD, 1000, 1, b"t"), (OpKind.DELETE, 1, 0, b"")])

    build(tmp_path, write, file_size=2048)
    build(tmp_path, lambda j: j.cleanup(), file_size=2048)  # includes a compacted file
    before = snapshot(tmp_path)
    first = Journal(tmp_path, file_size=2048).load()
    second = Journal(tmp_path, file_size=2048).load()
    assert snapshot(tmp_path) == before
    assert first == second
    assert first.dropped == []


def test_damage_in_an_older_file_costs_only_the_damaged_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    build(tmp_path, lambda j: [j.add(i, 1, b"x" * 100) for i in range(30)], file_size=1024)
    first = tmp_path / rec.file_name(1)
    data = bytearray(first.read_bytes())
    record_len = rec.RECORD_OVERHEAD + 100
    bad_offset = rec.FILE_HEADER.size + 2 * record_len
    data[bad_offset + 40] ^= 0xFF
    first.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="pagemq.journal"):
        result = Journal(tmp_path).load()
    assert [r.id for r in result.records] == [i for i in range(30) if i != 2]
    assert result.dropped == [
        f"{first.name}: damaged bytes at offset {bad_offset} (bad record CRC): {record_len} bytes "
        f"unreadable, read on from offset {bad_offset + record_len}; op seq 3 lost; "
        "the file is kept (set aside, never deleted)"]
    assert f"damaged bytes at offset {bad_offset}" in caplog.text
    assert first.read_bytes() == bytes(data)  # kept for inspection, not truncated


def test_damage_in_the_middle_of_the_newest_file_is_not_cut_away(tmp_path: Path) -> None:
    build(tmp_path, lambda j: [j.add(i, 1, b"y" * 20) for i in range(10)])
    path = tmp_path / rec.file_name(1)
    data = bytearray(path.read_bytes())
    data[rec.FILE_HEADER.size + 30] ^= 0x01
    path.write_bytes(bytes(data))
    result = Journal(tmp_path).load()
    assert [r.id for r in result.records] == list(range(1, 10))
    assert "damaged bytes at offset 32" in result.dropped[0]
    assert path.read_bytes() == bytes(data)


def test_deletes_after_a_damaged_record_are_still_applied(tmp_path: Path) -> None:
    """The defect: one bad record made recovery skip the rest of its file, so the deletes
    written after it were lost and acknowledged messages came back."""
    def write(journal: Journal) -> None:
        for i in range(20):
            journal.add(i, 3, b"message %d" % i)
        for i in range(10, 20):
            journal.delete(i)  # acknowledged

    build(tmp_path, write)
    path = tmp_path / rec.file_name(1)
    data = bytearray(path.read_bytes())
    data[rec.FILE_HEADER.size + 5 * (rec.RECORD_OVERHEAD + 9) + 25] ^= 0x40  # inside message 5
    path.write_bytes(bytes(data))
    result = Journal(tmp_path).load()
    assert [r.id for r in result.records] == [i for i in range(10) if i != 5]


def test_cleanup_sets_a_spent_damaged_file_aside_instead_of_deleting_it(tmp_path: Path) -> None:
    def write(journal: Journal) -> None:
        for i in range(12):
            journal.add(i, 1, b"z" * 100)

    build(tmp_path, write, file_size=1024)
    first = tmp_path / rec.file_name(1)
    data = bytearray(first.read_bytes())
    data[rec.FILE_HEADER.size + 60] ^= 0x08  # record 0 is unreadable now
    first.write_bytes(bytes(data))

    def consume(journal: Journal) -> None:
        for i in range(1, 12):
            journal.delete(i)

    build(tmp_path, consume, file_size=1024)
    report = {}

    async def clean() -> None:
        journal = Journal(tmp_path, file_size=1024)
        journal.load()
        journal.start(asyncio.get_running_loop())
        report.update(vars(journal.cleanup()))
        await journal.close()

    asyncio.run(clean())
    assert not first.exists()
    aside = tmp_path / (first.name.removesuffix(".jnl") + ".jnl.damaged")
    assert aside.read_bytes() == bytes(data)
    assert report["set_aside"] == 1
    assert Journal(tmp_path).load().records == []


def test_a_newest_file_without_a_complete_header_is_removed(tmp_path: Path) -> None:
    build(tmp_path, lambda j: j.add(1, 1, b"a"))
    (tmp_path / rec.file_name(2)).write_bytes(rec.FileHeader(2, 2).encode()[:10])
    result = Journal(tmp_path).load()
    assert [r.id for r in result.records] == [1]
    assert not (tmp_path / rec.file_name(2)).exists()
    assert "header never written" in result.dropped[0]


def test_a_file_with_a_bad_header_is_read_past_the_header_and_its_number_not_reused(
    tmp_path: Path
) -> None:
    build(tmp_path, lambda j: j.add(1, 1, b"a"))
    build(tmp_path, lambda j: j.add(2, 1, b"b"))
    first = tmp_path / rec.file_name(1)
    first.write_bytes(b"XXXX" + first.read_bytes()[4:])
    journal = Journal(tmp_path)
    result = journal.load()
    assert [r.id for r in result.records] == [1, 2]
    assert "damaged bytes at offset 0 (bad file magic" in result.dropped[0]
    assert first.exists()
    build(tmp_path, lambda j: j.add(3, 1, b"c"))
    assert (tmp_path / rec.file_name(3)).exists()


def test_a_file_of_another_format_version_is_skipped_whole_and_kept(tmp_path: Path) -> None:
    build(tmp_path, lambda j: j.add(1, 1, b"a"))
    build(tmp_path, lambda j: j.add(2, 1, b"b"))
    first = tmp_path / rec.file_name(1)
    first.write_bytes(rec.FileHeader(1, 1, version=9).encode() + first.read_bytes()[32:])
    result = Journal(tmp_path).load()
    assert [r.id for r in result.records] == [2]
    assert "unsupported format version 9" in result.dropped[0] and first.exists()


def test_a_leftover_compaction_temp_file_is_removed(tmp_path: Path) -> None:
    build(tmp_path, lambda j: j.add(1, 1, b"a"))
    (tmp_path / rec.temp_name(5)).write_bytes(b"half a compacted file")
    result = Journal(tmp_path).load()
    assert [r.id for r in result.records] == [1]
    assert not (tmp_path / rec.temp_name(5)).exists()


def test_a_read_only_load_changes_nothing_even_on_damage(tmp_path: Path) -> None:
    build(tmp_path, lambda j: [j.add(i, 1, b"z" * 10) for i in range(3)])
    path = tmp_path / rec.file_name(1)
    path.write_bytes(path.read_bytes()[:-5])
    (tmp_path / rec.temp_name(9)).write_bytes(b"tmp")
    before = snapshot(tmp_path)
    result = Journal(tmp_path).load(repair=False)
    assert [r.id for r in result.records] == [0, 1]
    assert snapshot(tmp_path) == before


def test_seq_order_not_file_order_decides_replay(tmp_path: Path) -> None:
    """A later-numbered file may hold older ops (compaction); replay still applies by seq."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / rec.file_name(1)).write_bytes(
        rec.FileHeader(1, 5).encode() + rec.DeleteRecord(6, 1).encode()
        + rec.AddRecord(7, 2, 1, b"b").encode())
    (tmp_path / rec.file_name(2)).write_bytes(
        rec.FileHeader(2, 1).encode() + rec.CompactedRecord(()).encode()
        + rec.AddRecord(1, 1, 1, b"a").encode() + rec.UpdateRecord(8, 2, 3, b"u").encode())
    result = Journal(tmp_path).load()
    assert result.records == [LiveRecord(2, 1, b"b", [(3, b"u")])]
    assert result.dropped == []


@pytest.mark.parametrize("seed", range(40))
def test_random_damage_never_crashes_load_and_never_invents_records(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    origin = tmp_path / "origin"
    payloads = {i: rng.randbytes(rng.randrange(0, 300)) for i in range(60)}

    def write(journal: Journal) -> None:
        for i, payload in payloads.items():
            journal.add(i, 1, payload)
            if rng.random() < 0.3:
                journal.update(i, 2, payload[:5])

    build(origin, write, file_size=4096)
    files = sorted(origin.glob("*.jnl"))
    for _ in range(rng.randrange(1, 6)):
        victim = rng.choice(files)
        data = bytearray(victim.read_bytes())
        action = rng.choice(["flip", "truncate", "garbage", "zero"])
        at = rng.randrange(len(data))
        if action == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif action == "truncate":
            del data[at:]
        elif action == "garbage":
            data[at:at] = rng.randbytes(rng.randrange(1, 64))
        else:
            data[at:at + 64] = bytes(len(data[at:at + 64]))
        victim.write_bytes(bytes(data))
    result = Journal(origin, file_size=4096).load()
    for record in result.records:
        assert record.payload == payloads[record.id]
        assert all(update == (2, payloads[record.id][:5]) for update in record.updates)
    Journal(origin, file_size=4096).load()  # and a second recovery is calm


@pytest.mark.parametrize("seed", range(40))
def test_one_damaged_byte_anywhere_costs_at_most_the_record_holding_it(tmp_path: Path, seed: int) -> None:
    """Resynchronisation: whatever byte is flipped, every other record is recovered."""
    rng = random.Random(seed)
    origin = tmp_path / "origin"

    def write(journal: Journal) -> None:
        for i in range(60):
            journal.add(i, 1, rng.randbytes(rng.randrange(0, 200)))

    build(origin, write, file_size=4096)
    spans: list[tuple[Path, int, int, int]] = []  # file, start, end, record id
    for path in sorted(origin.glob("*.jnl")):
        scan = rec.FileScan(path, path.stat().st_size)
        records = list(rec.scan_file(REAL_FILE_IO, path, scan))
        for (start, record), nxt in zip(records, [*(o for o, _ in records[1:]), scan.size], strict=True):
            spans.append((path, start, nxt, record.id))  # type: ignore[union-attr]
    victim = rng.choice(sorted(origin.glob("*.jnl")))
    data = bytearray(victim.read_bytes())
    at = rng.randrange(len(data))
    data[at] ^= 1 << rng.randrange(8)
    victim.write_bytes(bytes(data))
    hit = {id for path, start, end, id in spans if path == victim and start <= at < end}
    result = Journal(origin, file_size=4096).load()
    assert {r.id for r in result.records} >= set(range(60)) - hit, (victim.name, at)


def test_an_op_in_two_files_is_replayed_once_from_the_lower_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / rec.file_name(1)).write_bytes(
        rec.FileHeader(1, 1).encode() + rec.AddRecord(1, 1, 1, b"first").encode())
    (tmp_path / rec.file_name(2)).write_bytes(
        rec.FileHeader(2, 1).encode() + rec.AddRecord(1, 1, 1, b"second").encode()
        + rec.AddRecord(2, 2, 1, b"b").encode())
    with caplog.at_level(logging.WARNING, logger="pagemq.journal"):
        result = Journal(tmp_path).load()
    assert result.records == [LiveRecord(1, 1, b"first", []), LiveRecord(2, 1, b"b", [])]
    assert "op seq 1 met twice" in caplog.text


def test_a_record_added_again_without_a_delete_takes_the_place_of_its_later_add(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / rec.file_name(1)).write_bytes(
        rec.FileHeader(1, 1).encode() + rec.AddRecord(1, 1, 1, b"old").encode()
        + rec.AddRecord(2, 2, 1, b"b").encode() + rec.AddRecord(3, 1, 1, b"new").encode())
    result = Journal(tmp_path).load()
    assert result.records == [LiveRecord(2, 1, b"b", []), LiveRecord(1, 1, b"new", [])]


def _reference_replay(files: dict[int, list[rec.Record]]) -> tuple[list[LiveRecord], int]:
    """What replay must find: every op once, by (seq, file number), applied in turn."""
    ops = sorted((op.seq, file_no, op) for file_no, records in files.items() for record in records
                 for op in rec.record_ops(record, 0))
    live: dict[int, LiveRecord] = {}
    seen = set()
    for seq, _file_no, op in ops:
        if seq in seen:
            continue
        seen.add(seq)
        if op.kind == OpKind.ADD:
            live.pop(op.id, None)
            live[op.id] = LiveRecord(op.id, op.type, op.payload, [])
        elif op.id in live and op.kind == OpKind.UPDATE:
            live[op.id].updates.append((op.type, op.payload))
        elif op.id in live:
            del live[op.id]
    return list(live.values()), max((op.id for _s, _f, op in ops), default=0)


@pytest.mark.parametrize("seed", range(30))
def test_replay_of_files_whose_seqs_interleave_matches_a_plain_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Compacted files hold seqs among other files' (and after an interrupted compaction the
    same ones): replay, batch by batch, must equal a merge of every op by (seq, file)."""
    monkeypatch.setattr(rec, "_SCAN_CHUNK", random.Random(seed).choice([rec._SCAN_CHUNK, 200]))
    rng = random.Random(seed)
    files: dict[int, list[rec.Record]] = {n: [] for n in range(1, rng.randrange(3, 6))}
    for seq in range(1, rng.randrange(20, 200)):
        id, payload = rng.randrange(25), rng.randbytes(rng.randrange(0, 40))
        kind = rng.choice([rec.AddRecord, rec.AddRecord, rec.UpdateRecord, rec.DeleteRecord])
        record = (rec.DeleteRecord(seq, id) if kind is rec.DeleteRecord
                  else kind(seq, id, rng.randrange(1, 5), payload))  # type: ignore[operator]
        for file_no in rng.sample(sorted(files), 2 if rng.random() < 0.05 else 1):
            files[file_no].append(record)
    tmp_path.mkdir(exist_ok=True)
    for file_no, records in files.items():
        marker = [rec.CompactedRecord(()).encode()] if file_no > 1 else []  # may hold any seqs
        (tmp_path / rec.file_name(file_no)).write_bytes(b"".join(
            [rec.FileHeader(file_no, 1).encode(), *marker, *(r.encode() for r in records)]))
    expected, max_id = _reference_replay(files)
    result = Journal(tmp_path).load(repair=False)
    assert result.records == expected
    assert result.max_id == max_id

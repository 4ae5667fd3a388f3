"""Journal record codecs: the bytes match docs/formats/journal.md, and decode inverts encode."""

from __future__ import annotations

import random
import re
import zlib
from pathlib import Path

import pytest

from pagemq.storage import records as rec
from pagemq.storage.fileio import REAL_FILE_IO
from pagemq.storage.records import OpKind

DOC = Path(__file__).resolve().parents[3] / "docs" / "formats" / "journal.md"


def doc_example(title: str) -> bytes:
    """The hex block that follows the line starting with `title` in the format document."""
    text = DOC.read_text()
    match = re.search(re.escape(title) + r".*?\n```\n(.*?)```", text, re.S)
    assert match is not None, f"no example {title!r} in {DOC}"
    return bytes.fromhex(match.group(1).replace("\n", " "))


GOLDEN = [
    ("Example, file 1, base seq 1", rec.FileHeader(1, 1)),
    ("ADD seq 1, id 42", rec.AddRecord(1, 42, 3, b"hello")),
    ("UPDATE seq 2, id 42", rec.UpdateRecord(2, 42, 4, b"\x07")),
    ("DELETE seq 3, id 42", rec.DeleteRecord(3, 42)),
    ("TRANSACTION seq 4", rec.TransactionRecord(4, (
        rec.TxOp(OpKind.ADD, 43, 3, b"hi"), rec.TxOp(OpKind.DELETE, 42, 0, b"")))),
    ("COMPACTED, replacing files 1 and 2", rec.CompactedRecord((1, 2))),
]


@pytest.mark.parametrize(("title", "record"), GOLDEN, ids=[title for title, _ in GOLDEN])
def test_encoding_matches_the_hex_in_the_format_document(title: str, record: object) -> None:
    assert record.encode() == doc_example(title)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("title", "record"), GOLDEN[1:], ids=[title for title, _ in GOLDEN[1:]])
def test_decode_inverts_encode(title: str, record: rec.Record) -> None:
    data = record.encode()
    decoded, end = rec.decode_record(data, 0)
    assert decoded == record
    assert end == len(data)


def test_file_header_round_trip_and_crc() -> None:
    data = rec.FileHeader(7, 1234).encode()
    assert rec.FileHeader.decode(data) == rec.FileHeader(7, 1234)
    bad = bytearray(data)
    bad[13] ^= 1
    with pytest.raises(rec.CorruptRecord):
        rec.FileHeader.decode(bytes(bad))
    with pytest.raises(rec.TornRecord):
        rec.FileHeader.decode(data[:10])


def test_record_crc_covers_header_and_payload() -> None:
    data = rec.AddRecord(1, 42, 3, b"hello").encode()
    body = data[:-4]
    assert int.from_bytes(data[-4:], "little") == zlib.crc32(body)
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x40
        with pytest.raises(rec.RecordError):
            rec.decode_record(bytes(flipped), 0)


def test_a_cut_record_is_torn_not_corrupt() -> None:
    data = rec.AddRecord(1, 42, 3, b"hello").encode()
    for cut in range(len(data)):
        with pytest.raises(rec.TornRecord):
            rec.decode_record(data[:cut], 0)


def test_unknown_kind_is_corrupt() -> None:
    data = bytearray(rec.DeleteRecord(1, 1).encode())
    data[0] = 200
    with pytest.raises(rec.CorruptRecord, match="unknown record kind 200"):
        rec.decode_record(bytes(data), 0)


def test_transaction_ops_get_consecutive_seqs_and_file_offsets() -> None:
    record = rec.TransactionRecord(10, (
        rec.TxOp(OpKind.ADD, 1, 5, b"aaa"), rec.TxOp(OpKind.UPDATE, 2, 6, b"bb"),
        rec.TxOp(OpKind.DELETE, 3, 0, b"")))
    data = record.encode()
    ops = rec.record_ops(record, 100)
    assert [(op.seq, op.kind, op.id) for op in ops] == [
        (10, OpKind.ADD, 1), (11, OpKind.UPDATE, 2), (12, OpKind.DELETE, 3)]
    for op in ops[:2]:
        start = op.payload_offset - 100
        assert data[start:start + len(op.payload)] == op.payload
    assert rec.last_seq(record) == 12


def test_fields_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="type"):
        rec.AddRecord(1, 1, 70000, b"").encode()
    with pytest.raises(ValueError, match="id"):
        rec.AddRecord(1, -1, 1, b"").encode()


def test_record_kind_values_are_fixed() -> None:
    """Kind bytes are on disk: renumbering one would misread every existing journal."""
    assert {k.name: k.value for k in rec.RecordKind} == {
        "ADD": 1, "UPDATE": 2, "DELETE": 3, "TRANSACTION": 4, "COMPACTED": 5}
    assert {k.name: k.value for k in OpKind} == {"ADD": 1, "UPDATE": 2, "DELETE": 3}


def test_file_names_sort_by_number() -> None:
    names = [rec.file_name(n) for n in (10, 2, 1)]
    assert sorted(names) == [rec.file_name(1), rec.file_name(2), rec.file_name(10)]
    assert rec.parse_file_number(rec.file_name(12345)) == 12345
    assert rec.parse_file_number(rec.temp_name(9)) == 9
    assert rec.parse_file_number("pagemq-x.jnl") is None


def _write(path: Path, *chunks: bytes) -> None:
    path.write_bytes(b"".join(chunks))


def test_scan_file_yields_records_and_stops_at_damage(tmp_path: Path) -> None:
    path = tmp_path / rec.file_name(1)
    good = [rec.AddRecord(1, 1, 1, b"a").encode(), rec.AddRecord(2, 2, 1, b"b").encode()]
    _write(path, rec.FileHeader(1, 1).encode(), *good, b"\x01\x00garbage")
    scan = rec.FileScan(path, path.stat().st_size)
    found = list(rec.scan_file(REAL_FILE_IO, path, scan))
    assert [r.id for _, r in found] == [1, 2]  # type: ignore[union-attr]
    assert scan.good_end == 32 + len(good[0]) + len(good[1])
    assert scan.error is not None
    assert scan.torn


def test_scan_file_reads_on_past_a_damaged_record_and_says_where(tmp_path: Path) -> None:
    path = tmp_path / rec.file_name(1)
    first, second = rec.AddRecord(1, 1, 1, b"aaaa").encode(), rec.AddRecord(2, 2, 1, b"bb").encode()
    damaged = bytearray(first)
    damaged[25] ^= 0xFF
    _write(path, rec.FileHeader(1, 1).encode(), bytes(damaged), second)
    scan = rec.FileScan(path, path.stat().st_size)
    assert [r.id for _, r in rec.scan_file(REAL_FILE_IO, path, scan)] == [2]  # type: ignore[union-attr]
    assert scan.error is not None and scan.error.offset == 32
    assert scan.damage == [rec.Damage(32, 32 + len(first), "bad record CRC", True, 0, 2)]
    assert not scan.torn and scan.tail is None


def test_resync_skips_a_damaged_payload_by_its_length_never_reading_inside_it(tmp_path: Path) -> None:
    """A client's message body may hold bytes that look like a record: skipping by the bad
    record's own length never looks there."""
    path = tmp_path / rec.file_name(1)
    inside = rec.AddRecord(2, 666, 1, b"forged").encode()  # a valid record as payload bytes
    carrier = bytearray(rec.AddRecord(1, 1, 1, b"<" + inside + b">").encode())
    carrier[-1] ^= 0x01  # its CRC no longer matches
    after = rec.AddRecord(2, 2, 1, b"real").encode()
    _write(path, rec.FileHeader(1, 1).encode(), bytes(carrier), after)
    scan = rec.FileScan(path, path.stat().st_size)
    assert [r.id for _, r in rec.scan_file(REAL_FILE_IO, path, scan)] == [2]  # type: ignore[union-attr]
    assert scan.damage[0].end == 32 + len(carrier)


def test_resync_finds_the_next_record_when_the_length_field_is_damaged(tmp_path: Path) -> None:
    path = tmp_path / rec.file_name(1)
    records = [rec.AddRecord(i, i, 1, bytes([i]) * 40).encode() for i in range(1, 6)]
    damaged = bytearray(records[1])
    damaged[1:5] = b"\xff\xff\x00\x00"  # length now points far past the end
    _write(path, rec.FileHeader(1, 1).encode(), records[0], bytes(damaged), *records[2:])
    scan = rec.FileScan(path, path.stat().st_size)
    assert [r.id for _, r in rec.scan_file(REAL_FILE_IO, path, scan)] == [1, 3, 4, 5]  # type: ignore[union-attr]
    (damage,) = scan.damage
    assert (damage.offset, damage.end, damage.floor, damage.next_seq) == (
        32 + len(records[0]), 32 + 2 * len(records[0]), 1, 3)


def test_a_torn_tail_after_damage_is_still_a_tail(tmp_path: Path) -> None:
    path = tmp_path / rec.file_name(1)
    records = [rec.AddRecord(i, i, 1, b"x" * 30).encode() for i in range(1, 5)]
    bad = bytearray(records[1])
    bad[30] ^= 0x10
    _write(path, rec.FileHeader(1, 1).encode(), records[0], bytes(bad), records[2], records[3][:20])
    scan = rec.FileScan(path, path.stat().st_size)
    assert [r.id for _, r in rec.scan_file(REAL_FILE_IO, path, scan)] == [1, 3]  # type: ignore[union-attr]
    assert len(scan.damage) == 2 and scan.damage[0].resumed
    assert scan.tail is not None and scan.tail.offset == 32 + 3 * len(records[0])
    assert not scan.torn  # more than a torn tail: the file also holds damage


def test_scan_file_refuses_falling_seqs(tmp_path: Path) -> None:
    path = tmp_path / rec.file_name(1)
    _write(path, rec.FileHeader(1, 1).encode(), rec.AddRecord(5, 1, 1, b"").encode(),
           rec.AddRecord(5, 2, 1, b"").encode())
    scan = rec.FileScan(path, path.stat().st_size)
    assert len(list(rec.scan_file(REAL_FILE_IO, path, scan))) == 1
    assert "seq 5 not above previous 5" in str(scan.error)


def test_the_one_table_of_broker_record_types_matches_the_code() -> None:
    from pagemq.storage.message_store import RecordType

    docs = Path(__file__).resolve().parents[3] / "docs"
    text = (docs / "formats" / "journal.md").read_text()
    section = text.split("## Record types of the broker", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:4] for line in section.splitlines()
            if line.startswith("| ") and "---" not in line]
    documented = {int(number): kind.strip() for number, kind, _id in rows[1:]}
    assert set(documented) == {int(t) for t in RecordType}
    assert documented[RecordType.ACK] == "UPDATE"
    assert "| type | kind" not in (docs / "storage-format.md").read_text()  # one table, not two


def _random_file(path: Path, rng: random.Random, *, compacted: bool) -> None:
    """A data file of every record kind (a compaction marker first when `compacted`),
    with a little damage of a random kind when the coin says so."""
    chunks = [rec.FileHeader(1, 1).encode()]
    if compacted:
        chunks.append(rec.CompactedRecord((3, 4)).encode())
    seq = 1
    for _ in range(rng.randrange(1, 80)):
        kind = rng.choice(["add", "add", "add", "update", "delete", "transaction"])
        id = rng.randrange(30)
        payload = rng.randbytes(rng.randrange(0, 90))
        if kind == "add":
            record: rec.Record = rec.AddRecord(seq, id, rng.randrange(1, 9), payload)
        elif kind == "update":
            record = rec.UpdateRecord(seq, id, rng.randrange(1, 9), payload)
        elif kind == "delete":
            record = rec.DeleteRecord(seq, id)
        else:
            record = rec.TransactionRecord(seq, (rec.TxOp(OpKind.ADD, id, 3, payload),
                                                 rec.TxOp(OpKind.DELETE, id + 1, 0, b"")))
        chunks.append(record.encode())
        seq = rec.last_seq(record) + 1
    data = bytearray(b"".join(chunks))
    if rng.random() < 0.5:
        at = rng.randrange(rec.FILE_HEADER.size, len(data))
        action = rng.choice(["flip", "truncate", "zero"])
        if action == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif action == "truncate":
            del data[at:]
        else:
            data[at:at + 40] = bytes(len(data[at:at + 40]))
    path.write_bytes(bytes(data))


def _scan_state(scan: rec.FileScan) -> tuple[object, ...]:
    return (scan.header, scan.good_end, str(scan.error), scan.damage, scan.header_damaged,
            scan.sources)


@pytest.mark.parametrize("chunk", [rec._SCAN_CHUNK, 300, 40])
@pytest.mark.parametrize("seed", range(30))
def test_scan_ops_finds_what_scan_file_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, chunk: int
) -> None:
    """Recovery's fast scan: the same ops (plain tuples or ScannedOps, equal either way) and
    the same verdict on the file, whatever the record kinds, chunk edges and damage."""
    monkeypatch.setattr(rec, "_SCAN_CHUNK", chunk)
    rng = random.Random(seed)
    path = tmp_path / rec.file_name(1)
    _random_file(path, rng, compacted=seed % 3 == 0)
    size = path.stat().st_size
    by_record, by_ops = rec.FileScan(path, size), rec.FileScan(path, size)
    expected = [tuple(op) for offset, record in rec.scan_file(REAL_FILE_IO, path, by_record, file_no=1)
                for op in rec.record_ops(record, offset)]
    found = [tuple(op) for batch in rec.scan_ops(REAL_FILE_IO, path, by_ops, file_no=1) for op in batch]
    assert found == expected
    assert all(type(op[1]) is OpKind for op in found)
    assert _scan_state(by_ops) == _scan_state(by_record)


def test_scan_ops_reads_a_run_of_plain_records_as_one_batch(tmp_path: Path) -> None:
    path = tmp_path / rec.file_name(1)
    adds = [rec.AddRecord(i, i, 1, b"p").encode() for i in range(1, 11)]
    _write(path, rec.FileHeader(1, 1).encode(), *adds, rec.DeleteRecord(11, 3).encode(),
           rec.UpdateRecord(12, 4, 2, b"u").encode())
    scan = rec.FileScan(path, path.stat().st_size)
    batches = list(rec.scan_ops(REAL_FILE_IO, path, scan, file_no=1))
    assert [len(batch) for batch in batches] == [12]
    delete_at = rec.FILE_HEADER.size + sum(map(len, adds))
    assert batches[0][0] == (1, OpKind.ADD, 1, 1, b"p", rec.FILE_HEADER.size + rec.RECORD_HEADER.size)
    assert batches[0][10] == (11, OpKind.DELETE, 3, 0, b"", delete_at + rec.RECORD_HEADER.size)
    assert batches[0][11][:5] == (12, OpKind.UPDATE, 4, 2, b"u")
    assert scan.good_end == scan.size and scan.error is None

"""The vectorised page decoder (`pagemq.spark.page_decode`) against the page format's own
writer (`encode_frame`, `encode_message`) and reader (`read_page_file` + `decode_fields`):
random headers (non-ASCII too), empty bodies, several queues, batches and transactions,
format-1 pages, damage and a torn last record. No Spark."""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from pagemq.core.message import Message
from pagemq.spark import page_decode
from pagemq.spark.page_decode import ORDINAL, build_batch, locate
from pagemq.spark.schema import ARROW_SCHEMA
from pagemq.storage.message_codec import decode_fields, encode_message
from pagemq.storage.paging.page_files import read_page_file
from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    FrameDamage,
    PagedRecord,
    encode_file_header,
    encode_frame,
    encode_v1_frame,
    page_file_name,
)

ADDRESS = "orders"
NAMES = {1: "q1", 2: "q2"}
ALPHABET = "abcXYZ09-_:é€😀 "


def queue_name(queue: Hashable) -> str | None:
    ids = queue if isinstance(queue, tuple) else (queue,)
    known = [NAMES[qid] for qid in ids if qid in NAMES]
    return ",".join(known) if known else None


def text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))


def random_record(rng: random.Random, message_id: int, txid: int = 0) -> PagedRecord:
    headers = {text(rng, 12) or "k": text(rng, 40) for _ in range(rng.choice([0, 0, 1, 2, 5]))}
    body = rng.choice([b"", b"x", rng.randbytes(rng.randint(0, 3000))])
    message = Message(message_id, ADDRESS, headers, body, persistent=rng.random() < 0.7,
                      priority=rng.randint(0, 9), timestamp=1_700_000_000_000 + rng.randint(0, 10**9))
    queues = rng.choice([(1,), (1,), (1,), (2,), (), (1, 2), (2, 9)])
    return PagedRecord(message_id, queues, rng.random() < 0.5, encode_message(message), txid)


def random_page(rng: random.Random, records: int, *, committed: set[int]) -> bytes:
    """A page as the broker writes it: mostly MESSAGE frames, some BATCH and TX_BATCH."""
    parts, ordinal, message_id, txid = [encode_file_header(1)], 0, 1000, 0
    while ordinal < records:
        kind = rng.random()
        size = 1 if kind < 0.7 else rng.randint(1, 4)
        tx = 0
        if kind > 0.9:
            txid += 1
            tx = txid
            if rng.random() < 0.5:
                committed.add(tx)
        frame = [random_record(rng, message_id + n, tx) for n in range(size)]
        parts.append(encode_frame(frame, ordinal))
        ordinal += size
        message_id += size
    return b"".join(parts)


def expected_rows(path: Path, committed: set[int], *, headers: bool = True) -> list[dict[str, Any]]:
    """What the record-by-record reader makes of the page: the reference."""
    rows = []
    for ordinal, record in read_page_file(path, 1, [], limit=None):
        if record.txid and record.txid not in committed:
            continue
        fields = decode_fields(record.message)
        rows.append({
            "message_id": str(record.message_id), "address": ADDRESS,
            "queue": queue_name(record.queue_ids), "seq": (1 << 32) | ordinal,
            "timestamp": fields.timestamp, "priority": fields.priority,
            "persistent": record.persistent,
            "headers": list(fields.headers.items()) if headers else None, "body": fields.body,
        })
    return rows


def decoded_rows(data: bytes, *, committed: set[int] | None = None, headers: bool = True, chunk: int = 8192,
                 version: int = 2, damage: list[FrameDamage] | None = None) -> list[dict[str, Any]]:
    found = locate(data, FILE_HEADER.size, len(data), version=version, committed=committed, damage=damage)
    rows: list[dict[str, Any]] = []
    for start in range(0, len(found), chunk):
        batch, problems = build_batch(found.take(slice(start, start + chunk)), address=ADDRESS,
                                      seq_base=1 << 32, queue_name=queue_name, include_headers=headers)
        assert not problems
        assert batch.schema == ARROW_SCHEMA
        batch.validate(full=True)
        rows += batch.to_pylist()
    for row in rows:
        row["timestamp"] = int(row["timestamp"].timestamp() * 1000 + 0.5)
    return rows


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / page_file_name(1)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("seed", range(6))
def test_random_pages_decode_exactly_as_the_record_reader_reads_them(tmp_path, seed):
    rng = random.Random(seed)
    committed: set[int] = set()
    data = random_page(rng, 300, committed=committed)
    path = write(tmp_path, data)
    expected = expected_rows(path, committed)
    assert len(expected) > 200
    assert decoded_rows(data, committed=committed) == expected
    assert decoded_rows(data, committed=committed, chunk=7) == expected  # batch boundaries anywhere
    without = expected_rows(path, committed, headers=False)
    assert decoded_rows(data, committed=committed, headers=False) == without


def test_header_lengths_of_every_byte_width_decode_exactly(tmp_path):
    """Names past 255 bytes and values past 65,535 and 16,777,215 bytes: each byte of a
    lengths table entry counts (the decoder reads them column-wise)."""
    rng = random.Random(7)
    records = []
    for message_id, headers in enumerate([
        {"n" * 300: "v", "k": "é" * 40_000},  # a 300-byte name; a value of 80,000 bytes
        {},
        {"big": "x" * ((1 << 24) + 5), "": ""},
        {"a": "b", "c" * 256: "d" * 65_536},
    ], start=1):
        message = Message(message_id, ADDRESS, headers, rng.randbytes(10), persistent=True)
        records.append(PagedRecord(message_id, (1,), True, encode_message(message), 0))
    data = encode_file_header(1) + b"".join(encode_frame([r], n) for n, r in enumerate(records))
    path = write(tmp_path, data)
    assert decoded_rows(data) == expected_rows(path, set())


def test_uncommitted_transactions_are_left_out_and_all_kept_without_a_committed_set():
    rng = random.Random(7)
    frames = [[random_record(rng, 1)], [random_record(rng, 2, txid=5), random_record(rng, 3, txid=5)],
              [random_record(rng, 4)]]
    data = b"".join([encode_file_header(1), encode_frame(frames[0], 0), encode_frame(frames[1], 1),
                     encode_frame(frames[2], 3)])
    assert [row["message_id"] for row in decoded_rows(data, committed=set())] == ["1", "4"]
    assert [row["message_id"] for row in decoded_rows(data, committed={5})] == ["1", "2", "3", "4"]
    assert [row["seq"] & 0xFFFFFFFF for row in decoded_rows(data, committed={5})] == [0, 1, 2, 3]
    assert len(decoded_rows(data)) == 4


def test_empty_bodies_and_no_headers_give_empty_values_not_nulls():
    message = Message(5, ADDRESS, {}, b"", persistent=False, priority=0, timestamp=0)
    data = encode_file_header(1) + encode_frame([PagedRecord(5, (1,), False, encode_message(message))], 0)
    (row,) = decoded_rows(data)
    assert row["body"] == b"" and row["headers"] == [] and row["persistent"] is False
    assert row["priority"] == 0 and row["queue"] == "q1"


@pytest.mark.parametrize("cut", [1, 17, 40, 100, -1])
def test_a_torn_last_record_is_read_up_to_the_last_complete_one(tmp_path, cut):
    rng = random.Random(3)
    records = [random_record(rng, 100 + n) for n in range(20)]
    records[-1] = PagedRecord(119, (1,), True, encode_message(Message(119, ADDRESS, {"a": "b"}, b"y" * 500)))
    data = encode_file_header(1) + b"".join(encode_frame([r], n) for n, r in enumerate(records))
    last = len(encode_frame([records[-1]], 19))
    torn = data[:len(data) - last + (cut if cut > 0 else last - 1)]
    damage: list[FrameDamage] = []
    rows = decoded_rows(torn, damage=damage)
    assert [row["message_id"] for row in rows] == [str(100 + n) for n in range(19)]
    assert rows == expected_rows(write(tmp_path, data), set())[:19]
    assert len(damage) == 1 and damage[0].torn and damage[0].offset == len(data) - last


def test_damage_in_the_middle_is_noted_and_read_past():
    rng = random.Random(4)
    records = [random_record(rng, 200 + n) for n in range(10)]
    frames = [encode_frame([r], n) for n, r in enumerate(records)]
    bad = bytearray(frames[4])
    bad[-1] ^= 0xFF  # the CRC no longer matches: the frame's own length resynchronises
    data = encode_file_header(1) + b"".join(frames[:4]) + bytes(bad) + b"".join(frames[5:])
    damage: list[FrameDamage] = []
    rows = decoded_rows(data, damage=damage)
    assert [row["message_id"] for row in rows] == [str(200 + n) for n in range(10) if n != 4]
    assert [row["seq"] & 0xFFFFFFFF for row in rows] == [n for n in range(10) if n != 4]
    assert len(damage) == 1 and damage[0].lost == 1 and not damage[0].torn


def test_a_format_1_page_is_read_through_the_record_reader():
    rng = random.Random(5)
    records = [random_record(rng, 300 + n) for n in range(12)]
    header = bytearray(encode_file_header(1))
    struct.pack_into("<H", header, 4, 1)  # version 1
    struct.pack_into("<I", header, FILE_HEADER.size - 4, zlib.crc32(bytes(header[:FILE_HEADER.size - 4])))
    data = bytes(header) + b"".join(encode_v1_frame([r]) for r in records)
    rows = decoded_rows(data, version=1)
    assert [row["message_id"] for row in rows] == [str(300 + n) for n in range(12)]
    assert [row["seq"] & 0xFFFFFFFF for row in rows] == list(range(12))
    assert [row["body"] for row in rows] == [decode_fields(r.message).body for r in records]


def test_a_record_that_does_not_decode_is_reported_and_the_others_kept():
    good = [random_record(random.Random(6), 400 + n) for n in range(3)]
    garbage = PagedRecord(401, (1,), True, b"\x02" + bytes(60))  # unknown codec version
    short = PagedRecord(402, (1,), True, b"\x01\x00")  # shorter than a codec head
    lying = bytearray(encode_message(Message(403, ADDRESS, {"a": "b"}, b"zz")))
    struct.pack_into("<I", lying, 34, 3)  # body length says 3, the message holds 2
    frames = [good[0], garbage, short, PagedRecord(403, (1,), True, bytes(lying)), good[2]]
    data = encode_file_header(1) + b"".join(encode_frame([r], n) for n, r in enumerate(frames))
    found = locate(data, FILE_HEADER.size, len(data))
    batch, problems = build_batch(found, address=ADDRESS, seq_base=0, queue_name=queue_name)
    assert batch.column("seq").to_pylist() == [0, 4]
    assert [(p.ordinal, p.message_id) for p in problems] == [(1, 401), (2, 402), (3, 403)]
    assert "version 2" in problems[0].reason and "too short" in problems[1].reason


def test_headers_that_do_not_add_up_or_hold_a_lone_surrogate_are_problems_of_their_row_only():
    good = encode_message(Message(1, ADDRESS, {"k": "v"}, b"a"))
    lengths = bytearray(encode_message(Message(2, ADDRESS, {"kk": "v"}, b"a")))
    struct.pack_into("<H", lengths, 38, 1)  # key length 1, value length 1: two bytes of text but three
    surrogate = encode_message(Message(3, ADDRESS, {"k": "\ud800"}, b"a"))
    messages = [good, bytes(lengths), surrogate, good]
    records = [PagedRecord(n + 1, (1,), True, m) for n, m in enumerate(messages)]
    data = encode_file_header(1) + b"".join(encode_frame([r], n) for n, r in enumerate(records))
    found = locate(data, FILE_HEADER.size, len(data))
    batch, problems = build_batch(found, address=ADDRESS, seq_base=0, queue_name=queue_name)
    assert batch.column("seq").to_pylist() == [0, 3]
    assert batch.column("headers").to_pylist() == [[("k", "v")], [("k", "v")]]
    assert [p.ordinal for p in problems] == [1, 2]
    # without headers they are not looked at
    batch, problems = build_batch(found, address=ADDRESS, seq_base=0, queue_name=queue_name,
                                  include_headers=False)
    assert batch.num_rows == 4 and not problems
    assert batch.column("headers").null_count == 4


def test_a_batch_holds_its_own_rows_bytes_not_the_page_buffer():
    rng = random.Random(8)
    records = [PagedRecord(n, (1,), True, encode_message(Message(n, ADDRESS, {}, rng.randbytes(1000))))
               for n in range(50)]
    data = encode_file_header(1) + b"".join(encode_frame([r], n) for n, r in enumerate(records))
    found = locate(data, FILE_HEADER.size, len(data))
    batch, _ = build_batch(found.take(slice(0, 1)), address=ADDRESS, seq_base=0, queue_name=queue_name)
    assert batch.column("body").to_pylist() == [decode_fields(records[0].message).body]
    held = sum(buffer.size for buffer in batch.column("body").buffers() if buffer is not None)
    assert held < 1200  # what Spark is sent: this row's body, not the 50 KB page behind it


def test_batch_frames_decode_as_the_record_reader_reads_them(tmp_path, monkeypatch):
    """A COMMIT that pages to one address writes one BATCH frame: each entry routed to
    one queue is taken in one call (never the general path), the same rows."""
    rng = random.Random(11)
    records = [PagedRecord(500 + n, (1,), True, random_record(rng, 500 + n).message) for n in range(40)]
    sizes = [1, 17, 5, 1, 16]
    parts, at = [encode_file_header(1)], 0
    for size in sizes:
        parts.append(encode_frame(records[at:at + size], at))
        at += size
    data = b"".join(parts)
    expected = expected_rows(write(tmp_path, data), set())
    monkeypatch.setattr(page_decode, "read_frames", None)  # the general path would fail
    found = locate(data, FILE_HEADER.size, len(data))
    assert [row[ORDINAL] for row in found.rows] == list(range(40))
    assert decoded_rows(data) == expected


def test_a_damaged_batch_frame_is_read_past_and_a_batch_with_a_short_record_goes_the_general_way(tmp_path):
    rng = random.Random(12)
    records = [PagedRecord(600 + n, (1,), True, random_record(rng, 600 + n).message) for n in range(9)]
    short = PagedRecord(609, (1,), True, b"\x01\x00")  # shorter than a codec head
    bad = bytearray(encode_frame(records[3:6], 3))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    data = b"".join([encode_file_header(1), encode_frame(records[:3], 0), bytes(bad),
                     encode_frame([*records[6:], short], 6)])
    damage: list[FrameDamage] = []
    found = locate(data, FILE_HEADER.size, len(data), damage=damage)
    assert [row[ORDINAL] for row in found.rows] == [0, 1, 2, 6, 7, 8, 9]
    assert len(damage) == 1 and damage[0].lost == 3 and not damage[0].torn
    batch, problems = build_batch(found, address=ADDRESS, seq_base=0, queue_name=queue_name)
    assert batch.column("seq").to_pylist() == [0, 1, 2, 6, 7, 8]
    assert [(p.ordinal, p.message_id) for p in problems] == [(9, 609)]


def test_a_batch_of_rows_none_of_which_decodes_is_empty_with_every_row_a_problem() -> None:
    data = encode_file_header(1) + encode_frame([PagedRecord(5, (1,), True, b"\x01" * 40)], 0)
    located = locate(data, FILE_HEADER.size, len(data))
    batch, problems = build_batch(located, address="a", seq_base=0, queue_name=lambda _queue: "q")
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA
    assert [problem.message_id for problem in problems] == [5]
    empty, none = build_batch(located.take(slice(0, 0)), address="a", seq_base=0,
                              queue_name=lambda _queue: "q")
    assert (empty.num_rows, none) == (0, [])


@pytest.mark.parametrize("seed", range(40))
def test_pages_damaged_anywhere_decode_exactly_as_the_record_reader_reads_them(tmp_path, seed):
    """Bytes flipped at random places (frame headers, entries, bodies, a torn tail): the
    column-wise walk takes exactly the frames the record reader takes, and reads past the
    same damage."""
    rng = random.Random(1000 + seed)
    committed: set[int] = set()
    damaged = bytearray(random_page(rng, rng.randrange(5, 120), committed=committed))
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(FILE_HEADER.size, len(damaged))
        damaged[at] ^= 1 << rng.randrange(8)
    data = bytes(damaged[:len(damaged) - rng.choice([0, 0, 0, 1, 9, 40])])
    path = write(tmp_path, data)
    damage: list[FrameDamage] = []
    assert decoded_rows(data, committed=committed, damage=damage) == expected_rows(path, committed)
    assert damage


def test_a_page_of_frames_written_twice_is_walked_in_linear_time(monkeypatch):
    """Each frame twice (the second copy's ordinal does not follow: damage, read past):
    after a frame that is not usual after all, the walk takes a few frames at a time, so
    the page is not walked again to its end at every copy."""
    message = encode_message(Message(1, ADDRESS, {}, b"x" * 100))
    frames = [encode_frame([PagedRecord(n + 1, (1,), True, message)], n) for n in range(2000)]
    data = encode_file_header(1) + b"".join(frame for frame in frames for _ in range(2))
    walked = []
    walk = page_decode._walk
    monkeypatch.setattr(page_decode, "_walk", lambda *args: walked.append(len(found := walk(*args))) or found)
    damage: list[FrameDamage] = []
    found = locate(data, FILE_HEADER.size, len(data), damage=damage)
    assert found.columns[ORDINAL].tolist() == list(range(2000))
    assert len(damage) == 2000
    assert sum(walked) < 40 * 4000  # (walked to the page's end each time: 4,000,000)

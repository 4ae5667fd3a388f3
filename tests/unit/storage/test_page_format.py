"""Page file bytes: the golden hex printed in docs/formats/page.md, names, frames, scans."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import pytest

from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    FrameDamage,
    FrameError,
    PagedRecord,
    PageScan,
    PageSummaryRecord,
    decode_file_header,
    encode_file_header,
    encode_frame,
    folder_name,
    iter_frames,
    page_file_name,
    page_number,
    read_frames,
    scan_page,
    summary_file_name,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "formats" / "page.md"

GOLDEN_FILE_HEADER = "504d515002001800010000000000000000000000efc14dd8"
GOLDEN_MESSAGE_FRAME = (
    "504d5146" "12ce004e" "1b000000" "00000000"
    "01" "01" "0700000000000000" "0100" "03000000" "0300000000000000" "4d5347"
)
GOLDEN_BATCH_FRAME = (
    "504d5146" "f53944cf" "34000000" "01000000" "02" "02000000"
    "01" "0800000000000000" "0200" "01000000" "0300000000000000" "0400000000000000" "41"
    "00" "0900000000000000" "0000" "00000000"
)
# Format 1 (written by earlier versions, still read): no magic, no ordinal, CRC of the body.
V1_FILE_HEADER = "504d5150010018000100000000000000000000001d7585f1"
V1_MESSAGE_FRAME = (
    "1b000000c110ee53" "01" "01" "0700000000000000" "0100" "03000000" "0300000000000000" "4d5347"
)
GOLDEN_TX_BATCH_FRAME = (
    "504d5146" "cf671c5b" "3c000000" "01000000" "03" "2900000000000000" "02000000"
    "01" "0800000000000000" "0200" "01000000" "0300000000000000" "0400000000000000" "41"
    "00" "0900000000000000" "0000" "00000000"
)
GOLDEN_SUMMARY = (
    "504d5153" "0200" "0000" "0100000000000000" "d204000000000000" "02000000" "01000000"
    "0700000000000000" "0900000000000000" "00000000" "01000000" "02000000" "01000000" "03000000"
    "0300000000000000" "02000000" "01000000"
    "0400000000000000" "01000000" "00000000"
    "00000000" "1800000000000000"
    "53454c"
    "01000000" "2900000000000000" "00000000" "02000000"
    "d80c3a2e"
)
# Summary version 1 (written by earlier versions, still read): no transaction section.
V1_SUMMARY = (
    "504d5153" "0100" "0000" "0100000000000000" "d204000000000000" "02000000" "01000000"
    "0700000000000000" "0900000000000000" "00000000" "01000000" "02000000" "01000000" "03000000"
    "0300000000000000" "02000000" "01000000"
    "0400000000000000" "01000000" "00000000"
    "00000000" "1800000000000000"
    "53454c"
    "064eadf0"
)


def _doc_hex(name: str) -> str:
    """The hex block that follows the `golden: <name>` marker in the format document."""
    text = DOC.read_text()
    match = re.search(rf"golden: {name}\n```\n(.*?)```", text, re.S)
    assert match, f"docs/formats/page.md has no golden block {name!r}"
    return "".join(match.group(1).split())


def test_file_header_matches_golden_hex_and_document() -> None:
    assert encode_file_header(1).hex() == GOLDEN_FILE_HEADER == _doc_hex("file-header")
    assert decode_file_header(bytes.fromhex(GOLDEN_FILE_HEADER)) == 1


def test_single_record_is_a_message_frame_matching_golden_hex() -> None:
    frame = encode_frame([PagedRecord(7, (3,), True, b"MSG")])
    assert frame.hex() == GOLDEN_MESSAGE_FRAME == _doc_hex("message-frame")
    assert struct.unpack_from("<I", frame, 4)[0] == zlib.crc32(frame[8:])


def test_several_records_are_one_batch_frame_matching_golden_hex() -> None:
    frame = encode_frame([PagedRecord(8, (3, 4), True, b"A"), PagedRecord(9, (), False, b"")], 1)
    assert frame.hex() == GOLDEN_BATCH_FRAME == _doc_hex("batch-frame")


def test_transactional_records_are_one_tx_batch_frame_matching_golden_hex() -> None:
    frame = encode_frame([PagedRecord(8, (3, 4), True, b"A", 41), PagedRecord(9, (), False, b"", 41)], 1)
    assert frame.hex() == GOLDEN_TX_BATCH_FRAME == _doc_hex("tx-batch-frame")
    ((_offset, _size, first, entries),) = read_frames(frame, 0, len(frame), ordinal=1)
    assert first == 1 and [e.txid for e in entries] == [41, 41]
    scan = PageScan()
    scan.add(entries, FILE_HEADER.size, len(frame), first)
    assert scan.tx_batches == [(41, 1, 2)]


def test_format_1_pages_are_still_read() -> None:
    page = bytes.fromhex(V1_FILE_HEADER + V1_MESSAGE_FRAME + V1_MESSAGE_FRAME)
    assert decode_file_header(page) == 1
    scan = scan_page(page, 1)
    assert (scan.version, scan.count, scan.damage) == (1, 2, [])
    frames = list(read_frames(page, FILE_HEADER.size, len(page), version=1))
    assert [(first, entries) for _, _, first, entries in frames] == [
        (0, [PagedRecord(7, (3,), True, b"MSG")]), (1, [PagedRecord(7, (3,), True, b"MSG")])]


def test_summary_matches_golden_hex_and_round_trips() -> None:
    summary = PageSummaryRecord(1, 1234, 2, 1, 7, 9, {3: 2, 4: 1}, {3: 1}, [(0, 24)], b"SEL",
                                tx_batches=[(41, 0, 2)])
    assert summary.encode().hex() == GOLDEN_SUMMARY == _doc_hex("summary")
    assert PageSummaryRecord.decode(summary.encode()) == summary


def test_version_1_summaries_are_still_read() -> None:
    summary = PageSummaryRecord.decode(bytes.fromhex(V1_SUMMARY))
    assert (summary.count, summary.selector_summary, summary.tx_batches) == (2, b"SEL", [])


def test_summary_without_selector_blob_round_trips_as_none() -> None:
    summary = PageSummaryRecord(4, 99, 1, 0, 5, 5, {1: 1}, {}, [], None)
    assert PageSummaryRecord.decode(summary.encode()).selector_summary is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "extend"])
def test_damaged_summary_is_rejected(damage: str) -> None:
    data = bytearray(bytes.fromhex(GOLDEN_SUMMARY))
    if damage == "truncate":
        data = data[:-1]
    elif damage == "flip":
        data[20] ^= 0x01
    else:
        data += b"\0"
    with pytest.raises(FrameError):
        PageSummaryRecord.decode(bytes(data))


def test_frames_decode_back_to_their_records() -> None:
    records = [PagedRecord(8, (3, 4), True, b"A" * 100), PagedRecord(9, (5,), False, b"")]
    data = encode_frame(records[:1]) + encode_frame(records, 1)
    frames = list(read_frames(data, 0, len(data)))
    assert [(first, entries) for _, _, first, entries in frames] == [(0, records[:1]), (1, records)]
    assert frames[1][0] == frames[0][1]


def test_iter_frames_stops_quietly_at_an_incomplete_frame_and_raises_on_damage() -> None:
    frame = encode_frame([PagedRecord(1, (1,), True, b"xyz")])
    assert list(iter_frames(frame + frame[:-1], 0, 2 * len(frame) - 1)) == list(
        iter_frames(frame, 0, len(frame))
    )
    damaged = bytearray(frame)
    damaged[-1] ^= 0xFF
    with pytest.raises(FrameError, match="CRC"):
        list(iter_frames(bytes(damaged), 0, len(damaged)))


def test_scan_stops_at_first_bad_byte_for_every_cut_of_the_last_frame() -> None:
    records = [PagedRecord(i, (1,), i % 2 == 0, bytes([i]) * 40) for i in range(3)]
    frames = [encode_frame([r], i) for i, r in enumerate(records)]
    page = encode_file_header(3) + b"".join(frames)
    whole = len(page) - len(frames[-1])
    for cut in range(len(frames[-1])):
        scan = scan_page(page[: whole + cut], 3)
        assert (scan.count, scan.good_size) == (2, whole)
        assert (scan.problem is None) == (cut == 0)
        assert all(d.torn for d in scan.damage) and not scan.damaged


def test_scan_reads_past_a_damaged_frame_keeping_ordinals() -> None:
    records = [PagedRecord(i, (1,), True, bytes([i]) * 40) for i in range(6)]
    frames = [encode_frame([r], i) for i, r in enumerate(records)]
    page = bytearray(encode_file_header(3) + b"".join(frames))
    bad_at = FILE_HEADER.size + 2 * len(frames[0])
    page[bad_at + 30] ^= 0xFF  # inside the body of the third frame
    scan = scan_page(bytes(page), 3)
    assert scan.count == 6 and scan.persistent_count == 5 and scan.damaged
    reason = f"frame CRC mismatch at offset {bad_at}"
    assert scan.damage == [FrameDamage(bad_at, bad_at + len(frames[0]), reason, True, lost=1, first_lost=2)]
    ordinals = [(first, e[0].message_id) for _, _, first, e in read_frames(
        bytes(page), FILE_HEADER.size, len(page), damage=[])]
    assert ordinals == [(0, 0), (1, 1), (3, 3), (4, 4), (5, 5)]


def test_a_damaged_length_is_resynchronised_by_the_frame_magic() -> None:
    records = [PagedRecord(i, (1,), True, bytes([i]) * 40) for i in range(5)]
    frames = [encode_frame([r], i) for i, r in enumerate(records)]
    page = bytearray(encode_file_header(3) + b"".join(frames))
    bad_at = FILE_HEADER.size + len(frames[0])
    page[bad_at + 8:bad_at + 12] = struct.pack("<I", 10_000)  # points past the end: looks torn
    scan = scan_page(bytes(page), 3)
    assert [d.resumed for d in scan.damage] == [True] and scan.damage[0].lost == 1
    assert scan.count == 5 and scan.good_size == len(page)


def test_a_forged_frame_inside_a_damaged_body_is_never_taken() -> None:
    """A client's message may hold bytes that look like a frame; the damaged frame is skipped
    by its own (intact) length, and its body never searched."""
    forged = encode_frame([PagedRecord(666, (1,), True, b"forged")], 1)
    carrier = bytearray(encode_frame([PagedRecord(1, (1,), True, b"<" + forged + b">")], 0))
    carrier[-1] ^= 0x01
    after = encode_frame([PagedRecord(2, (1,), True, b"real")], 1)
    page = encode_file_header(1) + bytes(carrier) + after
    ids = [e.message_id for _, _, _, es in read_frames(page, FILE_HEADER.size, len(page), damage=[])
           for e in es]
    assert ids == [2]


def test_scan_of_a_page_counts_per_queue_and_persistent() -> None:
    page = encode_file_header(1) + encode_frame(
        [PagedRecord(5, (1, 2), True, b"a"), PagedRecord(6, (2,), False, b"b")]
    )
    scan = scan_page(page, 1)
    assert (scan.count, scan.persistent_count, scan.first_id, scan.last_id) == (2, 1, 5, 6)
    assert scan.queue_counts == {1: 1, 2: 2}
    assert scan.queue_persistent == {1: 1, 2: 1}
    assert scan.index == [(0, FILE_HEADER.size)]


def test_scan_rejects_a_header_naming_another_page() -> None:
    scan = scan_page(encode_file_header(2), 1)
    assert scan.good_size == 0 and "page 2" in (scan.problem or "")


def test_folder_names_are_readable_and_distinct_for_similar_addresses() -> None:
    names = {folder_name(a) for a in ("orders/eu", "orders:eu", "Orders/eu", "orders_eu")}
    assert len(names) == 4
    assert folder_name("orders/eu").startswith("orders_eu-")
    assert re.fullmatch(r"[A-Za-z0-9._-]+", folder_name("../../etc ☃"))
    assert len(folder_name("x" * 500)) < 70


def test_page_and_summary_names_sort_in_page_order() -> None:
    assert page_file_name(1) == "000000001.page"
    assert summary_file_name(12) == "000000012.summary"
    assert page_number("000000012.summary") == 12
    assert page_number("address.txt") is None
    assert page_number("1000000000.page") == 1_000_000_000


def test_struct_sizes_are_the_documented_ones() -> None:
    assert FILE_HEADER.size == 24
    assert struct.calcsize("<II") == 8

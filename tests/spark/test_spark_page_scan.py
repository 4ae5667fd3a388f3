"""The batch source's file reading without Spark: page files written byte by byte here (an
append in progress, damage, transactional batches, a file gone), then read as Arrow."""

from __future__ import annotations

import dataclasses
import datetime
import subprocess
import sys
from pathlib import Path

import pytest

from pagemq.core.message import Message
from pagemq.core.selector.summary import PageSummary
from pagemq.spark.bounds import Bounds, page_seq_range
from pagemq.spark.page_scan import FileTask, PageDamageError, read_file
from pagemq.spark.schema import ARROW_SCHEMA
from pagemq.storage.message_codec import encode_message
from pagemq.storage.paging.page_files import list_page_files, read_page_file
from pagemq.storage.paging.page_format import (
    PagedRecord,
    PageSummaryRecord,
    encode_file_header,
    encode_frame,
    page_file_name,
    scan_page,
    summary_file_name,
)

ADDRESS = "orders"
QUEUE = 7


def record(n: int, *, txid: int = 0, priority: int = 4) -> PagedRecord:
    message = Message(1000 + n, ADDRESS, {"n": str(n)}, f"body-{n}".encode(), persistent=True,
                      priority=priority, timestamp=1_700_000_000_000 + n)
    return PagedRecord(message.message_id, (QUEUE,), True, encode_message(message), txid)


def page_bytes(page_no: int, frames: list[list[PagedRecord]]) -> bytes:
    data, ordinal = [encode_file_header(page_no)], 0
    for records in frames:
        data.append(encode_frame(records, ordinal))
        ordinal += len(records)
    return b"".join(data)


def write_page(folder: Path, page_no: int, data: bytes, *, summary: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / page_file_name(page_no)
    path.write_bytes(data)
    if summary:
        scan = scan_page(data, page_no)
        folder.joinpath(summary_file_name(page_no)).write_bytes(
            PageSummaryRecord.from_scan(page_no, scan, None).encode())
    return path


def task(path: Path, page_no: int = 1, *, complete: bool = False, committed: frozenset[int] = frozenset(),
         fail: bool = True, selector: str | None = None, moved_to: str | None = None) -> FileTask:
    return FileTask(str(path), page_no, path.stat().st_size if path.exists() else 0, complete, committed,
                    ADDRESS, {QUEUE: "orders-q"}, selector, fail, moved_to)


def rows(file_task: FileTask) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for batch in read_file(file_task):
        assert batch.schema == ARROW_SCHEMA
        out += batch.to_pylist()
    return out


def test_rows_carry_the_record_and_its_message(tmp_path):
    frames = [[record(0)], [record(1, priority=9), record(2)]]
    path = write_page(tmp_path, 3, page_bytes(3, frames), summary=True)
    got = rows(task(path, 3, complete=True))
    assert [row["seq"] for row in got] == [(3 << 32) + ordinal for ordinal in range(3)]
    first = got[1]
    assert first["message_id"] == "1001" and first["address"] == ADDRESS and first["queue"] == "orders-q"
    assert first["priority"] == 9 and first["persistent"] is True and first["body"] == b"body-1"
    assert first["headers"] == [("n", "1")]
    assert first["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, 1000, tzinfo=datetime.UTC)
    without = rows(dataclasses.replace(task(path, 3, complete=True), include_headers=False))
    assert [row["headers"] for row in without] == [None] * 3
    assert [{**row, "headers": None} for row in got] == without


def test_an_append_in_progress_ends_the_live_page_quietly_but_is_damage_in_a_closed_one(tmp_path):
    whole = page_bytes(1, [[record(0)], [record(1)]])
    torn = whole + encode_frame([record(2)], 2)[:-5]  # the last frame half written
    path = write_page(tmp_path, 1, torn, summary=False)
    assert [row["body"] for row in rows(task(path))] == [b"body-0", b"body-1"]

    damage: list = []
    assert [ordinal for ordinal, _ in read_page_file(path, 1, damage)] == [0, 1]
    assert len(damage) == 1 and damage[0].torn

    with pytest.raises(PageDamageError, match=rf"{path}: damaged bytes at offset {len(whole)}"):
        rows(task(path, complete=True))  # a summary said those bytes were complete


def test_damage_fails_the_read_or_is_read_past(tmp_path):
    data = bytearray(page_bytes(1, [[record(0)], [record(1)], [record(2)]]))
    second = 24 + len(encode_frame([record(0)], 0))
    data[second + 20] ^= 0xFF
    path = write_page(tmp_path, 1, bytes(data), summary=False)
    with pytest.raises(PageDamageError, match=rf"damaged bytes at offset {second} .*1 record\(s\) lost"):
        rows(task(path))
    assert [row["body"] for row in rows(task(path, fail=False))] == [b"body-0", b"body-2"]


def test_a_damaged_file_header_is_reported_and_the_frames_still_read(tmp_path):
    data = bytearray(page_bytes(1, [[record(0)], [record(1)]]))
    data[10] ^= 0xFF
    path = write_page(tmp_path, 1, bytes(data), summary=False)
    with pytest.raises(PageDamageError, match=r"offset 0 .*file header"):
        rows(task(path))
    assert len(rows(task(path, fail=False))) == 2


def test_a_transactional_batch_counts_only_when_committed(tmp_path):
    frames = [[record(0)], [record(1, txid=77), record(2, txid=77)], [record(3)]]
    path = write_page(tmp_path, 1, page_bytes(1, frames), summary=True)
    assert [row["body"] for row in rows(task(path, complete=True))] == [b"body-0", b"body-3"]
    committed = rows(task(path, complete=True, committed=frozenset({77})))
    assert [row["body"] for row in committed] == [b"body-0", b"body-1", b"body-2", b"body-3"]


def test_the_selector_filters_rows(tmp_path):
    path = write_page(tmp_path, 1, page_bytes(1, [[record(n)] for n in range(5)]), summary=True)
    assert [row["body"] for row in rows(task(path, selector="n IN ('1', '3')"))] == [b"body-1", b"body-3"]


def test_a_file_gone_since_planning_is_read_from_the_archive_or_reported(tmp_path):
    data = page_bytes(1, [[record(0)]])
    planned = write_page(tmp_path / "paging", 1, data, summary=True)
    file_task = task(planned, complete=True, moved_to=str(tmp_path / "archive" / planned.name))
    planned.unlink()
    with pytest.raises(PageDamageError, match="deleted since the scan was planned"):
        rows(file_task)
    write_page(tmp_path / "archive", 1, data, summary=True)
    assert [row["body"] for row in rows(file_task)] == [b"body-0"]


def test_listing_trusts_a_summary_only_while_it_describes_the_file(tmp_path):
    path = write_page(tmp_path, 1, page_bytes(1, [[record(0)]]), summary=True)
    write_page(tmp_path, 2, page_bytes(2, [[record(1)]]), summary=False)
    assert [(page.page_no, page.summary is not None) for page in list_page_files(tmp_path)] == [(1, True),
                                                                                                (2, False)]
    with open(path, "ab") as grown:
        grown.write(encode_frame([record(2)], 1))
    assert list_page_files(tmp_path)[0].summary is None


def summary_of(*records: tuple[int, int]) -> PageSummary:
    """A page summary of messages given as (timestamp ms, priority)."""
    summary = PageSummary()
    for n, (timestamp, priority) in enumerate(records):
        summary.fold(Message(n, ADDRESS, {}, b"", priority=priority, timestamp=timestamp))
    return summary


def test_bounds_skip_a_page_only_when_no_row_can_pass():
    page = summary_of((1_000, 4), (2_000, 4), (3_000, 6))
    low, high = page_seq_range(5)
    assert Bounds().admits(5, None) and Bounds().admits(5, page)
    assert Bounds().with_range("seq", low=high + 1).admits(5, page) is False
    assert Bounds().with_range("seq", low=low, high=low).admits(5, page)
    assert Bounds().with_range("seq", values=frozenset({high + 1, low - 1})).admits(5, page) is False
    # timestamps in microseconds
    assert Bounds().with_range("timestamp", low=3_000_001).admits(5, page) is False
    assert Bounds().with_range("timestamp", low=3_000_000).admits(5, page)
    assert Bounds().with_range("timestamp", high=999_999).admits(5, page) is False
    assert Bounds().with_range("priority", values=frozenset({5})).admits(5, page) is False
    assert Bounds().with_range("priority", values=frozenset({5, 6})).admits(5, page)
    assert Bounds().with_range("priority", low=7).admits(5, page) is False
    # no summary (the live page): only seq can skip it
    assert Bounds().with_range("priority", low=7).admits(5, None)
    # ranges narrow each other
    narrow = Bounds().with_range("timestamp", low=1_500_000).with_range("timestamp", high=1_900_000)
    assert narrow.admits(5, page)  # the page's range covers it, even if no row is inside


def test_pushed_spark_filters_become_ranges():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual, Not

    from pagemq.spark.source import narrowed

    bounds = Bounds()
    for item in (GreaterThan(("seq",), 10), LessThanOrEqual(("seq",), 20), In(("priority",), (1, 2)),
                 EqualTo(("timestamp",), datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)),
                 Not(EqualTo(("seq",), 15)), EqualTo(("address",), "x")):
        bounds = narrowed(bounds, item)
    assert set(bounds.columns) == {"seq", "priority", "timestamp"}
    assert (bounds.columns["seq"].low, bounds.columns["seq"].high) == (11, 20)
    assert bounds.columns["priority"].values == {1, 2}
    assert (bounds.columns["timestamp"].low, bounds.columns["timestamp"].high) == (1_000_000, 1_000_000)


def test_importing_pagemq_and_its_spark_package_does_not_import_pyspark():
    probe = "import sys, pagemq, pagemq.cli, pagemq.spark; print('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"

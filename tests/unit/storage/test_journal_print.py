"""`describe_journal`: what `pagemq data print` shows, also for damaged journals."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pagemq.storage import records as rec
from pagemq.storage.journal import Journal, OpKind
from pagemq.storage.journal_print import describe_journal


def _build(directory: Path) -> None:
    async def body() -> None:
        journal = Journal(directory)
        journal.load()
        journal.start(asyncio.get_running_loop())
        journal.add(1, 3, b"hello")
        journal.add(2, 3, b"world")
        journal.update(1, 4, b"u")
        journal.delete(2)
        journal.transaction([(OpKind.ADD, 5, 6, b"tx"), (OpKind.DELETE, 1, 0, b"")])
        await journal.close()

    asyncio.run(body())


def test_summary_counts_records_by_kind_and_type_and_live_ops(tmp_path: Path) -> None:
    _build(tmp_path)
    lines = list(describe_journal(tmp_path))
    assert lines[0].startswith(f"{rec.file_name(1)}: file 1, ")
    assert "seq 1..6" in lines[0]
    assert "records: ADD 2, DELETE 1, TRANSACTION 1, UPDATE 1" in lines[0]
    assert "add/update ops by type: 3: 2, 4: 1, 6: 1" in lines[0]
    assert lines[0].endswith("live ops 1")
    assert lines[-1].startswith("total: 1 data files, ")
    assert "1 live records, max id 5" in lines[-1]


def test_verbose_lists_every_record_with_offset_kind_id_type_and_length(tmp_path: Path) -> None:
    _build(tmp_path)
    lines = list(describe_journal(tmp_path, verbose=True))
    assert lines[1] == "  @32 ADD seq=1 id=1 type=3 payload=5 bytes"
    assert any(line.startswith("  @") and "TRANSACTION seq=5 ops=2" in line for line in lines)
    assert "    DELETE seq=6 id=1 type=0 payload=0 bytes" in lines


def test_damage_is_reported_and_nothing_is_changed(tmp_path: Path) -> None:
    _build(tmp_path)
    path = tmp_path / rec.file_name(1)
    data = path.read_bytes()[:-3]
    path.write_bytes(data)
    lines = list(describe_journal(tmp_path))
    assert any(line.startswith("  torn tail at offset ") and "bytes unreadable" in line for line in lines)
    assert lines[-1].endswith("1 damaged")
    assert path.read_bytes() == data


def test_unreadable_header_and_missing_directory_are_described(tmp_path: Path) -> None:
    assert list(describe_journal(tmp_path / "nope")) == [f"no journal directory at {tmp_path / 'nope'}"]
    (tmp_path / rec.file_name(1)).write_bytes(b"garbage that is long enough to be a header.....")
    lines = list(describe_journal(tmp_path))
    assert "unreadable header" in lines[0]

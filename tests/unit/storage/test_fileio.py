"""The file-I/O seam: the real implementation, and each fault `FaultyFileIO` can inject."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from pagemq.storage.fileio import REAL_FILE_IO, FaultyFileIO, SimulatedCrash


def test_open_append_counts_existing_bytes_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"abc")
    handle = REAL_FILE_IO.open_append(path)
    assert handle.size == 3
    handle.write(b"def")
    handle.write(memoryview(b"gh"))
    handle.fsync()
    handle.close()
    assert handle.size == 8
    assert REAL_FILE_IO.read_bytes(path) == b"abcdefgh"
    assert REAL_FILE_IO.read_range(path, 2, 3) == b"cde"
    assert REAL_FILE_IO.size(path) == 8


def test_open_append_creates_missing_file(tmp_path: Path) -> None:
    handle = REAL_FILE_IO.open_append(tmp_path / "new.bin")
    handle.close()
    assert REAL_FILE_IO.size(tmp_path / "new.bin") == 0


def test_list_is_sorted_by_name_and_filtered_by_suffix(tmp_path: Path) -> None:
    for name in ("b.jnl", "a.jnl", "c.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in REAL_FILE_IO.list(tmp_path, ".jnl")] == ["a.jnl", "b.jnl"]
    assert REAL_FILE_IO.list(tmp_path / "missing", ".jnl") == []


def test_truncate_rename_remove(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"0123456789")
    REAL_FILE_IO.truncate(path, 4)
    REAL_FILE_IO.rename(path, tmp_path / "y")
    assert REAL_FILE_IO.read_bytes(tmp_path / "y") == b"0123"
    REAL_FILE_IO.remove(tmp_path / "y")
    assert not (tmp_path / "y").exists()


def test_write_atomic_replaces_whole_content_and_leaves_no_temp(tmp_path: Path) -> None:
    REAL_FILE_IO.makedirs(tmp_path / "d")
    target = tmp_path / "d" / "state"
    REAL_FILE_IO.write_atomic(target, b"first, longer content")
    REAL_FILE_IO.write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["state"]


def test_crash_drops_bytes_not_fsynced(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "f")
    handle.write(b"durable")
    handle.fsync()
    handle.write(b" volatile")
    fio.crash()
    assert (tmp_path / "f").read_bytes() == b"durable"


def test_crash_keeps_pre_existing_bytes(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"old")
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "f")
    handle.write(b"new")
    fio.crash()
    assert (tmp_path / "f").read_bytes() == b"old"


def test_fail_write_raises_enospc_and_writes_nothing(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "f")
    fio.fail_write(2)
    handle.write(b"one")
    with pytest.raises(OSError) as info:
        handle.write(b"two")
    assert info.value.errno == errno.ENOSPC
    handle.write(b"three")
    assert (tmp_path / "f").read_bytes() == b"onethree"


def test_tear_write_leaves_first_k_bytes_after_crash(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "f")
    handle.write(b"head")
    handle.fsync()
    fio.tear_write(1, 3)
    with pytest.raises(SimulatedCrash):
        handle.write(b"abcdef")
    with pytest.raises(SimulatedCrash):
        handle.write(b"after death")
    fio.crash()
    assert (tmp_path / "f").read_bytes() == b"headabc"


def test_crash_after_n_steps_stops_the_nth_step(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "f")
    fio.crash_after(2)
    handle.write(b"a")
    with pytest.raises(SimulatedCrash):
        handle.fsync()
    fio.crash()
    assert (tmp_path / "f").read_bytes() == b""


def test_hold_fsync_blocks_until_released(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "f")
    handle.write(b"x")
    fio.hold_fsync()
    done = threading.Event()

    def sync() -> None:
        handle.fsync()
        done.set()

    thread = threading.Thread(target=sync)
    thread.start()
    assert fio.fsync_waiting.wait(5)
    assert not done.wait(0.05)
    fio.release_fsync()
    assert done.wait(5)
    thread.join()
    assert fio.fsyncs == 1


def test_rename_carries_durable_length(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "a")
    handle.write(b"kept")
    handle.fsync()
    handle.write(b"lost")
    handle.close()
    fio.rename(tmp_path / "a", tmp_path / "b")
    fio.crash()
    assert (tmp_path / "b").read_bytes() == b"kept"

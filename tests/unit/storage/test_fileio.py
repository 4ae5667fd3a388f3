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
    fio.fsync_directory(tmp_path)
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
    fio.fsync_directory(tmp_path)
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
    fio.fsync_directory(tmp_path)
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
    fio.fsync_directory(tmp_path)
    fio.rename(tmp_path / "a", tmp_path / "b")
    fio.fsync_directory(tmp_path)
    fio.crash()
    assert (tmp_path / "b").read_bytes() == b"kept"


# ----- power loss: directory entries are durable only once their directory is fsynced -----


def test_crash_removes_a_created_file_whose_directory_was_not_fsynced(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "new")
    handle.write(b"data")
    handle.fsync()  # the data is durable, the name is not
    fio.crash()
    assert not (tmp_path / "new").exists()


def test_crash_undoes_a_rename_not_made_durable_and_brings_back_what_it_replaced(tmp_path: Path) -> None:
    (tmp_path / "old").write_bytes(b"old content")
    fio = FaultyFileIO()
    fio.write_atomic(tmp_path / "state", b"v1")
    handle = fio.open_append(tmp_path / "state.tmp")
    handle.write(b"v2")
    handle.fsync()
    handle.close()
    fio.rename(tmp_path / "state.tmp", tmp_path / "state")
    fio.rename(tmp_path / "old", tmp_path / "moved")
    assert sorted(fio.pending_entries())
    fio.crash()
    assert (tmp_path / "state").read_bytes() == b"v1"
    assert not (tmp_path / "state.tmp").exists()  # its creation was never durable either
    assert (tmp_path / "old").read_bytes() == b"old content"
    assert not (tmp_path / "moved").exists()


def test_crash_brings_back_a_removed_file_with_its_durable_bytes_only(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    handle = fio.open_append(tmp_path / "f")
    fio.fsync_directory(tmp_path)
    handle.write(b"synced")
    handle.fsync()
    handle.write(b"+not")
    handle.close()
    fio.remove(tmp_path / "f")
    fio.crash()
    assert (tmp_path / "f").read_bytes() == b"synced"


def test_removes_survive_variant_keeps_the_removal_and_undoes_the_rest(tmp_path: Path) -> None:
    (tmp_path / "source").write_bytes(b"s")
    fio = FaultyFileIO()
    fio.write_atomic(tmp_path / "kept", b"k")  # made durable by write_atomic itself
    handle = fio.open_append(tmp_path / "copy.tmp")
    handle.write(b"s")
    handle.fsync()
    handle.close()
    fio.rename(tmp_path / "copy.tmp", tmp_path / "copy")
    fio.remove(tmp_path / "source")  # wrong order: the copy's name is not durable yet
    fio.crash(removes_survive=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


def test_makedirs_fsyncs_each_new_level_so_a_crash_keeps_it(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    fio.makedirs(tmp_path / "a" / "b" / "c")
    handle = fio.open_append(tmp_path / "a" / "b" / "c" / "f")
    handle.write(b"x")
    handle.fsync()
    handle.close()
    fio.fsync_directory(tmp_path / "a" / "b" / "c")
    fio.crash()
    assert (tmp_path / "a" / "b" / "c" / "f").read_bytes() == b"x"


def test_a_directory_made_without_fsyncing_its_parent_vanishes_with_its_files(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    fio.mkdir(tmp_path / "d")
    handle = fio.open_append(tmp_path / "d" / "f")
    handle.write(b"x")
    handle.fsync()
    handle.close()
    fio.fsync_directory(tmp_path / "d")
    fio.crash()
    assert not (tmp_path / "d").exists()


def test_a_renamed_directory_takes_its_files_durable_lengths_and_a_crash_moves_it_back(
    tmp_path: Path,
) -> None:
    fio = FaultyFileIO()
    fio.makedirs(tmp_path / "d.tmp")
    handle = fio.open_append(tmp_path / "d.tmp" / "f")
    handle.write(b"kept")
    handle.fsync()
    handle.close()
    fio.fsync_directory(tmp_path / "d.tmp")
    fio.rename(tmp_path / "d.tmp", tmp_path / "d")
    handle = fio.open_append(tmp_path / "d" / "f")
    handle.write(b"+lost")  # never fsynced: the crash cuts it, under the new name too
    handle.close()
    fio.crash()  # the rename was not made durable: the directory is back under its old name
    assert not (tmp_path / "d").exists()
    assert (tmp_path / "d.tmp" / "f").read_bytes() == b"kept"


def test_a_crash_brings_back_a_directory_removed_without_fsyncing_its_parent(tmp_path: Path) -> None:
    fio = FaultyFileIO()
    fio.makedirs(tmp_path / "d")
    fio.rmdir(tmp_path / "d")
    fio.crash()
    assert (tmp_path / "d").is_dir()
    fio.rmdir(tmp_path / "d")
    fio.fsync_directory(tmp_path)
    fio.crash()
    assert not (tmp_path / "d").exists()


def test_injected_remove_and_rename_failures_change_nothing(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    fio = FaultyFileIO()
    fio.fail_remove(1)
    with pytest.raises(OSError) as info:
        fio.remove(tmp_path / "f")
    assert info.value.errno == errno.EIO
    fio.fail_rename(1)
    with pytest.raises(OSError):
        fio.rename(tmp_path / "f", tmp_path / "g")
    assert (tmp_path / "f").exists() and not (tmp_path / "g").exists()
    fio.remove(tmp_path / "f")
    assert not (tmp_path / "f").exists()

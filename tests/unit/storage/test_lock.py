"""server.lock: one broker per data directory; read-only tools share it and create nothing.

flock locks belong to an open file description, so two `DataDirectoryLock`s in one process
conflict exactly as two processes would.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pagemq.storage.lock import LOCK_FILE, DataDirectoryLock, DataDirectoryLocked


def test_a_second_exclusive_lock_is_refused_naming_the_holders_pid(tmp_path: Path) -> None:
    first = DataDirectoryLock(tmp_path / "data")
    first.acquire()  # creates the directory and the file
    assert (tmp_path / "data" / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirectoryLocked) as refused:
        DataDirectoryLock(tmp_path / "data").acquire()
    assert refused.value.pid == os.getpid()
    assert str(refused.value) == (f"data directory {tmp_path / 'data'} is in use by another broker "
                                  f"(pid {os.getpid()}; lock {tmp_path / 'data' / LOCK_FILE})")
    first.release()
    again = DataDirectoryLock(tmp_path / "data")
    again.acquire()  # released: free again (the file stays)
    again.release()


def test_shared_locks_create_nothing_coexist_and_keep_a_broker_out(tmp_path: Path) -> None:
    reader = DataDirectoryLock(tmp_path)
    assert reader.acquire_shared() is False  # no lock file: nothing to share, nothing created
    assert not (tmp_path / LOCK_FILE).exists()
    broker = DataDirectoryLock(tmp_path)
    broker.acquire()
    with pytest.raises(DataDirectoryLocked) as running:
        DataDirectoryLock(tmp_path).acquire_shared()
    assert running.value.pid == os.getpid()
    broker.release()
    first, second = DataDirectoryLock(tmp_path), DataDirectoryLock(tmp_path)
    assert first.acquire_shared() and second.acquire_shared()
    with pytest.raises(DataDirectoryLocked, match="in use by a `pagemq data` command"):
        DataDirectoryLock(tmp_path).acquire()
    first.release()
    second.release()

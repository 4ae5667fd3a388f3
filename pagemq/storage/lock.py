"""One broker per data directory: an flock on `<data-directory>/server.lock` (as Artemis'
`server.lock`).

`pagemq serve` takes the lock exclusively before it reads or writes any other file and
holds it until it exits (the kernel drops it if the process dies, kill -9 included), so a
second broker on the same directory refuses to start instead of cleaning away the first
one's files. The file holds the holder's pid (decimal, newline) so the refusal can name it;
it is never removed (removing it would let two processes lock two different files).

The journal and paging directories get a lock of their own too (`BrokerLocks`), as Artemis
keeps `server.lock` with its journal: two brokers with different data directories cannot
share one either, wherever it lies (another broker's data directory included).

`pagemq data check` / `print` take it shared, without creating the file (they change
nothing): a broker cannot start while they read, and they can tell when one is running.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

__all__ = ["LOCK_FILE", "BrokerLocks", "DataDirectoryLock", "DataDirectoryLocked"]

LOCK_FILE = "server.lock"


class DataDirectoryLocked(OSError):
    """Another process holds the data directory's lock."""

    def __init__(self, directory: Path, pid: int | None, *, shared: bool = False,
                 kind: str = "data directory") -> None:
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        what = "a `pagemq data` command" if shared else "another broker"
        super().__init__(
            errno.EWOULDBLOCK,
            f"{kind} {directory} is in use by {what} ({holder}; lock {directory / LOCK_FILE})",
        )
        self.directory = directory
        self.pid = pid

    def __str__(self) -> str:
        return str(self.strerror)


class DataDirectoryLock:
    """The lock on one data directory; `acquire()` once, `release()` at exit."""

    def __init__(self, directory: Path, kind: str = "data directory") -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.kind = kind  # what the refusal calls the directory
        self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> None:
        """Exclusive, for a broker: create the directory and the file if needed, lock it
        without waiting, write our pid. DataDirectoryLocked names the holder otherwise."""
        from pagemq.storage.fileio import REAL_FILE_IO

        REAL_FILE_IO.makedirs(self.directory)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            readers = _shared_holders(fd)  # only `pagemq data` commands (their pid is not written)
            pid = None if readers else _read_pid(fd)
            os.close(fd)
            raise DataDirectoryLocked(self.directory, pid, shared=readers, kind=self.kind) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def acquire_shared(self) -> bool:
        """Shared, for read-only tools: False when there is no lock file (nothing is created);
        DataDirectoryLocked when a broker holds it."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirectoryLocked(self.directory, pid) from None
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


class BrokerLocks:
    """A broker's locks: its data directory's, then its journal and paging directories'
    (inside the data directory too: another broker may name one of them as its own)."""

    def __init__(self, data_directory: Path, **others: Path) -> None:
        self.locks = [DataDirectoryLock(data_directory)]
        seen = {Path(data_directory).resolve()}
        for name, directory in others.items():
            resolved = Path(directory).resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            self.locks.append(DataDirectoryLock(directory, kind=f"{name} directory"))

    def acquire(self) -> None:
        """All of them, or none (DataDirectoryLocked names the directory in use)."""
        for taken, lock in enumerate(self.locks):
            try:
                lock.acquire()
            except BaseException:
                for held in self.locks[:taken]:
                    held.release()
                raise

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _shared_holders(fd: int) -> bool:
    """True when the lock we could not take exclusively is held shared (no broker)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True

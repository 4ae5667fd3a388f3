"""The one file-I/O seam of the storage layer (Artemis' `SequentialFileFactory` idea).

The journal and the page store never call `os` directly: they take a `FileIO`. Production
code passes `REAL_FILE_IO`; tests pass a `FaultyFileIO`, which works on real files in a
temporary directory but can hold an fsync, fail a chosen write with ENOSPC, tear a write
part-way, and `crash()` — throw away every byte that was written but never fsynced — so
recovery code can be exercised against the failures a power cut produces, by name.

Durability model of `FaultyFileIO`: file *data* is volatile until `fsync()`; metadata
operations (create, rename, remove, truncate) are treated as durable at once, which is what
a journaling file system in ordered mode gives once the directory is fsynced. A file created
and never fsynced survives a crash with length 0.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = [
    "REAL_FILE_IO",
    "AppendFile",
    "FaultyFileIO",
    "FileIO",
    "RealFileIO",
    "SimulatedCrash",
]


class AppendFile(Protocol):
    """A file opened for appending; `size` counts pre-existing bytes too."""

    path: Path
    size: int

    def write(self, data: bytes | memoryview) -> None: ...

    def fsync(self) -> None: ...

    def close(self) -> None: ...


class FileIO(Protocol):
    """Every file operation the storage layer needs, so tests can substitute faults."""

    def open_append(self, path: Path) -> AppendFile: ...

    def read_bytes(self, path: Path) -> bytes: ...

    def read_range(self, path: Path, offset: int, length: int) -> bytes: ...

    def size(self, path: Path) -> int: ...

    def truncate(self, path: Path, size: int) -> None: ...

    def remove(self, path: Path) -> None: ...

    def rename(self, src: Path, dst: Path) -> None: ...

    def list(self, directory: Path, suffix: str) -> list[Path]: ...

    def makedirs(self, directory: Path) -> None: ...

    def fsync_directory(self, directory: Path) -> None: ...

    def write_atomic(self, path: Path, data: bytes) -> None: ...


def _fdatasync(fd: int) -> None:
    """fdatasync skips the inode timestamp flush that fsync would add (Linux); fall back elsewhere."""
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)


def _write_atomic(fileio: FileIO, path: Path, data: bytes) -> None:
    """Readers see the old content or the new, never a mix, even across a crash."""
    tmp = path.with_name(path.name + ".tmp")
    handle = fileio.open_append(tmp)
    try:
        if handle.size:
            handle.close()
            fileio.truncate(tmp, 0)
            handle = fileio.open_append(tmp)
        handle.write(data)
        handle.fsync()
    finally:
        handle.close()
    fileio.rename(tmp, path)
    fileio.fsync_directory(path.parent)


class _RealAppendFile:
    """An O_APPEND descriptor; `size` is tracked here so callers need no fstat per write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size

    def _fileno(self) -> int:
        if self._fd < 0:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        return self._fd

    def write(self, data: bytes | memoryview) -> None:
        fd = self._fileno()
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            self.size += written
            view = view[written:]

    def fsync(self) -> None:
        _fdatasync(self._fileno())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RealFileIO:
    """Plain os-level calls; the implementation the broker runs with."""

    def open_append(self, path: Path) -> AppendFile:
        return _RealAppendFile(path)

    def read_bytes(self, path: Path) -> bytes:
        return path.read_bytes()

    def read_range(self, path: Path, offset: int, length: int) -> bytes:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    def size(self, path: Path) -> int:
        return path.stat().st_size

    def truncate(self, path: Path, size: int) -> None:
        """Truncation is made durable here: recovery relies on the cut surviving a crash."""
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, path: Path) -> None:
        path.unlink()

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def list(self, directory: Path, suffix: str) -> list[Path]:
        if not directory.is_dir():
            return []
        return sorted(p for p in directory.iterdir() if p.name.endswith(suffix) and p.is_file())

    def makedirs(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)

    def fsync_directory(self, directory: Path) -> None:
        """A new, renamed or removed name is only durable once its directory is fsynced."""
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, path: Path, data: bytes) -> None:
        _write_atomic(self, path, data)


REAL_FILE_IO: FileIO = RealFileIO()


class SimulatedCrash(OSError):
    """Raised by `FaultyFileIO` where a real process would have died; call `crash()` next."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EIO, f"simulated crash: {what}")


class _FaultyAppendFile:
    """Delegates to a real append file and reports each step to its `FaultyFileIO`."""

    def __init__(self, owner: FaultyFileIO, inner: AppendFile) -> None:
        self._owner = owner
        self._inner = inner
        self.path = inner.path
        self.size = inner.size
        self.lost = False  # set by crash(): the process that owned this handle is gone

    def write(self, data: bytes | memoryview) -> None:
        try:
            self._owner._before_write(self._inner, data, self.lost)
        finally:
            self.size = self._inner.size

    def fsync(self) -> None:
        self._owner._fsync(self._inner, self)

    def close(self) -> None:
        self._owner._closed(self)
        self._inner.close()


class FaultyFileIO(FileIO):
    """Real files plus scripted faults; each recovery test names the fault it injects.

    Faults (all counted from the moment they are armed, 1-based):
    - `hold_fsync()` / `release_fsync()`: fsync blocks until released (group-commit tests).
    - `fail_write(n, code=ENOSPC)`: the n-th write raises OSError(code), writing nothing.
    - `tear_write(n, k)`: the n-th write puts only its first k bytes on disk — durably, as
      if the kernel had flushed them — and raises `SimulatedCrash`.
    - `crash_after(n)`: the n-th mutating step (write, fsync, truncate, remove, rename,
      directory fsync) raises `SimulatedCrash` instead of running.
    - `crash()`: every file reverts to its last fsynced length; open handles are closed.
    """

    def __init__(self, inner: FileIO = REAL_FILE_IO) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._durable: dict[Path, int] = {}
        self._open: list[_FaultyAppendFile] = []
        self._fsync_gate = threading.Event()
        self._fsync_gate.set()
        self.fsync_waiting = threading.Event()
        self._write_faults: dict[int, Callable[[AppendFile, memoryview], None]] = {}
        self._crash_step: int | None = None
        self.writes = 0
        self.fsyncs = 0
        self.steps = 0
        self.crashed = False

    # ----- fault controls -------------------------------------------------------------
    def hold_fsync(self) -> None:
        self._fsync_gate.clear()

    def release_fsync(self) -> None:
        self._fsync_gate.set()

    def fail_write(self, n: int = 1, code: int = errno.ENOSPC) -> None:
        def fail(_handle: AppendFile, _data: memoryview) -> None:
            raise OSError(code, os.strerror(code))

        self._write_faults[self.writes + n] = fail

    def tear_write(self, n: int, k: int) -> None:
        def tear(handle: AppendFile, data: memoryview) -> None:
            handle.write(data[:k])
            with self._lock:
                self._durable[handle.path] = handle.size
            raise SimulatedCrash(f"write torn after {k} of {len(data)} bytes to {handle.path.name}")

        self._write_faults[self.writes + n] = tear

    def crash_after(self, n: int) -> None:
        self._crash_step = self.steps + n

    def crash(self) -> None:
        """Model power loss: only fsynced bytes survive; the process's handles are gone."""
        with self._lock:
            for handle in list(self._open):
                handle.lost = True
                handle._inner.close()
            self._open.clear()
            for path, durable in self._durable.items():
                if path.exists() and self._inner.size(path) > durable:
                    self._inner.truncate(path, durable)
            self._durable.clear()
            self._write_faults.clear()
            self._crash_step = None
            self.crashed = False
        self._fsync_gate.set()

    # ----- bookkeeping ----------------------------------------------------------------
    def _step(self, what: str) -> None:
        """Count a mutating step and die on the scripted one; once dead, stay dead."""
        with self._lock:
            if self.crashed:
                raise SimulatedCrash(f"{what} after the crash")
            self.steps += 1
            if self._crash_step is not None and self.steps >= self._crash_step:
                self.crashed = True
                raise SimulatedCrash(what)

    def _track(self, path: Path, size: int) -> None:
        with self._lock:
            self._durable.setdefault(path, size)

    def _before_write(self, handle: AppendFile, data: bytes | memoryview, lost: bool) -> None:
        if lost:
            raise SimulatedCrash(f"write to {handle.path.name} through a handle lost in the crash")
        self._step(f"write to {handle.path.name}")
        with self._lock:
            self.writes += 1
            fault = self._write_faults.pop(self.writes, None)
        if fault is not None:
            try:
                fault(handle, memoryview(data))
            except SimulatedCrash:
                self.crashed = True
                raise
            return
        handle.write(data)

    def _fsync(self, handle: AppendFile, outer: _FaultyAppendFile) -> None:
        self.fsync_waiting.set()
        self._fsync_gate.wait()
        self.fsync_waiting.clear()
        if outer.lost:
            raise SimulatedCrash(f"fsync of {handle.path.name} through a handle lost in the crash")
        self._step(f"fsync of {handle.path.name}")
        handle.fsync()
        with self._lock:
            self.fsyncs += 1
            self._durable[handle.path] = handle.size

    def _closed(self, handle: _FaultyAppendFile) -> None:
        with self._lock:
            if handle in self._open:
                self._open.remove(handle)

    # ----- FileIO ---------------------------------------------------------------------
    def open_append(self, path: Path) -> AppendFile:
        if self.crashed:
            raise SimulatedCrash(f"open of {path.name} after the crash")
        inner = self._inner.open_append(path)
        self._track(path, inner.size)
        handle = _FaultyAppendFile(self, inner)
        with self._lock:
            self._open.append(handle)
        return handle

    def read_bytes(self, path: Path) -> bytes:
        return self._inner.read_bytes(path)

    def read_range(self, path: Path, offset: int, length: int) -> bytes:
        return self._inner.read_range(path, offset, length)

    def size(self, path: Path) -> int:
        return self._inner.size(path)

    def truncate(self, path: Path, size: int) -> None:
        self._step(f"truncate of {path.name}")
        self._inner.truncate(path, size)
        with self._lock:
            self._durable[path] = size

    def remove(self, path: Path) -> None:
        self._step(f"remove of {path.name}")
        self._inner.remove(path)
        with self._lock:
            self._durable.pop(path, None)

    def rename(self, src: Path, dst: Path) -> None:
        self._step(f"rename of {src.name} to {dst.name}")
        self._inner.rename(src, dst)
        with self._lock:
            durable = self._durable.pop(src, None)
            if durable is not None:
                self._durable[dst] = durable

    def list(self, directory: Path, suffix: str) -> list[Path]:
        return self._inner.list(directory, suffix)

    def makedirs(self, directory: Path) -> None:
        self._inner.makedirs(directory)

    def fsync_directory(self, directory: Path) -> None:
        self._step(f"fsync of directory {directory.name}")
        self._inner.fsync_directory(directory)

    def write_atomic(self, path: Path, data: bytes) -> None:
        _write_atomic(self, path, data)

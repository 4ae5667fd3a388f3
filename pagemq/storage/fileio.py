"""The one file-I/O seam of the storage layer (Artemis' `SequentialFileFactory` idea).

The journal and the page store never call `os` directly: they take a `FileIO`. Production
code passes `REAL_FILE_IO`; tests pass a `FaultyFileIO`, which works on real files in a
temporary directory but can hold an fsync, fail a chosen write with ENOSPC, tear a write
part-way, and `crash()` — a simulated power cut — so recovery code can be exercised against
the failures a power cut produces, by name.

Durability model of `FaultyFileIO` (what `crash()` keeps), the POSIX worst case:
- file *data* is volatile until the file is fsynced: a crash cuts every file back to the
  length it had at its last fsync (bytes that were there when it was opened count as
  fsynced);
- directory *entries* are volatile until their directory is fsynced: a crash undoes every
  create, rename, remove, mkdir and rmdir whose directory (both directories, for a rename)
  was not fsynced after it — a new file vanishes even if its data was fsynced, a renamed
  file (or directory) is back under its old name (and what it replaced is back), a removed
  file is back;
- `truncate` is durable at once (`RealFileIO.truncate` fsyncs the file).
So a missing file fsync, a missing directory fsync, or a step done in the wrong order shows
up as lost data after `crash()`.

`makedirs` and `write_atomic` are built from the primitives (`mkdir`, `open_append`,
`rename`, `fsync_directory`) once, for both implementations, so the fault layer checks the
real sequence of steps.
"""

from __future__ import annotations

import builtins
import errno
import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = [
    "REAL_FILE_IO",
    "AppendFile",
    "FaultyFileIO",
    "FileIO",
    "RealFileIO",
    "SimulatedCrash",
    "make_dirs",
    "write_atomic",
]


StrPath = str | os.PathLike[str]
"""Where reads (`read_bytes`, `size`) also take a plain string: start-up reads thousands of
small files, and making a Path for each costs more than the read."""


class AppendFile(Protocol):
    """A file opened for appending; `size` counts pre-existing bytes too."""

    path: Path
    size: int

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    def fsync(self) -> None: ...

    def close(self) -> None: ...


class FileIO(Protocol):
    """Every file operation the storage layer needs, so tests can substitute faults."""

    def open_append(self, path: Path) -> AppendFile: ...

    def read_bytes(self, path: StrPath) -> bytes: ...

    def read_range(self, path: Path, offset: int, length: int) -> bytes: ...

    def size(self, path: StrPath) -> int: ...

    def truncate(self, path: Path, size: int) -> None: ...

    def remove(self, path: Path) -> None: ...

    def rename(self, src: Path, dst: Path) -> None: ...

    def list(self, directory: Path, suffix: str) -> list[Path]: ...

    def names(self, directory: Path) -> builtins.list[str]:
        """The names of the plain files in `directory`, sorted; [] if it does not exist."""
        ...

    def mkdir(self, directory: Path) -> None:
        """Create one directory whose parent exists (FileExistsError if it is there)."""
        ...

    def makedirs(self, directory: Path) -> None:
        """Create `directory` and missing parents, each new entry made durable."""
        ...

    def rmdir(self, directory: Path) -> None:
        """Remove one empty directory (durable once its parent is fsynced)."""
        ...

    def fsync_directory(self, directory: Path) -> None: ...

    def write_atomic(self, path: Path, data: bytes) -> None: ...


def _fdatasync(fd: int) -> None:
    """fdatasync skips the inode timestamp flush that fsync would add (Linux); fall back elsewhere."""
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)


def write_atomic(fileio: FileIO, path: Path, data: bytes) -> None:
    """Readers see the old content or the new, never a mix, even across a crash.

    Temp file written and fsynced, renamed over the target, directory fsynced: the new
    name is durable before this returns.
    """
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


def make_dirs(fileio: FileIO, directory: Path) -> None:
    """mkdir -p, durably: each directory created is followed by an fsync of its parent, so
    a crash cannot take away a folder (and every file in it) that was already used."""
    directory = Path(directory)
    missing: list[Path] = []
    probe = directory
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for level in reversed(missing):
        try:
            fileio.mkdir(level)
        except FileExistsError:
            if not level.is_dir():
                raise
            continue  # made meanwhile by someone else, who makes it durable
        fileio.fsync_directory(level.parent)


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

    def write(self, data: bytes | bytearray | memoryview) -> None:
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

    def read_bytes(self, path: StrPath) -> bytes:
        # Unbuffered: one open, fstat and read for the small files start-up reads by the
        # thousand (summaries, address.txt), without pathlib's and io's buffered layers.
        with open(path, "rb", buffering=0) as handle:
            return handle.readall()

    def read_range(self, path: Path, offset: int, length: int) -> bytes:
        # Three system calls, not the seven of a buffered `open`: each lets go of the GIL, and
        # a page-I/O worker waits up to a switch interval to take it back while the loop runs.
        fd = os.open(path, os.O_RDONLY)
        try:
            parts = []
            while length > 0:  # (a regular file reads short only at its end)
                data = os.pread(fd, length, offset)
                if not data:
                    break
                parts.append(data)
                length -= len(data)
                offset += len(data)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            os.close(fd)

    def size(self, path: StrPath) -> int:
        return os.stat(path).st_size

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
        return [directory / name for name in self.names(directory) if name.endswith(suffix)]

    def names(self, directory: Path) -> builtins.list[str]:
        # scandir: the entry's type comes with the listing, no stat per file (a start-up
        # lists thousands of page folders).
        try:
            with os.scandir(directory) as entries:
                return sorted(entry.name for entry in entries if entry.is_file())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def mkdir(self, directory: Path) -> None:
        os.mkdir(directory)

    def makedirs(self, directory: Path) -> None:
        make_dirs(self, directory)

    def rmdir(self, directory: Path) -> None:
        os.rmdir(directory)

    def fsync_directory(self, directory: Path) -> None:
        """A new, renamed or removed name is only durable once its directory is fsynced."""
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, path: Path, data: bytes) -> None:
        write_atomic(self, path, data)


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

    def write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._owner._before_write(self._inner, data, self.lost)
        finally:
            self.size = self._inner.size

    def fsync(self) -> None:
        self._owner._fsync(self._inner, self)

    def close(self) -> None:
        self._owner._closed(self)
        self._inner.close()


@dataclass(slots=True)
class _EntryOp:
    """A directory-entry change not yet durable: undone by `crash()` in reverse order.

    `kind`: "create" (path appeared), "mkdir", "rmdir", "rename" (path -> target, `saved`
    holding what target was before; a directory moves with what it holds), "remove" (`saved`
    holding the removed file). `dirs` are the directories still to be fsynced before the
    change is durable.
    """

    kind: str
    path: Path
    dirs: set[Path]
    target: Path | None = None
    saved: Path | None = None
    saved_durable: int | None = None
    target_durable: int | None = None


@dataclass(slots=True)
class _Stash:
    """Where `FaultyFileIO` keeps removed or replaced files until their removal is durable."""

    directory: Path | None = None
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def keep(self, path: Path) -> Path:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="pagemq-faulty-"))
        saved = self.directory / f"{next(self.counter)}-{path.name}"
        try:
            os.link(path, saved)
        except OSError:
            shutil.copy2(path, saved)
        return saved


class FaultyFileIO(FileIO):
    """Real files plus scripted faults; each recovery test names the fault it injects.

    Faults (all counted from the moment they are armed, 1-based):
    - `hold_fsync()` / `release_fsync()`: file fsync blocks until released (group-commit
      and receipt tests); `fsync_waiting` is set while one waits.
    - `fail_write(n, code=ENOSPC)`: the n-th write raises OSError(code), writing nothing.
    - `fail_remove(n, code=EIO)` / `fail_rename(n, code=EIO)`: the n-th remove or rename
      raises OSError(code) and changes nothing.
    - `tear_write(n, k)`: the n-th write puts only its first k bytes on disk — durably, as
      if the kernel had flushed them — and raises `SimulatedCrash`.
    - `crash_after(n)`: the n-th mutating step (write, fsync, truncate, remove, rename,
      mkdir, rmdir, directory fsync) raises `SimulatedCrash` instead of running.
    - `crash()`: power loss, per the module docstring: entries and bytes not fsynced go.
    """

    def __init__(self, inner: FileIO = REAL_FILE_IO, *, volatile_entries: bool = True) -> None:
        self._inner = inner
        self._volatile_entries = volatile_entries
        self._lock = threading.Lock()
        self._durable: dict[Path, int] = {}
        self._entries: list[_EntryOp] = []
        self._stash = _Stash()
        self._open: list[_FaultyAppendFile] = []
        self._fsync_gate = threading.Event()
        self._fsync_gate.set()
        self.fsync_waiting = threading.Event()
        self._write_faults: dict[int, Callable[[AppendFile, memoryview], None]] = {}
        self._remove_faults: dict[int, int] = {}
        self._rename_faults: dict[int, int] = {}
        self._crash_step: int | None = None
        self.writes = 0
        self.removes = 0
        self.renames = 0
        self.fsyncs = 0
        self.directory_fsyncs = 0
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

    def fail_remove(self, n: int = 1, code: int = errno.EIO) -> None:
        self._remove_faults[self.removes + n] = code

    def fail_rename(self, n: int = 1, code: int = errno.EIO) -> None:
        self._rename_faults[self.renames + n] = code

    def tear_write(self, n: int, k: int) -> None:
        def tear(handle: AppendFile, data: memoryview) -> None:
            handle.write(data[:k])
            with self._lock:
                self._durable[handle.path] = handle.size
            raise SimulatedCrash(f"write torn after {k} of {len(data)} bytes to {handle.path.name}")

        self._write_faults[self.writes + n] = tear

    def crash_after(self, n: int) -> None:
        self._crash_step = self.steps + n

    def pending_entries(self) -> list[str]:
        """Directory-entry changes a crash now would undo (for test messages)."""
        with self._lock:
            return [f"{op.kind} {op.path}" + (f" -> {op.target}" if op.target else "")
                    for op in self._entries]

    def crash(self, *, removes_survive: bool = False) -> None:
        """Model power loss: only fsynced bytes and fsynced entries survive; the process's
        handles are gone.

        `removes_survive=True` is the adversarial variant: the file system happened to make
        the pending removals durable (and nothing else not yet fsynced), which is what
        catches a file removed before its replacement's name was made durable.
        """
        with self._lock:
            for handle in list(self._open):
                handle.lost = True
                handle._inner.close()
            self._open.clear()
            for op in reversed(self._entries):
                if removes_survive and op.kind == "remove":
                    if op.saved is not None:
                        op.saved.unlink(missing_ok=True)
                    continue
                self._undo(op)
            self._entries.clear()
            for path, durable in self._durable.items():
                if path.exists() and self._inner.size(path) > durable:
                    self._inner.truncate(path, durable)
            self._durable.clear()
            self._write_faults.clear()
            self._remove_faults.clear()
            self._rename_faults.clear()
            self._crash_step = None
            self.crashed = False
        self._fsync_gate.set()

    def _undo(self, op: _EntryOp) -> None:
        """Put one directory-entry change back (lock held). Files it brings back keep only
        their fsynced bytes."""
        if op.kind == "create":
            if op.path.exists():
                os.unlink(op.path)
            self._durable.pop(op.path, None)
        elif op.kind == "mkdir":
            shutil.rmtree(op.path, ignore_errors=True)
            for path in [p for p in self._durable if op.path in p.parents]:
                del self._durable[path]
        elif op.kind == "rmdir":
            if not op.path.exists():
                os.mkdir(op.path)
        elif op.kind == "rename":
            assert op.target is not None
            if op.target.exists():
                os.replace(op.target, op.path)
                self._move_durable(op.target, op.path)
            if op.saved is not None:
                shutil.move(op.saved, op.target)
                if op.target_durable is not None:
                    self._durable[op.target] = op.target_durable
        elif op.kind == "remove" and op.saved is not None:
            shutil.move(op.saved, op.path)
            if op.saved_durable is not None:
                self._durable[op.path] = op.saved_durable

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

    def _entry(self, op: _EntryOp) -> None:
        if self._volatile_entries:
            with self._lock:
                self._entries.append(op)

    def _before_write(self, handle: AppendFile, data: bytes | bytearray | memoryview, lost: bool) -> None:
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

    def _move_durable(self, src: Path, dst: Path) -> None:
        """What is known of `src` (a file, or every file under a directory) now names `dst`
        (lock held)."""
        moved = self._durable.pop(src, None)
        if moved is not None:
            self._durable[dst] = moved
        for path in [p for p in self._durable if src in p.parents]:
            self._durable[dst / path.relative_to(src)] = self._durable.pop(path)

    def _durable_size(self, path: Path) -> int:
        """Bytes of `path` a crash now would keep (lock held)."""
        if path in self._durable:
            return self._durable[path]
        return self._inner.size(path)  # never written through us: all of it is durable

    # ----- FileIO ---------------------------------------------------------------------
    def open_append(self, path: Path) -> AppendFile:
        if self.crashed:
            raise SimulatedCrash(f"open of {path.name} after the crash")
        created = not path.exists()
        inner = self._inner.open_append(path)
        self._track(path, inner.size)
        if created:
            self._entry(_EntryOp("create", path, {path.parent}))
        handle = _FaultyAppendFile(self, inner)
        with self._lock:
            self._open.append(handle)
        return handle

    def read_bytes(self, path: StrPath) -> bytes:
        return self._inner.read_bytes(path)

    def read_range(self, path: Path, offset: int, length: int) -> bytes:
        return self._inner.read_range(path, offset, length)

    def size(self, path: StrPath) -> int:
        return self._inner.size(path)

    def truncate(self, path: Path, size: int) -> None:
        self._step(f"truncate of {path.name}")
        self._inner.truncate(path, size)
        with self._lock:
            self._durable[path] = size

    def remove(self, path: Path) -> None:
        self._step(f"remove of {path.name}")
        with self._lock:
            self.removes += 1
            code = self._remove_faults.pop(self.removes, None)
        if code is not None:
            raise OSError(code, f"{os.strerror(code)} (injected): {path}")
        saved = None
        if self._volatile_entries and path.is_file():
            saved = self._stash.keep(path)
        self._inner.remove(path)
        with self._lock:
            durable = self._durable.pop(path, None)
        if saved is not None:
            self._entry(_EntryOp("remove", path, {path.parent}, saved=saved, saved_durable=durable))

    def rename(self, src: Path, dst: Path) -> None:
        self._step(f"rename of {src.name} to {dst.name}")
        with self._lock:
            self.renames += 1
            code = self._rename_faults.pop(self.renames, None)
        if code is not None:
            raise OSError(code, f"{os.strerror(code)} (injected): {src} -> {dst}")
        saved = None
        with self._lock:
            dst_durable = self._durable_size(dst) if dst.is_file() else None
        if self._volatile_entries and dst.is_file():
            saved = self._stash.keep(dst)
        self._inner.rename(src, dst)
        with self._lock:
            self._durable.pop(dst, None)
            self._move_durable(src, dst)
        self._entry(_EntryOp("rename", src, {src.parent, dst.parent}, target=dst, saved=saved,
                             target_durable=dst_durable))

    def list(self, directory: Path, suffix: str) -> list[Path]:
        return self._inner.list(directory, suffix)

    def names(self, directory: Path) -> builtins.list[str]:
        return self._inner.names(directory)

    def mkdir(self, directory: Path) -> None:
        self._step(f"mkdir of {directory.name}")
        self._inner.mkdir(directory)
        self._entry(_EntryOp("mkdir", directory, {directory.parent}))

    def makedirs(self, directory: Path) -> None:
        make_dirs(self, directory)

    def rmdir(self, directory: Path) -> None:
        self._step(f"rmdir of {directory.name}")
        self._inner.rmdir(directory)
        self._entry(_EntryOp("rmdir", directory, {directory.parent}))

    def fsync_directory(self, directory: Path) -> None:
        self._step(f"fsync of directory {directory.name}")
        self._inner.fsync_directory(directory)
        with self._lock:
            self.directory_fsyncs += 1
            directory = Path(directory)
            kept = []
            for op in self._entries:
                op.dirs.discard(directory)
                if op.dirs:
                    kept.append(op)
                elif op.saved is not None:
                    op.saved.unlink(missing_ok=True)
            self._entries = kept

    def write_atomic(self, path: Path, data: bytes) -> None:
        write_atomic(self, path, data)

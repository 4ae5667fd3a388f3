"""The file work of a journal cleanup, and who runs it: removals and compaction copies.

A cleanup alternates between two kinds of work. Deciding what may go, and pointing the
index at compacted copies, needs the journal's index, which belongs to the event loop
thread. Reading payloads, writing and fsyncing a compacted file, renaming, unlinking and
fsyncing directories only needs plain data, and costs milliseconds to tenths of a second
on a busy disk: a 200,000-message drain spent ~0.3 s of loop time here. So
`Journal._cleanup_steps` is a generator on the loop side that yields each piece of file
work as a callable over plain data (paths, offsets, lengths: nothing the loop changes
while it runs) and gets its result back; `run_in_thread` runs those callables in the
journal's cleanup thread, `run_inline` on the caller's thread (tools, tests, and the
crash-at-every-step fault tests, whose step counts need one thread).

The order of the file steps, which is what makes a kill -9 at any point safe, is the same
either way; see docs/formats/journal.md ("Which files may go").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Generator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from pagemq.storage import records as rec
from pagemq.storage.disk_space import is_no_space
from pagemq.storage.fileio import FileIO
from pagemq.storage.records import OpKind

log = logging.getLogger("pagemq.journal")

__all__ = [
    "CleanupReport",
    "CleanupSteps",
    "CompactionPlan",
    "Entry",
    "Retiree",
    "compact_files",
    "retire",
    "retire_files",
    "run_in_thread",
    "run_inline",
]

_PAYLOAD_AT = rec.RECORD_HEADER.size
_DENSE_READ = 64  # more payloads than this from one file: read the file whole

# A compaction entry: (seq, kind, id, type, file_no, offset, length, target, loc). An ADD or
# UPDATE is copied from (file_no, offset, length); a DELETE (file_no -1) still shadows file
# `target`. `loc` is the loop's own handle on the op, carried through and never read here.
Entry = tuple[int, OpKind, int, int, int, int, int, int, object]
Retiree = tuple[Path, int, bool]  # (path, size, damaged): a data file the index let go
CleanupSteps = Generator[Callable[[], object], object, "CleanupReport"]


@dataclass
class CleanupReport:
    """Plain (not slotted) so callers can `vars()` it into a log line or JSON."""

    deleted: int = 0
    archived: int = 0
    compacted_files: int = 0
    compacted_records: int = 0
    bytes_reclaimed: int = 0
    set_aside: int = 0  # spent files with damaged bytes, renamed *.jnl.damaged
    errors: int = 0


@dataclass(slots=True)
class CompactionPlan:
    """What one compaction copies, as plain data the cleanup thread may read."""

    file_no: int
    directory: Path
    base_seq: int
    sources: dict[int, Path]  # file number -> path, the files the copy replaces
    entries: list[Entry]  # sorted by seq in the cleanup thread, before the copy is written
    late_seq: int  # ops from this seq on were appended after the plan was made


def run_inline(steps: CleanupSteps) -> CleanupReport:
    """Run a cleanup's file work on this thread, step by step."""
    try:
        work = next(steps)
        while True:
            work = steps.send(work())
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_in_thread(steps: CleanupSteps, executor: Executor) -> CleanupReport:
    """Run a cleanup's file work in `executor`, its index work on this (the loop) thread."""
    loop = asyncio.get_running_loop()
    try:
        work = next(steps)
        while True:
            result = await loop.run_in_executor(executor, work)
            work = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


# ----- removals ---------------------------------------------------------------------------
def retire(fileio: FileIO, path: Path, archive: Path | None, report: CleanupReport, *,
           size: int = 0, damaged: bool = False) -> bool:
    """Delete a data file, or move it into the archive directory (archive-data-logs); a
    file that held damaged bytes is renamed `*.jnl.damaged` instead, and kept."""
    try:
        if damaged:
            aside = path.with_name(path.name.removesuffix(rec.FILE_SUFFIX) + rec.DAMAGED_SUFFIX)
            fileio.rename(path, aside)
            report.set_aside += 1
            log.warning("journal: %s held damaged bytes; spent now, set aside as %s (kept for "
                        "inspection, never deleted)", path.name, aside.name)
        elif archive is not None:
            fileio.makedirs(archive)
            fileio.rename(path, archive / path.name)
            report.archived += 1
        else:
            fileio.remove(path)
            report.deleted += 1
    except OSError as exc:
        log.error("journal cleanup: cannot %s %s: %s; will retry",
                  "archive" if archive else "delete", path, exc)
        report.errors += 1
        return False
    report.bytes_reclaimed += size
    return True


def retire_files(fileio: FileIO, directory: Path, archive: Path | None, files: list[Retiree],
                 report: CleanupReport) -> list[Retiree]:
    """Retire `files` in order, then fsync the directories so the removals are durable;
    returns the ones that could not go (the next cleanup retries them)."""
    failed = [file for file in files
              if not retire(fileio, file[0], archive, report, size=file[1], damaged=file[2])]
    if len(failed) < len(files):
        directories = [directory]
        if archive is not None and report.archived:
            directories.append(archive)
        for each in directories:
            try:
                fileio.fsync_directory(each)
            except OSError as exc:
                log.error("journal cleanup: cannot fsync directory %s: %s", each, exc)
                report.errors += 1
    return failed


# ----- compaction -------------------------------------------------------------------------
def compact_files(fileio: FileIO, plan: CompactionPlan,
                  report: CleanupReport) -> tuple[int, list[int]] | None:
    """Write the compacted copy, fsync it, give it its name and make the name durable;
    its size and each entry's payload offset, or None when it failed (the sources stay).

    1. the copy is written under a temp name and fsynced; 2. renamed into place; 3. the
    directory fsynced: a crash that kept the removal of a source but not this rename would
    lose the source's live records. Only then may the sources go (the caller's next step).
    """
    temp = plan.directory / rec.temp_name(plan.file_no)
    try:
        plan.entries.sort(key=lambda entry: entry[0])
        data, offsets = _encode(fileio, plan)
        handle = fileio.open_append(temp)  # 1.
        try:
            handle.write(data)
            handle.fsync()
        finally:
            handle.close()
        fileio.rename(temp, plan.directory / rec.file_name(plan.file_no))  # 2.
        fileio.fsync_directory(plan.directory)  # 3.
    except OSError as exc:
        # Out of space is expected on a full disk (and retried at the next cleanup): no alarm.
        log.log(logging.WARNING if is_no_space(exc) else logging.ERROR,
                "journal compaction of %s failed: %s; those files stay as they are",
                ", ".join(path.name for path in plan.sources.values()), exc)
        report.errors += 1
        with contextlib.suppress(OSError):
            fileio.remove(temp)
        return None
    return len(data), offsets


def _encode(fileio: FileIO, plan: CompactionPlan) -> tuple[bytes, list[int]]:
    payloads = _read_payloads(fileio, plan)
    chunks = [rec.FileHeader(plan.file_no, plan.base_seq).encode(),
              rec.CompactedRecord(tuple(sorted(plan.sources))).encode()]
    position = sum(len(chunk) for chunk in chunks)
    offsets = []
    for seq, kind, id, type, file_no, offset, _length, _target, _loc in plan.entries:
        payload = b"" if kind == OpKind.DELETE else payloads[file_no, offset]
        data = rec.encode_op(kind, seq, id, type, payload)
        offsets.append(position + _PAYLOAD_AT)
        chunks.append(data)
        position += len(data)
    return b"".join(chunks), offsets


def _read_payloads(fileio: FileIO, plan: CompactionPlan) -> dict[tuple[int, int], bytes]:
    by_file: dict[int, list[tuple[int, int]]] = {}
    for _seq, kind, _id, _type, file_no, offset, length, _target, _loc in plan.entries:
        if kind != OpKind.DELETE:
            by_file.setdefault(file_no, []).append((offset, length))
    payloads: dict[tuple[int, int], bytes] = {}
    for file_no, spans in by_file.items():
        path = plan.sources[file_no]
        if len(spans) > _DENSE_READ:
            data = fileio.read_bytes(path)
            for offset, length in spans:
                payloads[file_no, offset] = data[offset:offset + length]
        else:
            for offset, length in spans:
                payloads[file_no, offset] = fileio.read_range(path, offset, length)
    return payloads

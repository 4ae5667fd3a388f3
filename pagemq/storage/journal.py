"""The append-only journal: rolling data files, a live-record index, recovery, cleanup.

A generic record store in the manner of Artemis' `JournalImpl` and seed 004's AMQ message
store: records are (id, type, payload); ADD, UPDATE and DELETE act on one id, TRANSACTION
frames several ops so a crash keeps all or none. Byte layouts live in `records.py` and
docs/formats/journal.md; batching and fsync in `group_commit.py`.

Every op carries a journal-wide sequence number (seq). Replay merges all data files by
seq, so the result does not depend on file order: that lets compaction write live records
into a new, higher-numbered file next to the file still being appended to, and makes a
replay that meets the same op twice (a compaction interrupted before its sources were
removed) skip the copy.

Which file may go (the index in `_DataFile`): a file is needed while it holds a live add
or update, or a DELETE whose killed ADD still sits in another existing file (without the
DELETE a replay would resurrect that record: `kills`). Compaction copies the live ops and
those needed DELETEs out of sparse files, so one old unacknowledged message cannot pin
every file after it (KahaDB's AMQ-3978).

Threads: every public method except `close` is for the event loop thread only; the index
is owned by that thread. The writer thread sees only bytes (`GroupCommitWriter`); the
cleanup thread (`cleanup_in_thread`) only paths, offsets and bytes (`journal_cleanup`),
while the loop keeps appending: compaction copes with records deleted or updated while
their copy is being written (`_install`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import cast

from pagemq.storage import records as rec
from pagemq.storage.fileio import REAL_FILE_IO, FileIO
from pagemq.storage.group_commit import GroupCommitWriter, JournalError
from pagemq.storage.journal_cleanup import (
    CleanupReport,
    CleanupSteps,
    CompactionPlan,
    Entry,
    Retiree,
    compact_files,
    retire,
    retire_files,
    run_in_thread,
    run_inline,
)
from pagemq.storage.records import OpKind

log = logging.getLogger("pagemq.journal")

__all__ = [
    "CleanupReport",
    "DamageReport",
    "DataFileInfo",
    "DuplicateRecordError",
    "Journal",
    "JournalError",
    "LiveRecord",
    "LoadResult",
    "Op",
    "OpKind",
    "UnknownRecordError",
]

_ADD = int(OpKind.ADD)
IDLE_ROLL_BYTES = 64 << 10  # a spent current file smaller than this is not worth a new file
CLEANUP_BYTES_MIN = 1 << 20
CLEANUP_BYTES_MAX = 4 << 20
LIGHT_COMPACT_RATIO = 0.01  # the every-second cleanup compacts only files this little alive
CLEANUP_AFTER_WRITES = 1.0  # seconds: a cleanup is due this long after the last, if anything was written

Op = tuple[OpKind, int, int, bytes]  # (kind, id, type, payload); DELETE ignores type/payload
_PAYLOAD_AT = rec.RECORD_HEADER.size
_MAX_SEQ = (1 << 64) - 1


def _pass_on(target: asyncio.Future[None], source: asyncio.Future[None]) -> None:
    """The writer's batch future's outcome, to a future handed out before the batch."""
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())  # type: ignore[arg-type]
    else:
        target.set_result(None)


class UnknownRecordError(LookupError):
    """UPDATE or DELETE of an id that is not live: a caller bug, refused before any write."""


class DuplicateRecordError(ValueError):
    """ADD of an id that is already live."""


@dataclass(slots=True)
class LiveRecord:
    id: int
    type: int
    payload: bytes
    updates: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class LoadResult:
    records: list[LiveRecord]
    max_id: int
    dropped: list[str]  # one line per report, as logged
    damage: list[DamageReport] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DamageReport:
    """What recovery found wrong in one file: `kind` is "torn tail" (cut when repairing),
    "damage" (kept; read past), "unreadable file" (skipped whole) or "empty file" (a
    newest file whose header was never written; removed when repairing)."""

    path: Path
    offset: int
    length: int
    reason: str
    kind: str


@dataclass(frozen=True, slots=True)
class DataFileInfo:
    file_no: int
    path: Path
    size: int
    ops: int
    live: int
    needed_deletes: int
    first_seq: int
    last_seq: int
    compacted_from: tuple[int, ...] | None


class _Loc:
    """Where one add or update op sits; `payload` is kept only while loading."""

    __slots__ = ("file_no", "length", "offset", "payload", "seq", "type")

    def __init__(self, file_no: int, seq: int, type: int, offset: int, length: int,
                 payload: bytes | None = None) -> None:
        self.file_no, self.seq, self.type = file_no, seq, type
        self.offset, self.length, self.payload = offset, length, payload


class _Live:
    __slots__ = ("add", "updates")

    def __init__(self, add: _Loc) -> None:
        self.add = add
        # A list once updated: most records (a held message) never are, and an empty list
        # each would be one more object per message held.
        self.updates: list[_Loc] | tuple[()] = ()


class _DataFile:
    """Per-file bookkeeping that decides when the file may be deleted or compacted."""

    __slots__ = ("compacted_from", "damaged", "file_no", "first_seq", "ids", "killed_seq",
                 "killers", "kills", "last_seq", "live", "ops", "path", "size")

    def __init__(self, file_no: int, path: Path, size: int, first_seq: int) -> None:
        self.file_no, self.path, self.size = file_no, path, size
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        self.ops = 0
        self.live = 0  # live add and update ops
        # ids of the adds and updates written here, live or not since: where compaction looks
        # for what to copy (a list, not a set of the live ones: an append per op and nothing
        # per delete, 8 bytes an op, on the hot path)
        self.ids: list[int] = []
        self.killed_seq = 0  # newest DELETE that killed an op here: it must be durable first
        self.kills: dict[int, list[tuple[int, int]]] = {}  # file -> (seq, id) of needed DELETEs
        self.killers: set[int] = set()  # files whose `kills` point here
        self.compacted_from: tuple[int, ...] | None = None
        self.damaged = False  # holds unreadable bytes: set aside, never deleted, when spent

    def needed(self) -> int:
        return self.live + sum(len(entries) for entries in self.kills.values())


class Journal:
    """Records in rolling data files; see the module docstring for the design."""

    def __init__(
        self,
        directory: Path,
        *,
        file_size: int = 32 * 1024 * 1024,
        sync: bool = True,
        archive_directory: Path | None = None,
        fileio: FileIO = REAL_FILE_IO,
        compact_min_live_ratio: float = 0.3,
        cleanup_bytes: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.file_size = file_size
        # appended bytes that make a cleanup due (`cleanup_wanted`): 1/16 of a file, 1-4 MiB
        self.cleanup_bytes = cleanup_bytes or max(CLEANUP_BYTES_MIN, min(file_size // 16, CLEANUP_BYTES_MAX))
        self._since_cleanup = 0
        self._last_cleanup = time.monotonic()
        self._waiting_for = 0  # a seq whose durability lets the last cleanup's leftovers go
        self.sync = sync
        self.archive_directory = archive_directory
        self.compact_min_live_ratio = compact_min_live_ratio
        self._fileio = fileio
        self._files: dict[int, _DataFile] = {}
        self._records: dict[int, _Live] = {}
        # ADDs and unsynced DELETEs of this loop turn, written as one record at its end or
        # before anything else: see `_hold_op`. Gathered ids: True added, False deleted.
        self._gathered: list[Op] = []
        self._gathered_ids: dict[int, bool] = {}
        self._gathered_future: asyncio.Future[None] | None = None
        self._gathered_size = 0
        self._gather_bytes = max(256, min(file_size // 8, 1 << 20))
        self._cur: _DataFile | None = None
        self._next_seq = 1
        self._next_file_no = 1
        self._loaded = False
        self._closed = False
        self._stale: list[Retiree] = []  # files whose removal failed: retried next cleanup
        self._counters = {"records_written": 0, "compactions": 0, "files_deleted": 0,
                          "files_archived": 0}
        # Told on the loop when a write batch found no space (the error) and when the batch
        # kept for it is written (None): see group_commit.py.
        self.on_space: Callable[[OSError | None], None] = lambda _error: None
        self._writer = self._new_writer(0)
        self._cleaner: ThreadPoolExecutor | None = None  # the cleanup thread, made when first used
        self._cleaning: asyncio.Future[CleanupReport] | None = None

    def _new_writer(self, durable_seq: int) -> GroupCommitWriter:
        writer = GroupCommitWriter(self._fileio, self.directory, self._path,
                                   sync=self.sync, durable_seq=durable_seq)
        writer.on_space = self._space_changed
        return writer

    def _space_changed(self, error: OSError | None) -> None:
        self.on_space(error)

    @property
    def stalled(self) -> bool:
        """A write batch found no space and waits to be written again."""
        return self._writer.stalled is not None

    def _path(self, file_no: int) -> Path:
        return self.directory / rec.file_name(file_no)

    # ----- recovery ---------------------------------------------------------------------
    def load(self, *, repair: bool = True) -> LoadResult:
        """Recovery by replay (seed 004; Artemis `JournalImpl.load`, ZODB `fsrecover`).

        1. Remove temp files of unfinished compactions: their sources are still intact.
        2. Open every data file: check its header, read its first record (a compaction
           marker names the files that file replaced).
        3. Finish compactions whose sources are still present: retire those sources.
        4. Replay the ops of every remaining file, merged by seq, into the index.
        5. Cut a torn tail off the newest appended file; report any other damage.
        6. Number new files and seqs above everything seen.
        `repair=False` (for `pagemq data print`) changes no byte: it skips steps 1, 3
        (replaced sources are left out of the replay, as after step 3) and the cut in 5.
        """
        dropped: list[str] = []
        reports: list[DamageReport] = []
        if repair:
            self._fileio.makedirs(self.directory)
        self._remove_temp_files(repair)  # 1
        opened, damaged = self._open_files(dropped)  # 2
        opened = self._finish_compactions(opened, repair)  # 3
        max_id, max_seq = self._replay(opened)  # 4
        self._report_damage(opened, damaged, dropped, reports, repair)  # 5
        self._next_seq = max_seq + 1  # 6
        self._loaded = True
        self._writer = self._new_writer(max_seq)
        return LoadResult(self._live_records(), max_id, dropped, reports)

    def _live_records(self) -> list[LiveRecord]:
        """The live records in the order of their adds (replay inserts them into the index
        in seq order), their payloads handed over: the index keeps only their places."""
        records: list[LiveRecord] = []
        append = records.append
        for id, live in self._records.items():
            add = live.add
            updates = [(u.type, u.payload or b"") for u in live.updates] if live.updates else []
            append(LiveRecord(id, add.type, add.payload or b"", updates))
            add.payload = None
            for update in live.updates:
                update.payload = None
        return records

    def _note_number(self, file_no: int) -> None:
        self._next_file_no = max(self._next_file_no, file_no + 1)

    def _remove_temp_files(self, repair: bool) -> None:
        for path in self._fileio.list(self.directory, rec.DAMAGED_SUFFIX):
            self._note_number(rec.parse_file_number(path.name) or 0)  # never reuse its number
        for path in self._fileio.list(self.directory, rec.TEMP_SUFFIX):
            file_no = rec.parse_file_number(path.name)
            if file_no is not None:
                self._note_number(file_no)
            if repair:
                log.warning("journal: removing %s, left by a compaction that did not finish "
                            "(its source files are intact)", path)
                self._fileio.remove(path)

    def _open_files(self, dropped: list[str]) -> tuple[list[_Opened], list[rec.FileScan]]:
        opened: list[_Opened] = []
        damaged: list[rec.FileScan] = []
        for path in self._fileio.list(self.directory, rec.FILE_SUFFIX):
            file_no = rec.parse_file_number(path.name)
            if file_no is None:
                log.warning("journal: ignoring %s: not a journal file name", path)
                dropped.append(f"{path.name}: not a journal file name; ignored")
                continue
            self._note_number(file_no)
            scan = rec.FileScan(path, self._fileio.size(path))
            batches = rec.scan_ops(self._fileio, path, scan, file_no=file_no)
            first = next(batches, None)  # the header is read, and a compaction marker if any
            if scan.header is not None and scan.header.file_no != file_no:
                scan.error = rec.CorruptRecord(f"header says file {scan.header.file_no}", 0)
                scan.header = None
            if scan.header is None:
                damaged.append(scan)
                continue
            for source in scan.sources or ():
                self._note_number(source)
            opened.append(_Opened(file_no, scan, first, batches))
        return opened, damaged

    def _finish_compactions(self, opened: list[_Opened], repair: bool) -> list[_Opened]:
        replaced = {source: o.file_no for o in opened for source in o.scan.sources or ()}
        keep = []
        for o in opened:
            by = replaced.get(o.file_no)
            if by is None or by == o.file_no:
                keep.append(o)
            elif repair:
                log.warning("journal: finishing an interrupted compaction: %s was replaced by %s",
                            o.scan.path.name, rec.file_name(by))
                report = CleanupReport()
                retire(self._fileio, o.scan.path, self.archive_directory, report,
                       damaged=bool(o.scan.damage))
                self._count_removals(report)
        return keep

    def _replay(self, opened: list[_Opened]) -> tuple[int, int]:
        """Replay every op once, in seq order across files (the lower file's when two
        files hold the same seq), batch by batch (`_replay_rows`): appended files hold
        disjoint seq ranges, so a file is mostly replayed batch after batch with no merge
        step, and a compacted file interleaves with the others only where it must."""
        max_id = max_seq = 0
        for o in opened:
            assert o.scan.header is not None
            file = _DataFile(o.file_no, o.scan.path, o.scan.size, o.scan.header.base_seq)
            file.compacted_from = o.scan.sources
            self._files[o.file_no] = o.file = file
            max_seq = max(max_seq, o.scan.header.base_seq - 1)
        active = [o for o in opened if o.head() is not None]
        previous = 0
        while active:
            active.sort(key=_Opened.position)
            o = active[0]
            limit = _MAX_SEQ
            if len(active) > 1:
                seq, file_no = active[1].position()
                limit = seq if o.file_no < file_no else seq - 1  # ties go to the lower file
            previous = self._replay_rows(o, limit, previous)
            if o.head() is None:
                active.remove(o)
                max_id, max_seq = max(max_id, o.max_id), max(max_seq, o.max_seq)
        for file in self._files.values():
            self._note_number(file.file_no)
        return max_id, max_seq

    def _replay_rows(self, o: _Opened, limit: int, previous: int) -> int:
        """Replay `o`'s ops from where it stands up to seq `limit`; the last seq replayed."""
        file = o.file
        records = self._records
        rows, at = o.rows, o.at
        while at < len(rows):
            row = rows[at]
            seq, kind, id, type, payload, offset = row
            if seq > limit:
                break
            at += 1
            if seq == previous:
                log.warning("journal: op seq %d met twice (in %s); replaying it once",
                            seq, rec.file_name(file.file_no))
                continue
            previous = seq
            if kind is OpKind.ADD and id not in records:  # most ops: no lookup of a live record
                self._apply_add(file, seq, id, type, offset, len(payload), payload)
            else:
                self._replay_op(file, row)
        o.at = at
        return previous

    def _replay_op(self, file: _DataFile, row: rec.OpRow) -> None:
        seq, kind, id, type, payload, offset = row
        live = self._records.get(id)
        if kind == OpKind.ADD:
            if live is not None:
                log.warning("journal: record %d added again at seq %d without a delete; "
                            "the later add wins", id, seq)
                self._kill(live, seq)
                del self._records[id]  # re-added below: the index stays in add order
            self._apply_add(file, seq, id, type, offset, len(payload), payload)
        elif live is None:
            # an update or delete whose add was in a file cleanup already removed
            file.ops += 1
            file.last_seq = seq
        else:
            self._apply(file, seq, kind, id, type, offset, len(payload), payload)

    def _report_damage(self, opened: list[_Opened], damaged: list[rec.FileScan],
                       dropped: list[str], reports: list[DamageReport], repair: bool) -> None:
        """Only the newest appended-to file can hold a torn tail; cut it. Report the rest.

        Damage anywhere else costs only its own bytes: the scan read on past it, and the
        file is marked damaged, so cleanup sets it aside (`*.jnl.damaged`) instead of
        deleting it once it is spent: bytes nobody could read are never thrown away.
        """
        appended = [o.file_no for o in opened if o.scan.sources is None]
        newest = max([*appended, *(rec.parse_file_number(s.path.name) or 0 for s in damaged)], default=0)
        for o in opened:
            scan = o.scan
            tail = scan.tail
            for damage in scan.damage:
                if damage is tail and o.file_no == newest and not scan.header_damaged:
                    kind = "torn tail"
                    message = (f"{scan.path.name}: torn tail at offset {damage.offset}: "
                               f"{damage.length} bytes dropped ({damage.reason} at offset {damage.offset})")
                    if repair:
                        self._fileio.truncate(scan.path, damage.offset)
                        self._files[o.file_no].size = damage.offset
                else:
                    kind = "damage"
                    self._files[o.file_no].damaged = True
                    message = _damage_message(scan, damage)
                log.warning("journal: %s", message)
                dropped.append(message)
                reports.append(DamageReport(scan.path, damage.offset, damage.length, damage.reason, kind))
        for scan in damaged:
            torn = rec.parse_file_number(scan.path.name) == newest and scan.size < rec.FILE_HEADER.size
            if torn and repair:
                self._fileio.remove(scan.path)
            message = (f"{scan.path.name}: " + ("file created but its header never written; removed"
                       if torn else f"unreadable file header ({scan.error}); whole file skipped"))
            log.warning("journal: %s", message)
            dropped.append(message)
            reports.append(DamageReport(scan.path, 0, scan.size, str(scan.error),
                                        "empty file" if torn else "unreadable file"))

    # ----- appends (event loop thread) --------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the group-commit writer thread; appends are accepted from now on."""
        if not self._loaded:
            raise RuntimeError("Journal.load() must run before start()")
        self._writer.start(loop)

    def add(self, id: int, type: int, payload: bytes, *, sync: bool = False) -> asyncio.Future[None] | None:
        if id in self._records or id in self._gathered_ids:
            raise DuplicateRecordError(f"journal record {id} is already live")
        rec.check_fields(id, type)  # refused now, not when the turn's records are written
        return self._hold_op(OpKind.ADD, id, type, payload, sync)

    def update(
        self, id: int, type: int, payload: bytes, *, sync: bool = False
    ) -> asyncio.Future[None] | None:
        self.write_gathered()
        if id not in self._records:
            raise UnknownRecordError(f"journal record {id} is not live: cannot update it")
        return self._write_op(OpKind.UPDATE, id, type, payload, sync)

    def delete(self, id: int, *, sync: bool = False) -> asyncio.Future[None] | None:
        gathered = self._gathered_ids.get(id)
        if gathered is False or (gathered is None and id not in self._records):
            raise UnknownRecordError(f"journal record {id} is not live: cannot delete it")
        if sync:
            self.write_gathered()
            return self._write_op(OpKind.DELETE, id, 0, b"", sync)
        return self._hold_op(OpKind.DELETE, id, 0, b"", False)

    def _hold_op(self, kind: OpKind, id: int, type: int, payload: bytes, sync: bool
                 ) -> asyncio.Future[None] | None:
        """ADDs and unsynced DELETEs are gathered and written as one record (one frame, one
        CRC, one hand-over to the writer thread) when the loop turn ends, or before any
        other op, flush, cleanup or look at the index, so the journal's order is kept: a
        burst of SENDs or ACKs costs a fraction of a record each. A sync ADD's future is
        the gathered record's, resolved once it is durable, as the writer's would be. A
        gathered record stays small next to a data file (`_gather_bytes`); a payload that
        is big by itself is written alone."""
        self._writer.check()
        if len(payload) >= self._gather_bytes:
            self.write_gathered()
            return self._write_op(kind, id, type, payload, sync)
        gathered = self._gathered
        gathered.append((kind, id, type, payload))
        self._gathered_ids[id] = kind == OpKind.ADD
        self._gathered_size += len(payload) + rec.OP_HEADER.size
        if len(gathered) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._write_gathered_at_turn_end)
            except RuntimeError:  # no loop (tools, recovery): at once
                return self._write_now(sync)
        future = None
        if sync:
            future = self._gathered_future
            if future is None or future.cancelled():  # a waiter's cancel must not void the rest
                future = self._gathered_future = asyncio.get_running_loop().create_future()
        if self._gathered_size >= self._gather_bytes:
            self.write_gathered()
        return future

    def _write_now(self, sync: bool) -> asyncio.Future[None] | None:
        self.write_gathered()
        return self._writer.flush_future() if sync else None

    def _write_gathered_at_turn_end(self) -> None:
        """`write_gathered` as the loop's callback: a writer that failed after the check
        (its thread logged why) has failed the ops' future already, and there is no caller
        to raise to (the loop would log a traceback for an error already reported)."""
        with contextlib.suppress(OSError):
            self.write_gathered()

    def write_gathered(self) -> None:
        """Write what `_hold_op` holds: each op its own record (so damage to one costs
        that one only), handed to the writer thread at once (once per file it lands in)."""
        ops = self._gathered
        if not ops:
            return
        future = self._gathered_future
        self._gathered, self._gathered_ids, self._gathered_future = [], {}, None
        self._gathered_size = 0
        try:
            self._writer.check()
        except OSError as exc:  # failed or stopped since they were handed in: never written
            if future is not None and not future.done():
                future.set_exception(exc)
            return
        sync = future is not None and not future.cancelled()
        frame, apply = rec.frame_op, self._apply  # fields were checked when gathered
        seq = self._next_seq
        chunk: list[bytes] = []
        file = self._cur
        try:
            for kind, id, type, payload in ops:
                data = frame(kind, seq, id, type, payload)
                if file is None or self._rolls_for(len(data)):
                    if file is not None and chunk:  # the last file's share goes first
                        self._append(file, b"".join(chunk), seq - 1, False, len(chunk))
                        chunk = []
                    file = self._roll()
                offset = file.size
                file.size += len(data)
                apply(file, seq, kind, id, type, offset + _PAYLOAD_AT, len(payload))
                chunk.append(data)
                seq += 1
            assert file is not None
            written = self._append(file, b"".join(chunk), seq - 1, sync, len(chunk))
        except OSError as exc:  # the writer failed meanwhile (it logged why)
            if sync:
                future.set_exception(exc)  # type: ignore[union-attr]
            raise
        if future is not None and sync and written is not None:
            written.add_done_callback(partial(_pass_on, future))

    def _write_op(self, kind: OpKind, id: int, type: int, payload: bytes, sync: bool
                  ) -> asyncio.Future[None] | None:
        seq = self._next_seq
        data = rec.encode_op(kind, seq, id, type, payload)
        file, offset = self._place(len(data))
        self._apply(file, seq, kind, id, type, offset + _PAYLOAD_AT, len(payload))
        return self._append(file, data, seq, sync)

    def transaction(self, ops: Sequence[Op], *, sync: bool = False) -> asyncio.Future[None] | None:
        """All ops in one framed record: after a crash, all of them or none."""
        if not ops:
            return self.flush() if sync else None
        self.write_gathered()
        self._check_transaction(ops)
        seq = self._next_seq
        data, payload_offsets = rec.encode_transaction(seq, ops)
        file, offset = self._place(len(data))
        apply = self._apply
        # An ADD (a COMMIT's held messages, by the thousand) is indexed inline: `_apply_add`
        # less the calls, its counts added once at the end.
        records, ids, file_no, added = self._records, file.ids, file.file_no, 0
        for i, ((kind, id, type, payload), rel) in enumerate(zip(ops, payload_offsets, strict=True)):
            if kind == _ADD:
                records[id] = _Live(_Loc(file_no, seq + i, type, offset + rel, len(payload)))
                ids.append(id)
                added += 1
            elif kind == OpKind.DELETE:
                apply(file, seq + i, kind, id, 0, offset + rel, 0)
            else:
                apply(file, seq + i, kind, id, type, offset + rel, len(payload))
        file.ops += added
        file.live += added
        file.last_seq = seq + len(ops) - 1
        return self._append(file, data, seq + len(ops) - 1, sync)

    def _check_transaction(self, ops: Sequence[Op]) -> None:
        """Refuse the whole transaction before writing anything if one op is invalid."""
        if all(op[0] == _ADD for op in ops):  # a COMMIT's held messages: new ids, each once
            ids = {op[1] for op in ops}
            if len(ids) == len(ops) and self._records.keys().isdisjoint(ids):
                return
        added: set[int] = set()
        deleted: set[int] = set()
        for kind, id, _type, _payload in ops:
            exists = id in added or (id in self._records and id not in deleted)
            if kind == OpKind.ADD:
                if exists:
                    raise DuplicateRecordError(f"transaction adds record {id}, which is already live")
                added.add(id)
                deleted.discard(id)
            elif not exists:
                raise UnknownRecordError(f"transaction refers to record {id}, which is not live")
            elif kind == OpKind.DELETE:
                deleted.add(id)
                added.discard(id)

    def flush(self) -> asyncio.Future[None]:
        """Resolves once everything appended so far is durable."""
        self.write_gathered()
        return self._writer.flush_future()

    def _place(self, length: int) -> tuple[_DataFile, int]:
        """Pick the file and offset for a record, rolling to a new file when it would not fit.

        A record larger than `file_size` gets a file of its own.
        """
        cur = self._cur
        if cur is None or self._rolls_for(length):
            cur = self._roll()
        offset = cur.size
        cur.size += length
        return cur, offset

    def _rolls_for(self, length: int) -> bool:
        """A record of `length` bytes would not fit in the current (non-empty) file."""
        cur = self._cur
        return cur is None or (cur.size + length > self.file_size and cur.size > rec.FILE_HEADER.size)

    def _roll(self) -> _DataFile:
        file_no = self._next_file_no
        self._next_file_no += 1
        header = rec.FileHeader(file_no, self._next_seq).encode()
        self._writer.append(file_no, header, self._next_seq - 1, sync=False)
        self._cur = self._files[file_no] = _DataFile(file_no, self._path(file_no), len(header),
                                                     self._next_seq)
        return self._cur

    def _append(self, file: _DataFile, data: bytes, last: int, sync: bool, records: int = 1
                ) -> asyncio.Future[None] | None:
        self._next_seq = last + 1
        self._counters["records_written"] += records
        self._since_cleanup += len(data)
        return self._writer.append(file.file_no, data, last, sync=sync)

    # ----- the index (shared by appends and replay) -------------------------------------
    def _apply(self, file: _DataFile, seq: int, kind: OpKind, id: int, type: int, offset: int,
               length: int, payload: bytes | None = None) -> None:
        if kind == OpKind.ADD:
            self._apply_add(file, seq, id, type, offset, length, payload)
        elif kind == OpKind.UPDATE:
            self._apply_update(file, seq, id, type, offset, length, payload)
        else:
            self._apply_delete(file, seq, id)

    def _apply_add(self, file: _DataFile, seq: int, id: int, type: int, offset: int, length: int,
                   payload: bytes | None = None) -> None:
        self._records[id] = _Live(_Loc(file.file_no, seq, type, offset, length, payload))
        file.ops += 1
        file.live += 1
        file.ids.append(id)
        file.last_seq = seq

    def _apply_update(self, file: _DataFile, seq: int, id: int, type: int, offset: int, length: int,
                      payload: bytes | None = None) -> None:
        live = self._records[id]
        loc = _Loc(file.file_no, seq, type, offset, length, payload)
        if isinstance(live.updates, list):
            live.updates.append(loc)
        else:
            live.updates = [loc]
        file.ops += 1
        file.live += 1
        file.ids.append(id)
        file.last_seq = seq

    def _apply_delete(self, file: _DataFile, seq: int, id: int) -> None:
        live = self._records.pop(id)
        file.ops += 1
        file.last_seq = seq
        self._kill(live, seq)
        add_file = live.add.file_no
        if add_file != file.file_no:
            file.kills.setdefault(add_file, []).append((seq, id))
            self._files[add_file].killers.add(file.file_no)

    def _kill(self, live: _Live, seq: int) -> None:
        for loc in (live.add, *live.updates):
            target = self._files[loc.file_no]
            target.live -= 1
            target.killed_seq = seq

    # ----- cleanup (event loop thread) --------------------------------------------------
    def cleanup_wanted(self) -> bool:
        """Time for a cleanup, whatever the cleanup period says: `cleanup_bytes` were
        appended since the last one, or anything was and the last one is a second old.

        Recovery replays every file that is left, so a broker that is killed before its
        first cleanup period would otherwise replay its whole history at every start (issue
        13, defect 14); this bounds what a crash leaves to replay to about a second of
        writes, or `cleanup_bytes`, beyond the live records.
        """
        self.write_gathered()
        if self._waiting_for and self._writer.durable_seq >= self._waiting_for:
            return True  # what the last cleanup had to leave (not yet durable) can go now
        if not self._since_cleanup:
            return False
        return (self._since_cleanup >= self.cleanup_bytes
                or time.monotonic() - self._last_cleanup >= CLEANUP_AFTER_WRITES)

    def cleanup(self, *, compact: bool = True) -> CleanupReport:
        """Delete or archive spent files, compact sparse ones, then delete what that freed.

        `compact=False` is the cheap pass run every second under load: it removes spent
        files, rolls a spent current one, and compacts only files that are almost all spent
        (under LIGHT_COMPACT_RATIO live, such as a first file pinned by its address and
        queue records), whose copy costs next to nothing. Copying partly spent files there
        cost a tenth of the drain rate; the full pass runs at start-up and every
        cleanup-period.

        The file work runs on the calling thread, blocking it: for tools and tests. The
        broker uses `cleanup_in_thread`, which does the same steps in the same order.
        """
        self._check_no_cleanup()
        return run_inline(self._cleanup_steps(compact))

    async def cleanup_in_thread(self, *, compact: bool = True) -> CleanupReport:
        """`cleanup`, with its file work (reads, the compacted copy, fsyncs, unlinks) in the
        journal's cleanup thread while the loop goes on serving; the loop only updates the
        index between the steps. A cancelled caller stops waiting, not the cleanup: one
        stopped half-way would leave the index and the files disagreeing; `close` waits."""
        self._check_no_cleanup()
        if self._cleaner is None:
            self._cleaner = ThreadPoolExecutor(1, thread_name_prefix="pagemq-journal-cleanup")
        self._cleaning = asyncio.ensure_future(run_in_thread(self._cleanup_steps(compact), self._cleaner))
        return await asyncio.shield(self._cleaning)

    def _check_no_cleanup(self) -> None:
        if self._cleaning is not None and not self._cleaning.done():
            raise RuntimeError("a journal cleanup is already running")

    def _cleanup_steps(self, compact: bool) -> CleanupSteps:
        """One cleanup: index decisions here (loop), each piece of file work yielded as a
        callable over plain data and run by `run_inline` or `run_in_thread`."""
        self.write_gathered()
        self._since_cleanup = 0
        self._last_cleanup = time.monotonic()
        report = CleanupReport()
        stale, self._stale = self._stale, []
        self._retire_sparse_current()
        yield from self._retire_step([*stale, *self._take_spent()], report)
        # Not while a write batch waits for space: a compacted copy needs room it would take.
        plan = None if self.stalled else self._plan_compaction(
            self.compact_min_live_ratio if compact else LIGHT_COMPACT_RATIO)
        if plan is not None:
            written = cast("tuple[int, list[int]] | None",
                           (yield partial(compact_files, self._fileio, plan, report)))
            if written is not None:
                size, offsets = written
                # 4. the sources go (the directory fsynced after), then what that freed
                yield from self._retire_step(self._install(plan, size, offsets, report), report)
                yield from self._retire_step(self._take_spent(), report)
        self._note_unsettled()
        self._count_removals(report)
        return report

    def _retire_step(self, files: list[Retiree], report: CleanupReport
                     ) -> Generator[Callable[[], object], object, None]:
        if files:
            failed = yield partial(retire_files, self._fileio, self.directory,
                                   self.archive_directory, files, report)
            self._stale.extend(failed)  # type: ignore[arg-type]

    def _count_removals(self, report: CleanupReport) -> None:
        self._counters["files_deleted"] += report.deleted
        self._counters["files_archived"] += report.archived

    def _note_unsettled(self) -> None:
        """Files this cleanup would have removed or compacted but for writes not yet durable:
        the seq that must be durable first, so `cleanup_wanted` says when to come back."""
        self._waiting_for = max(
            (max(f.last_seq, f.killed_seq) for f in self._files.values()
             if f is not self._cur and not self._settled(f) and (not f.needed() or self._sparse(f))),
            default=0)

    def _retire_sparse_current(self) -> None:
        """Start a fresh file when the current one is big and mostly spent, so it can be
        removed or compacted like any other: compaction never touches the file being
        appended to, so without this a drained broker would keep its last file forever."""
        cur = self._cur
        if (cur is None or cur.size < IDLE_ROLL_BYTES or self._writer.error is not None
                or not self._sparse(cur)):
            return
        self._roll()

    # ----- compaction -------------------------------------------------------------------
    # Copy the live ops and needed DELETEs of sparse files into one new file. Crash-safe by
    # ordering (`compact_files`): the copy is written under a temp name and fsynced, renamed
    # into place and the directory fsynced, and only then are its sources retired (then the
    # directory is fsynced again). Its first record names the sources, so a load after a
    # crash between rename and retirement finishes the job, and a temp file left by a crash
    # before the rename is simply removed. Ops keep their seqs, so replay order is right
    # wherever the new file sits.
    def _plan_compaction(self, ratio: float) -> CompactionPlan | None:
        sources = self._pick_sparse(ratio)
        if not sources:
            return None
        file_no = self._next_file_no
        self._next_file_no += 1
        return CompactionPlan(file_no, self.directory, min(f.first_seq for f in sources),
                              {f.file_no: f.path for f in sources}, self._gather(sources),
                              self._next_seq)

    def _sparse(self, file: _DataFile, ratio: float | None = None) -> bool:
        """Few enough of its ops are still needed that copying them out is worth it."""
        return file.needed() < (self.compact_min_live_ratio if ratio is None else ratio) * file.ops

    def _pick_sparse(self, ratio: float) -> list[_DataFile]:
        """Files whose needed ops are under the ratio, oldest first, about one file's worth."""
        picked: list[_DataFile] = []
        planned = 0
        for file in sorted(self._files.values(), key=lambda f: f.file_no):
            needed = file.needed()
            if not needed or not self._sparse(file, ratio) or not self._settled(file):
                continue
            estimate = file.size * needed // file.ops
            if picked and planned + estimate > self.file_size:
                break
            picked.append(file)
            planned += estimate
        return picked

    def _gather(self, sources: list[_DataFile]) -> list[Entry]:
        """Live adds and updates in the sources, and DELETEs still shadowing other files.
        Only the records written to the sources are looked at (`_DataFile.ids`), not every
        live one: a few files' worth, most of it dead, against a backlog's worth."""
        numbers = {f.file_no for f in sources}
        entries: list[Entry] = []
        for id in set().union(*(f.ids for f in sources)):
            live = self._records.get(id)
            if live is None:
                continue
            for kind, loc in ((OpKind.ADD, live.add), *((OpKind.UPDATE, u) for u in live.updates)):
                if loc.file_no in numbers:
                    entries.append((loc.seq, kind, id, loc.type, loc.file_no, loc.offset, loc.length,
                                    0, loc))
        for file in sources:
            for target, kills in file.kills.items():
                if target not in numbers:
                    entries.extend((seq, OpKind.DELETE, id, 0, -1, 0, 0, target, None)
                                   for seq, id in kills)
        return entries

    def _install(self, plan: CompactionPlan, size: int, offsets: list[int],
                 report: CleanupReport) -> list[Retiree]:
        """Point the index at the compacted copy and let its sources go (returned, to be
        retired). The loop kept appending while the copy was written: a record deleted
        meanwhile has a dead copy, which its DELETE must now shadow (`_redirect_late_kills`)."""
        sources = [self._files[file_no] for file_no in sorted(plan.sources)]
        compacted = _DataFile(plan.file_no, self._path(plan.file_no), size, plan.base_seq)
        compacted.compacted_from = tuple(sorted(plan.sources))
        # late deletes of copied ops are durable only when these are
        compacted.killed_seq = max(source.killed_seq for source in sources)
        self._files[plan.file_no] = compacted
        for (seq, _kind, id, _type, _file_no, _offset, _length, target, loc), offset in zip(
                plan.entries, offsets, strict=True):
            compacted.ops += 1
            compacted.last_seq = seq
            if not isinstance(loc, _Loc):
                compacted.kills.setdefault(target, []).append((seq, id))
                self._files[target].killers.add(plan.file_no)
                continue
            loc.file_no, loc.offset = plan.file_no, offset
            live = self._records.get(id)
            if live is not None and (live.add is loc or any(u is loc for u in live.updates)):
                compacted.live += 1
                compacted.ids.append(id)
        retired: list[Retiree] = []
        for source in sources:
            self._redirect_late_kills(source, compacted, plan.late_seq)
            self._forget(source)
            retired.append((source.path, source.size, source.damaged))
        report.bytes_reclaimed -= size
        report.compacted_files += len(sources)
        report.compacted_records += len(plan.entries)
        self._counters["compactions"] += 1
        return retired

    def _redirect_late_kills(self, source: _DataFile, compacted: _DataFile, late_seq: int) -> None:
        """DELETEs appended while the copy was written killed ADDs in `source` that were
        copied: they shadow the copy now. A file's kills are in seq order, so the late ones
        are a tail."""
        for killer_no in source.killers:
            killer = self._files[killer_no]
            kills = killer.kills.get(source.file_no, [])
            cut = len(kills)
            while cut and kills[cut - 1][0] >= late_seq:
                cut -= 1
            if cut == len(kills):
                continue
            moved = killer.kills.setdefault(compacted.file_no, [])
            moved.extend(kills[cut:])
            moved.sort()
            del kills[cut:]
            compacted.killers.add(killer_no)

    def _settled(self, file: _DataFile) -> bool:
        """Not being appended to, and every op in it or killing it is durable."""
        durable = self._writer.durable_seq
        return file is not self._cur and file.last_seq <= durable and file.killed_seq <= durable

    def _take_spent(self) -> list[Retiree]:
        """Let go of every file that holds nothing needed (and whose last ops are durable),
        oldest first, including those that letting go of another one spends."""
        spent: list[Retiree] = []
        changed = True
        while changed:
            changed = False
            for file in sorted(self._files.values(), key=lambda f: f.file_no):
                if file.live == 0 and not file.kills and self._settled(file):
                    self._forget(file)
                    spent.append((file.path, file.size, file.damaged))
                    changed = True
        return spent

    def _forget(self, file: _DataFile) -> None:
        """Drop a file from the index; DELETEs elsewhere that only shadowed it stop mattering."""
        del self._files[file.file_no]
        for killer in file.killers:
            holder = self._files.get(killer)
            if holder is not None:
                holder.kills.pop(file.file_no, None)
        for target in file.kills:
            held = self._files.get(target)
            if held is not None:
                held.killers.discard(file.file_no)

    # ----- shutdown and introspection ---------------------------------------------------
    async def close(self) -> None:
        """Flush, stop the writer thread, close files. A failed journal closes quietly:
        its failure was logged and handed to every waiting future when it happened."""
        if self._closed:
            return
        self.write_gathered()
        self._closed = True
        if self._cleaning is not None:
            await asyncio.wait([self._cleaning])  # its failure, if any, was its caller's
        if self._cleaner is not None:
            self._cleaner.shutdown(wait=False)  # idle now; the thread ends by itself
        if self._writer.running:
            # A journal stalled for want of space would wait for room forever: stop() makes
            # the writer try once more, then fail what it still holds.
            flushed = self._writer.flush_future()
            # Its failure, if any, was logged where it happened: retrieved, not reported again.
            flushed.add_done_callback(lambda done: done.cancelled() or done.exception())
            while not flushed.done() and self._writer.stalled is None:
                await asyncio.wait([flushed], timeout=0.25)
        # ops handed in while the flush above was awaited: written before the writer stops
        # (stop() refuses more at once, so none can come after this)
        self.write_gathered()
        await self._writer.stop()

    def stats(self) -> dict[str, int]:
        self.write_gathered()
        return {
            "files": len(self._files),
            "bytes": sum(file.size for file in self._files.values()),
            "records_written": self._counters["records_written"],
            "flushes": self._writer.flushes,
            "batches": self._writer.batches,
            "pending_bytes": self._writer.pending_bytes,
            "live_records": len(self._records),
            "compactions": self._counters["compactions"],
            "files_deleted": self._counters["files_deleted"],
            "files_archived": self._counters["files_archived"],
        }

    def locate(self, id: int) -> tuple[Path, int] | None:
        """Where live record `id`'s ADD sits: file and offset of its payload."""
        self.write_gathered()
        live = self._records.get(id)
        if live is None:
            return None
        return self._path(live.add.file_no), live.add.offset

    def files(self) -> list[DataFileInfo]:
        """Per-file index summary, for `pagemq data print` and tests."""
        self.write_gathered()
        return [
            DataFileInfo(f.file_no, f.path, f.size, f.ops, f.live,
                         sum(len(e) for e in f.kills.values()), f.first_seq, f.last_seq,
                         f.compacted_from)
            for f in sorted(self._files.values(), key=lambda f: f.file_no)
        ]



def _damage_message(scan: rec.FileScan, damage: rec.Damage) -> str:
    where = (f"{scan.path.name}: damaged bytes at offset {damage.offset} ({damage.reason}): "
             f"{damage.length} bytes unreadable")
    if not damage.resumed:
        return f"{where} to the end of the file; the file is kept (set aside, never deleted)"
    lost = ""
    appended = scan.sources is None and not scan.header_damaged
    if appended and damage.next_seq is not None and damage.next_seq > damage.floor + 1:
        first, last = damage.floor + 1, damage.next_seq - 1
        lost = f"; ops seq {first}..{last} lost" if last > first else f"; op seq {first} lost"
    return (f"{where}, read on from offset {damage.end}{lost}; "
            "the file is kept (set aside, never deleted)")


class _Opened:
    """A data file being replayed: its scan state, and its ops read a batch at a time
    (`records.scan_ops`), so no more than a chunk of a file's ops is held beyond the live
    records' payloads."""

    __slots__ = ("at", "batches", "file", "file_no", "max_id", "max_seq", "rows", "scan")

    def __init__(self, file_no: int, scan: rec.FileScan, first: list[rec.OpRow] | None,
                 batches: Iterator[list[rec.OpRow]]) -> None:
        self.file_no, self.scan, self.batches = file_no, scan, batches
        self.rows: list[rec.OpRow] = first or []
        self.at = 0
        self.file: _DataFile
        self.max_id = self.max_seq = 0
        self._note(self.rows)

    def head(self) -> int | None:
        """The seq of the next op to replay (reading the next batch if need be); None at the end."""
        while self.at >= len(self.rows):
            rows = next(self.batches, None)
            if rows is None:
                return None
            self.rows, self.at = rows, 0
            self._note(rows)
        return self.rows[self.at][0]

    def position(self) -> tuple[int, int]:
        """(seq of the next op, file number): the order of the merge."""
        return self.rows[self.at][0], self.file_no

    def _note(self, rows: list[rec.OpRow]) -> None:
        if rows:  # seqs rise within a file: the batch's last is its highest
            self.max_seq = max(self.max_seq, rows[-1][0])
            self.max_id = max(self.max_id, max(map(itemgetter(2), rows)))

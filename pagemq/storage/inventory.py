"""What a stopped broker's data directory holds, read without changing a byte.

`pagemq data print` shows it (every address and queue with its messages, in the journal and
paged) and `pagemq data check` verifies it: every journal and page file is read whole
(header, framing, CRC, encoded messages), and the references between them are followed —
a message's queues exist, a cursor record names a page that exists and ordinals inside it.
Each finding names a file and, where there is one, an offset; a *problem* is something the
broker cannot read or that contradicts the rest, a *note* something a start handles by
itself (a torn tail after a crash, a stale cursor record, a summary to rebuild).

Reading goes through the same scanners recovery uses (`records.scan_file` via
`Journal.load(repair=False)`, `page_format.read_frames`), so what is found here is what a
start would find.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from pagemq.storage import records as rec
from pagemq.storage.api import CursorAck
from pagemq.storage.fileio import REAL_FILE_IO, FileIO
from pagemq.storage.journal import Journal, LiveRecord
from pagemq.storage.message_codec import CodecError, check_encoded
from pagemq.storage.message_store import (
    RecordType,
    acked_queue,
    cursor_record,
    decode_duplicate_ids,
    message_refs,
    page_tx_commit,
)
from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    PAGE_SUFFIX,
    SUMMARY_SUFFIX,
    FrameDamage,
    FrameError,
    PageSummaryRecord,
    decode_file_header,
    page_format_version,
    page_number,
    read_frames,
    summary_file_name,
)
from pagemq.storage.paging.page_recovery import unfinished_folder
from pagemq.storage.paging.page_writer import (
    ADDRESS_FILE,
    DAMAGED_SUFFIX,
    FOLDER_STAGING_SUFFIX,
    HIGH_WATER_FILE,
)

__all__ = ["AddressState", "DataState", "Finding", "PageState", "QueueState", "read_state"]


@dataclass(frozen=True, slots=True)
class Finding:
    problem: bool  # False: a note (something a start handles by itself)
    path: Path | None
    offset: int | None
    text: str

    def line(self, root: Path) -> str:
        where = ""
        if self.path is not None:
            try:
                where = str(self.path.relative_to(root))
            except ValueError:
                where = str(self.path)
            if self.offset is not None:
                where += f" at offset {self.offset}"
            where += ": "
        return f"{'problem' if self.problem else 'note'}: {where}{self.text}"


@dataclass(slots=True)
class QueueState:
    queue_id: int
    name: str
    address: str
    routing_type: str
    filter: str | None
    journal: int = 0  # persistent messages in the journal it has not acknowledged
    paged: int = 0  # persistent paged messages it has not acknowledged

    @property
    def messages(self) -> int:
        return self.journal + self.paged


@dataclass(slots=True)
class PageState:
    path: Path
    page_no: int
    size: int
    version: int
    ordinals: int  # records (ordinals) in the file, lost ones included
    records: int  # records readable
    persistent: int
    damage: list[FrameDamage]
    summary: str  # "ok", "none", "stale", "damaged"


@dataclass(slots=True)
class AddressState:
    name: str
    routing_type: str
    queues: list[QueueState] = field(default_factory=list)
    folder: Path | None = None
    pages: list[PageState] = field(default_factory=list)
    duplicate_ids: int = 0  # remembered `_AMQ_DUPL_ID`s (duplicate detection)

    @property
    def messages(self) -> int:
        return sum(queue.messages for queue in self.queues)


@dataclass(slots=True)
class DataState:
    data_dir: Path
    journal_dir: Path
    paging_dir: Path
    addresses: dict[str, AddressState] = field(default_factory=dict)
    queues: dict[int, QueueState] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    journal_files: int = 0
    journal_bytes: int = 0
    live_records: int = 0

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    def problem(self, path: Path | None, offset: int | None, text: str) -> None:
        self.findings.append(Finding(True, path, offset, text))

    def note(self, path: Path | None, offset: int | None, text: str) -> None:
        self.findings.append(Finding(False, path, offset, text))


@dataclass(slots=True)
class _Cursors:
    """The cursor records of the journal: acked ordinals and completed pages per queue."""

    acks: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    ack_records: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    complete: set[tuple[int, int]] = field(default_factory=set)
    # (address, transaction id) of every page transaction commit record
    tx_commits: set[tuple[str, int]] = field(default_factory=set)


def read_state(data_dir: Path, *, journal_dir: Path | None = None, paging_dir: Path | None = None,
               fileio: FileIO = REAL_FILE_IO) -> DataState:
    """Everything `print` shows and `check` judges. Reads only; safe on damaged files."""
    data_dir = Path(data_dir)
    state = DataState(data_dir, journal_dir or data_dir / "journal", paging_dir or data_dir / "paging")
    cursors = _read_journal(state, fileio)
    _read_paging(state, cursors, fileio)
    _check_cursor_references(state, cursors)
    return state


# ----- journal ---------------------------------------------------------------------------------


def _read_journal(state: DataState, fileio: FileIO) -> _Cursors:
    cursors = _Cursors()
    directory = state.journal_dir
    if not directory.is_dir():
        state.note(directory, None, "no journal directory (nothing was ever stored durably)")
        return cursors
    journal = Journal(directory, fileio=fileio)
    result = journal.load(repair=False)
    paths = fileio.list(directory, rec.FILE_SUFFIX)
    state.journal_files = len(paths)
    state.journal_bytes = sum(fileio.size(p) for p in paths)
    state.live_records = len(result.records)
    for report in result.damage:
        if report.kind == "torn tail":
            state.note(report.path, report.offset, f"torn tail of {report.length} bytes ({report.reason}): "
                       "what a crash leaves; the next start cuts it")
        elif report.kind == "empty file":
            state.note(report.path, 0, "file created but its header never written; the next start removes it")
        else:
            state.problem(report.path, report.offset, f"{report.kind}: {report.length} bytes unreadable "
                          f"({report.reason})")
    for path in fileio.list(directory, rec.TEMP_SUFFIX):
        state.note(path, None, "output of a compaction that did not finish; the next start removes it")
    for path in fileio.list(directory, rec.DAMAGED_SUFFIX):
        state.note(path, None, "a journal file set aside for holding damaged bytes; never read again")
    messages: list[LiveRecord] = []
    for record in result.records:
        _read_record(state, journal, record, messages, cursors)
    for record in messages:
        _count_message(state, journal, record)
    return cursors


def _read_record(state: DataState, journal: Journal, record: LiveRecord, messages: list[LiveRecord],
                 cursors: _Cursors) -> None:
    kind = record.type
    try:
        if kind == RecordType.ADDRESS:
            data = json.loads(record.payload)
            found = state.addresses.setdefault(data["name"], AddressState(data["name"], data["routing_type"]))
            found.routing_type = data["routing_type"]  # a duplicate-id record may have come first
        elif kind == RecordType.QUEUE:
            data = json.loads(record.payload)
            state.queues[record.id] = QueueState(record.id, data["name"], data["address"],
                                                 data["routing_type"], data.get("filter"))
        elif kind == RecordType.MESSAGE:
            messages.append(record)
        elif kind in (RecordType.CURSOR_ACK, RecordType.CURSOR_ACKS, RecordType.CURSOR_COMPLETE):
            cursor = cursor_record(record.id, kind, record.payload)
            key = (cursor.queue_id, cursor.page_no)
            if isinstance(cursor, CursorAck):
                cursors.acks.setdefault(key, set()).update(cursor.ordinals)
                cursors.ack_records.setdefault(key, []).append(record.id)
            else:
                cursors.complete.add(key)
        elif kind == RecordType.PAGE_TX_COMMIT:
            commit = page_tx_commit(record.id, record.payload)
            cursors.tx_commits.add((commit.address, commit.txid))
        elif kind == RecordType.DUPLICATE_IDS or kind == RecordType.DUPLICATE_ID:
            ids = decode_duplicate_ids(record.id, kind, record.payload, record.updates)
            found = state.addresses.setdefault(ids.address, AddressState(ids.address, "unknown"))
            found.duplicate_ids += max(0, len(ids.dup_ids) - ids.gone)
        else:
            _record_problem(state, journal, record, f"unknown record type {kind}")
    except (ValueError, KeyError, TypeError, struct.error, CodecError) as exc:
        _record_problem(state, journal, record, f"type-{kind} record {record.id} unreadable: {exc}")


def _record_problem(state: DataState, journal: Journal, record: LiveRecord, text: str) -> None:
    where = journal.locate(record.id)
    state.problem(where[0] if where else state.journal_dir, where[1] if where else None, text)


def _count_message(state: DataState, journal: Journal, record: LiveRecord) -> None:
    try:
        queue_ids, address, encoded = message_refs(record.payload)
        check_encoded(encoded)
        acked = {acked_queue(payload) for type, payload in record.updates if type == RecordType.ACK}
    except (ValueError, struct.error, CodecError) as exc:
        _record_problem(state, journal, record, f"message {record.id} unreadable: {exc} "
                        "(the broker refuses to start on it)")
        return
    for queue_id in queue_ids:
        if queue_id in acked:
            continue
        queue = state.queues.get(queue_id)
        if queue is None:
            _record_problem(state, journal, record, f"message {record.id} of address {address!r} is held "
                            f"for queue {queue_id}, which does not exist")
        else:
            queue.journal += 1


# ----- paging ----------------------------------------------------------------------------------


def _read_paging(state: DataState, cursors: _Cursors, fileio: FileIO) -> None:
    for queue in state.queues.values():
        address = state.addresses.setdefault(queue.address, AddressState(queue.address, queue.routing_type))
        address.queues.append(queue)
    root = state.paging_dir
    if not root.is_dir():
        return
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if unfinished_folder(folder):
            state.note(folder, None, "left by a page folder creation a crash interrupted (no page in "
                       "it); the next start removes it")
            continue
        if folder.name.endswith(FOLDER_STAGING_SUFFIX):
            state.problem(folder, None, "a page folder being created holds files its creation never "
                          "writes; the broker does not read it")
            continue
        try:
            name = (folder / ADDRESS_FILE).read_bytes().decode("utf-8", "surrogatepass")
        except (FileNotFoundError, UnicodeDecodeError) as exc:
            state.problem(folder, None, f"page folder without a readable {ADDRESS_FILE} ({exc}); not read")
            continue
        found = state.addresses.get(name)
        if found is None and not any(p.name.endswith(PAGE_SUFFIX) for p in folder.iterdir()):
            # What deleting an address that paged leaves (docs/http-api.md): nothing lost.
            state.note(folder, None, f"empty page folder of address {name!r}, which the journal "
                       "does not know (deleted): the broker keeps it for the name's return")
        elif found is None:
            state.problem(folder, None, f"page folder of address {name!r}, which the journal does not "
                          "know: the broker keeps it but never reads it")
        address = found if found is not None else AddressState(name, "?")
        address.folder = folder
        _read_folder(state, address, cursors, fileio)


def _read_folder(state: DataState, address: AddressState, cursors: _Cursors, fileio: FileIO) -> None:
    folder = address.folder
    assert folder is not None
    pages = sorted((p for p in folder.iterdir() if p.name.endswith(PAGE_SUFFIX)),
                   key=lambda p: page_number(p.name) or 0)
    for path in pages:
        page = _read_page(state, address, path, cursors, fileio)
        if page is not None:
            address.pages.append(page)
    present = {page_number(p.name) for p in pages}
    for path in sorted(folder.iterdir()):
        name = path.name
        if name.endswith(SUMMARY_SUFFIX) and page_number(name) not in present:
            _check_orphan_summary(state, address, path, cursors, fileio)
        elif name.endswith(".tmp"):
            state.note(path, None, "left by an interrupted write; the next start removes it")
        elif name.endswith(DAMAGED_SUFFIX):
            state.note(path, None, "a page set aside for holding damaged bytes; never read again")
        elif not name.endswith((PAGE_SUFFIX, SUMMARY_SUFFIX)) and name not in (ADDRESS_FILE, HIGH_WATER_FILE):
            state.note(path, None, "a file the broker does not use")


def _check_orphan_summary(state: DataState, address: AddressState, path: Path, cursors: _Cursors,
                          fileio: FileIO) -> None:
    """A summary whose page is gone. The broker deletes a page, then its summary, and only
    then the cursor records that acknowledged its messages: after a crash between the two
    deletions those records are still in the journal. A page whose persistent messages the
    journal does not record as acknowledged by every queue that still exists was removed
    some other way (by hand): those messages are lost, and the next start drops them."""
    try:
        summary = PageSummaryRecord.decode(fileio.read_bytes(path))
    except (OSError, FrameError):
        state.note(path, None, "summary (unreadable) of a page that is gone; the next start removes it")
        return
    page_no = summary.page_no
    lost = 0
    for queue_id, persistent in summary.queue_persistent.items():
        queue = state.queues.get(queue_id)
        if not persistent or queue is None or queue.address != address.name:
            continue
        if (queue_id, page_no) in cursors.complete:
            continue
        lost += max(0, persistent - len(cursors.acks.get((queue_id, page_no), ())))
    if lost:
        state.problem(path, None, f"page {page_no} of address {address.name!r} is gone, but its summary "
                      f"says it held {summary.persistent_count} persistent message(s) and the journal "
                      f"records {lost} of them as not acknowledged: lost (was the page file removed?); "
                      "the next start drops them")
    else:
        state.note(path, None, "summary of a page that is gone (its messages were all acknowledged); "
                   "the next start removes it")


def _read_page(state: DataState, address: AddressState, path: Path, cursors: _Cursors,
               fileio: FileIO) -> PageState | None:
    page_no = page_number(path.name)
    data = fileio.read_bytes(path)
    if page_no is None:
        return None
    recorded = _recorded_size(path, page_no, fileio)
    shrunk = recorded is not None and recorded > len(data)
    try:
        if decode_file_header(data) != page_no:
            raise FrameError(f"header names page {decode_file_header(data)}")
        version = page_format_version(data)
    except FrameError as exc:
        if len(data) < FILE_HEADER.size and not shrunk:
            state.note(path, 0, f"file header torn ({exc}); the next start removes the page")
        elif len(data) < FILE_HEADER.size:
            state.problem(path, 0, f"the page is {len(data)} bytes, its summary recorded {recorded} when it "
                          "was closed: its records were lost to damage, not to a crash")
        else:
            state.problem(path, 0, f"unreadable file header: {exc}")
        return None
    damage: list[FrameDamage] = []
    page = PageState(path, page_no, len(data), version, 0, 0, 0, damage, "none")
    queue_ids = {q.queue_id for q in address.queues}
    _count_records(state, page, path, data, queue_ids, cursors, address.name)
    if recorded is not None and shrunk:
        state.problem(path, len(data), f"the page is {recorded - len(data)} bytes shorter than its summary "
                      f"recorded when it was closed ({recorded}): its end was lost to damage, not to a crash")
    for found in damage:
        lost = "" if found.lost is None else f", {found.lost} record(s) lost"
        if found.torn and not shrunk:
            state.note(path, found.offset, f"torn tail of {found.length} bytes ({found.reason}): what a "
                       "crash leaves; the next start cuts it")
        else:
            state.problem(path, found.offset, f"damaged frame: {found.length} bytes unreadable "
                          f"({found.reason}){lost}")
    page.summary = _check_summary(state, page, fileio)
    return page


def _count_records(state: DataState, page: PageState, path: Path, data: bytes, queue_ids: set[int],
                   cursors: _Cursors, address: str) -> None:
    """Records, persistent ones, and each queue's unacknowledged ones; a transactional batch
    whose commit record is not in the journal counts for no queue."""
    page_no = page.page_no
    uncommitted: set[int] = set()
    frames = read_frames(data, FILE_HEADER.size, len(data), version=page.version, damage=page.damage)
    for offset, _size, first, entries in frames:
        txid = entries[0].txid
        if txid and (address, txid) not in cursors.tx_commits and txid not in uncommitted:
            uncommitted.add(txid)
            state.note(path, offset, f"{len(entries)} record(s) of transaction {txid}, whose commit never "
                       "reached the journal: not delivered, the next start drops them")
        for ordinal, entry in enumerate(entries, first):
            page.records += 1
            page.ordinals = ordinal + 1
            if not entry.persistent:
                continue  # not kept across a restart
            page.persistent += 1
            try:
                check_encoded(entry.message)
            except CodecError as exc:
                state.problem(path, offset, f"paged message {entry.message_id} unreadable: {exc}")
            if txid in uncommitted:
                continue
            for queue_id in entry.queue_ids:
                if queue_id not in queue_ids or (queue_id, page_no) in cursors.complete:
                    continue
                if ordinal not in cursors.acks.get((queue_id, page_no), ()):
                    state.queues[queue_id].paged += 1


def _recorded_size(path: Path, page_no: int, fileio: FileIO) -> int | None:
    """The file size a readable summary of this very page records, if there is one."""
    try:
        summary = PageSummaryRecord.decode(fileio.read_bytes(path.with_name(summary_file_name(page_no))))
    except (FileNotFoundError, FrameError):
        return None
    return summary.file_size if summary.page_no == page_no else None


def _check_summary(state: DataState, page: PageState, fileio: FileIO) -> str:
    path = page.path.with_name(summary_file_name(page.page_no))
    if not path.exists():
        return "none"
    try:
        summary = PageSummaryRecord.decode(fileio.read_bytes(path))
    except FrameError as exc:
        state.note(path, None, f"summary unreadable ({exc}); the next start rebuilds it from the page")
        return "damaged"
    if summary.page_no != page.page_no or summary.file_size != page.size:
        state.note(path, None, f"summary describes page {summary.page_no} of {summary.file_size} bytes, the "
                   f"page is {page.size} bytes; the next start rebuilds it")
        return "stale"
    if not page.damage and (summary.count, summary.persistent_count) != (page.ordinals, page.persistent):
        state.problem(path, None, f"summary counts {summary.count} records ({summary.persistent_count} "
                      f"persistent), the page holds {page.ordinals} ({page.persistent})")
    return "ok"


def _check_cursor_references(state: DataState, cursors: _Cursors) -> None:
    pages: dict[tuple[str, int], PageState] = {}
    for address in state.addresses.values():
        for known in address.pages:
            pages[address.name, known.page_no] = known
    for queue_id, page_no in sorted({*cursors.acks, *cursors.complete}):
        queue = state.queues.get(queue_id)
        if queue is None:
            state.note(state.journal_dir, None, f"cursor records of queue {queue_id}, which does not exist, "
                       f"for page {page_no}")
            continue
        page = pages.get((queue.address, page_no))
        if page is None:
            state.note(state.journal_dir, None, f"cursor records of queue {queue.name!r} for page {page_no} "
                       f"of address {queue.address!r}, which is gone (a crash between the page's "
                       "deletion and theirs); the next start deletes them")
            continue
        beyond = sorted(o for o in cursors.acks.get((queue_id, page_no), ()) if o >= page.ordinals)
        if beyond:
            state.problem(page.path, None, f"queue {queue.name!r} acknowledged ordinals {beyond[:5]} of "
                          f"this page, which holds {page.ordinals} records")

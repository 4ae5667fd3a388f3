"""Journal byte layouts: the only module that packs or unpacks journal bytes.

Every byte is described in docs/formats/journal.md; change both together (a golden test
compares an encoded record with the hex printed there). The design follows Artemis'
journal (`JournalImpl`, `dataformat/JournalAddRecord` etc.: one codec per record kind, a
kind byte that is never reused) and ZODB's `FileStorage/format.py` (the layout is written
down next to the code). Unlike Artemis, whose records end in a size check, each record
here ends in a CRC32 over header and payload, so a torn or flipped byte is detected.

`scan_file` reads a data file through a `FileIO` in bounded chunks and yields its records
in order; at a damaged record it notes where and why and resynchronises on the next valid
record, so damage costs the damaged bytes only. `pagemq data print` and `pagemq data check`
read files through it; recovery (`journal.py`) through `scan_ops`, the same scan yielding
ops, which reads runs of plain single-op records (by far most of a journal) in one tight
loop, with the same checks, and leaves everything else to the record-by-record path.
"""

from __future__ import annotations

import enum
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from pagemq.storage.fileio import FileIO

MAGIC = b"PGMQJRNL"
FORMAT_VERSION = 1
FILE_SUFFIX = ".jnl"
TEMP_SUFFIX = ".jnl.cmp"
DAMAGED_SUFFIX = ".jnl.damaged"  # a spent file that held damaged bytes, set aside instead of deleted
_NAME_PREFIX = "pagemq-"
_NAME_DIGITS = 10

# magic, format version, flags (reserved, 0), file number, base seq, CRC32 of bytes 0..27
FILE_HEADER = struct.Struct("<8sHHQQI")
assert FILE_HEADER.size == 32
# kind, payload length, seq, id, type — followed by the payload, then CRC32 (RECORD_CRC)
RECORD_HEADER = struct.Struct("<BIQQH")
assert RECORD_HEADER.size == 23
RECORD_CRC = struct.Struct("<I")
assert RECORD_CRC.size == 4
RECORD_OVERHEAD = RECORD_HEADER.size + RECORD_CRC.size
# one operation inside a TRANSACTION payload: kind, id, type, payload length
OP_HEADER = struct.Struct("<BQHI")
assert OP_HEADER.size == 15
COUNT = struct.Struct("<I")
assert COUNT.size == 4
FILE_NUMBER = struct.Struct("<Q")
assert FILE_NUMBER.size == 8

MAX_TYPE = 0xFFFF
MAX_ID = 0xFFFF_FFFF_FFFF_FFFF
_SCAN_CHUNK = 4 * 1024 * 1024


class RecordKind(enum.IntEnum):
    """The first byte of every record. Never reuse a value; add new ones at the end."""

    ADD = 1
    UPDATE = 2
    DELETE = 3
    TRANSACTION = 4
    COMPACTED = 5


class OpKind(enum.IntEnum):
    """What one operation does; the values equal the matching `RecordKind`."""

    ADD = 1
    UPDATE = 2
    DELETE = 3


class RecordError(ValueError):
    """Bytes that are not a valid record; `offset` is where the bad record starts."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.reason = message
        self.offset = offset


class TornRecord(RecordError):
    """The data ends inside a record: what an interrupted append leaves behind."""


class CorruptRecord(RecordError):
    """A complete-looking record whose bytes are wrong (bad CRC, unknown kind, bad seq)."""


class UnsupportedVersion(CorruptRecord):
    """A file written by another format version: not damage, not readable here."""


_SUFFIXES = (FILE_SUFFIX, TEMP_SUFFIX, DAMAGED_SUFFIX)


def file_name(file_no: int) -> str:
    return f"{_NAME_PREFIX}{file_no:0{_NAME_DIGITS}d}{FILE_SUFFIX}"


def temp_name(file_no: int) -> str:
    return f"{_NAME_PREFIX}{file_no:0{_NAME_DIGITS}d}{TEMP_SUFFIX}"


def parse_file_number(name: str) -> int | None:
    """Zero-padded numbers make name order equal number order; None for a foreign name."""
    digits = name[len(_NAME_PREFIX):len(_NAME_PREFIX) + _NAME_DIGITS]
    rest = name[len(_NAME_PREFIX) + _NAME_DIGITS:]
    if not name.startswith(_NAME_PREFIX) or not digits.isdigit() or rest not in _SUFFIXES:
        return None
    return int(digits)


def check_fields(id: int, type: int) -> None:
    if not 0 <= id <= MAX_ID:
        raise ValueError(f"record id {id} is outside 0..2**64-1")
    if not 0 <= type <= MAX_TYPE:
        raise ValueError(f"record type {type} is outside 0..65535")


def encode_op(kind: OpKind, seq: int, id: int, type: int, payload: bytes | memoryview) -> bytes:
    """One ADD, UPDATE or DELETE record (an op kind equals its record kind). The journal's
    append path calls this directly rather than building a record object to encode."""
    check_fields(id, type)
    return _frame(kind, seq, id, type, payload)


def frame_op(kind: OpKind, seq: int, id: int, type: int, payload: bytes | memoryview) -> bytes:
    """`encode_op` of fields already checked (`check_fields`): the journal checks an op
    when it is handed in and frames it when the loop turn's ops are written."""
    return _frame(kind, seq, id, type, payload)


def _frame(kind: int, seq: int, id: int, type: int, payload: bytes | memoryview) -> bytes:
    header = RECORD_HEADER.pack(kind, len(payload), seq, id, type)
    crc = zlib.crc32(payload, zlib.crc32(header))
    return b"".join((header, payload, RECORD_CRC.pack(crc)))


@dataclass(frozen=True, slots=True)
class FileHeader:
    """Starts every data file; `base_seq` is at or below every seq the file holds."""

    file_no: int
    base_seq: int
    version: int = FORMAT_VERSION

    def encode(self) -> bytes:
        head = FILE_HEADER.pack(MAGIC, self.version, 0, self.file_no, self.base_seq, 0)
        body = head[:FILE_HEADER.size - RECORD_CRC.size]
        return body + RECORD_CRC.pack(zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes | memoryview) -> FileHeader:
        if len(data) < FILE_HEADER.size:
            raise TornRecord(f"file header needs {FILE_HEADER.size} bytes, file has {len(data)}", 0)
        magic, version, _flags, file_no, base_seq, crc = FILE_HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise CorruptRecord(f"bad file magic {magic!r}", 0)
        if zlib.crc32(data[:FILE_HEADER.size - RECORD_CRC.size]) != crc:
            raise CorruptRecord("bad file header CRC", 0)
        if version != FORMAT_VERSION:
            raise UnsupportedVersion(f"unsupported format version {version}", 0)
        return cls(file_no, base_seq, version)


@dataclass(frozen=True, slots=True)
class AddRecord:
    seq: int
    id: int
    type: int
    payload: bytes

    def encode(self) -> bytes:
        return encode_op(OpKind.ADD, self.seq, self.id, self.type, self.payload)


@dataclass(frozen=True, slots=True)
class UpdateRecord:
    seq: int
    id: int
    type: int
    payload: bytes

    def encode(self) -> bytes:
        return encode_op(OpKind.UPDATE, self.seq, self.id, self.type, self.payload)


@dataclass(frozen=True, slots=True)
class DeleteRecord:
    seq: int
    id: int

    def encode(self) -> bytes:
        return encode_op(OpKind.DELETE, self.seq, self.id, 0, b"")


@dataclass(frozen=True, slots=True)
class TxOp:
    """One operation of a transaction; DELETE carries type 0 and an empty payload."""

    kind: OpKind
    id: int
    type: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """All-or-nothing: one CRC covers every op. Op i has seq `seq + i`."""

    seq: int
    ops: tuple[TxOp, ...]

    def encode(self) -> bytes:
        return encode_transaction(self.seq, [(op.kind, op.id, op.type, op.payload) for op in self.ops])[0]

    def payload_offsets(self) -> list[int]:
        """Where each op's payload starts, relative to the record's first byte (the recovery
        scan asks this of every transaction record: counted, not encoded)."""
        offsets = []
        position = RECORD_HEADER.size + COUNT.size
        for op in self.ops:
            position += OP_HEADER.size
            offsets.append(position)
            position += len(op.payload)
        return offsets

    @staticmethod
    def decode_ops(payload: bytes, offset: int) -> tuple[TxOp, ...]:
        if len(payload) < COUNT.size:
            raise CorruptRecord("transaction payload shorter than its op count", offset)
        (count,) = COUNT.unpack_from(payload, 0)
        position = COUNT.size
        ops = []
        for _ in range(count):
            if position + OP_HEADER.size > len(payload):
                raise CorruptRecord("transaction op header overruns the record", offset)
            kind, id, type, length = OP_HEADER.unpack_from(payload, position)
            position += OP_HEADER.size
            if kind not in _OP_KINDS or position + length > len(payload):
                raise CorruptRecord(f"bad transaction op (kind {kind}, length {length})", offset)
            ops.append(TxOp(OpKind(kind), id, type, payload[position:position + length]))
            position += length
        if position != len(payload):
            raise CorruptRecord("transaction payload has trailing bytes", offset)
        return tuple(ops)


def encode_transaction(seq: int, ops: Sequence[tuple[int, int, int, bytes]]) -> tuple[bytes, list[int]]:
    """A TRANSACTION record of (kind, id, type, payload) ops (a DELETE's type and payload are
    written as 0 and empty), and where each op's payload starts in it: what
    `TransactionRecord(...).encode()` makes, without a `TxOp` per op (a COMMIT of 1,000
    held messages writes 1,000 ops and more). ValueError for a bad kind, id or type."""
    parts = [COUNT.pack(len(ops))]
    offsets = []
    position = RECORD_HEADER.size + COUNT.size
    pack = OP_HEADER.pack
    header = OP_HEADER.size
    for kind, id, type, payload in ops:
        if kind == _DELETE:
            type, payload = 0, b""
        elif kind not in _OP_KINDS:
            raise ValueError(f"op kind {kind!r} is not ADD, UPDATE or DELETE")
        if not (0 <= id <= MAX_ID and 0 <= type <= MAX_TYPE):
            check_fields(id, type)
        parts.append(pack(kind, id, type, len(payload)))
        parts.append(payload)
        position += header
        offsets.append(position)
        position += len(payload)
    return _frame(RecordKind.TRANSACTION, seq, 0, 0, b"".join(parts)), offsets


def encode_deletes(seq: int, ids: Sequence[int]) -> bytes:
    """`TransactionRecord(seq, DELETE of each id).encode()`, without an object per op: the
    journal writes a loop turn's ACKs this way (see `Journal.delete`)."""
    delete = OP_HEADER.pack
    kind = OpKind.DELETE
    payload = b"".join([COUNT.pack(len(ids)), *[delete(kind, id, 0, 0) for id in ids]])
    return _frame(RecordKind.TRANSACTION, seq, 0, 0, payload)


@dataclass(frozen=True, slots=True)
class CompactedRecord:
    """First record of a compacted file: the files it replaces (seq 0, id 0, type 0)."""

    sources: tuple[int, ...]

    def encode(self) -> bytes:
        payload = COUNT.pack(len(self.sources)) + b"".join(FILE_NUMBER.pack(n) for n in self.sources)
        return _frame(RecordKind.COMPACTED, 0, 0, 0, payload)

    @staticmethod
    def decode_sources(payload: bytes, offset: int) -> tuple[int, ...]:
        if len(payload) < COUNT.size:
            raise CorruptRecord("compaction marker shorter than its count", offset)
        (count,) = COUNT.unpack_from(payload, 0)
        if len(payload) != COUNT.size + count * FILE_NUMBER.size:
            raise CorruptRecord("compaction marker length does not match its count", offset)
        return tuple(FILE_NUMBER.unpack_from(payload, COUNT.size + i * FILE_NUMBER.size)[0]
                     for i in range(count))


Record = AddRecord | UpdateRecord | DeleteRecord | TransactionRecord | CompactedRecord
_OP_KINDS = frozenset(int(k) for k in OpKind)
_DELETE = int(OpKind.DELETE)
_KINDS = frozenset(int(k) for k in RecordKind)
_DATA_KINDS = _OP_KINDS | {int(RecordKind.TRANSACTION)}
_SEQ_PROBE_WINDOW = 1 << 40


def decode_record(data: bytes | memoryview, offset: int) -> tuple[Record, int]:
    """Decode the record at `offset`; returns it and the offset just past it."""
    if offset + RECORD_HEADER.size > len(data):
        raise TornRecord(f"record header cut short ({len(data) - offset} bytes)", offset)
    kind, length, seq, id, type = RECORD_HEADER.unpack_from(data, offset)
    if kind not in _KINDS:
        raise CorruptRecord(f"unknown record kind {kind}", offset)
    end = offset + RECORD_OVERHEAD + length
    if end > len(data):
        raise TornRecord(f"record of {RECORD_OVERHEAD + length} bytes cut short "
                         f"({len(data) - offset} bytes)", offset)
    body_end = end - RECORD_CRC.size
    (crc,) = RECORD_CRC.unpack_from(data, body_end)
    if zlib.crc32(memoryview(data)[offset:body_end]) != crc:
        raise CorruptRecord("bad record CRC", offset)
    payload = bytes(data[offset + RECORD_HEADER.size:body_end])
    return _build(RecordKind(kind), seq, id, type, payload, offset), end


def _build(kind: RecordKind, seq: int, id: int, type: int, payload: bytes, offset: int) -> Record:
    if kind is RecordKind.ADD:
        return AddRecord(seq, id, type, payload)
    if kind is RecordKind.UPDATE:
        return UpdateRecord(seq, id, type, payload)
    if kind is RecordKind.DELETE:
        return DeleteRecord(seq, id)
    if kind is RecordKind.TRANSACTION:
        return TransactionRecord(seq, TransactionRecord.decode_ops(payload, offset))
    return CompactedRecord(CompactedRecord.decode_sources(payload, offset))


class ScannedOp(NamedTuple):
    """One add/update/delete as replay sees it, whether framed alone or in a transaction.
    (A named tuple: recovery makes one per op, and a tuple is the cheapest to make.)"""

    seq: int
    kind: OpKind
    id: int
    type: int
    payload: bytes
    payload_offset: int  # in the file, so compaction can re-read the payload


# A ScannedOp's fields as a plain tuple: `scan_ops` makes one per op of a plain record, and a
# plain tuple costs a third of a named one (recovery's hot loop). A ScannedOp is one too.
OpRow = tuple[int, OpKind, int, int, bytes, int]
_OP_BY_KIND: tuple[OpKind | None, ...] = (None, OpKind.ADD, OpKind.UPDATE, OpKind.DELETE)


def record_ops(record: Record, offset: int) -> list[ScannedOp]:
    """Flatten a record at file offset `offset` into the ops it carries (none for a marker)."""
    kind = type(record)
    if kind is AddRecord:  # most records: no isinstance chain
        add: AddRecord = record  # type: ignore[assignment]
        return [ScannedOp(add.seq, OpKind.ADD, add.id, add.type, add.payload, offset + RECORD_HEADER.size)]
    if kind is DeleteRecord:
        delete: DeleteRecord = record  # type: ignore[assignment]
        return [ScannedOp(delete.seq, OpKind.DELETE, delete.id, 0, b"", offset + RECORD_HEADER.size)]
    if isinstance(record, AddRecord | UpdateRecord):
        op = OpKind.ADD if isinstance(record, AddRecord) else OpKind.UPDATE
        return [ScannedOp(record.seq, op, record.id, record.type, record.payload,
                          offset + RECORD_HEADER.size)]
    if isinstance(record, DeleteRecord):
        return [ScannedOp(record.seq, OpKind.DELETE, record.id, 0, b"", offset + RECORD_HEADER.size)]
    if isinstance(record, TransactionRecord):
        return [ScannedOp(record.seq + i, op.kind, op.id, op.type, op.payload, offset + rel)
                for i, (op, rel) in enumerate(zip(record.ops, record.payload_offsets(), strict=True))]
    return []


def last_seq(record: Record) -> int:
    """The highest op seq a record uses; the next record must start above it."""
    if isinstance(record, TransactionRecord):
        return record.seq + max(len(record.ops), 1) - 1
    if isinstance(record, CompactedRecord):
        return 0
    return record.seq


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes of a data file from which no record could be read.

    `offset` is where the first bad record starts; reading resumed at `end` (a valid record
    starts there) when `resumed`, otherwise the damage runs to the end of the file. `floor`
    is the last seq read before it and `next_seq` the first seq read after it, so for an
    appended file (whose seqs are consecutive) the ops lost are `floor + 1 .. next_seq - 1`.
    """

    offset: int
    end: int
    reason: str
    resumed: bool
    floor: int = 0
    next_seq: int | None = None

    @property
    def length(self) -> int:
        return self.end - self.offset


@dataclass(slots=True)
class FileScan:
    """What `scan_file` found: the header, the damaged stretches, and where good data ends."""

    path: Path
    size: int
    header: FileHeader | None = None
    good_end: int = 0  # end of the last valid record (or of the header)
    error: RecordError | None = None  # the first failure met, if any
    damage: list[Damage] = field(default_factory=list)
    header_damaged: bool = False  # header unreadable; records were found after it anyway
    sources: tuple[int, ...] | None = None  # set when the file is a compaction result

    @property
    def tail(self) -> Damage | None:
        """Damage that runs to the end of the file with nothing valid after it."""
        return self.damage[-1] if self.damage and not self.damage[-1].resumed else None

    @property
    def resumed_damage(self) -> list[Damage]:
        """Damage with valid records after it (never what an interrupted append leaves)."""
        return [d for d in self.damage if d.resumed]

    @property
    def torn(self) -> bool:
        """Only a torn tail: the file ends in bytes nothing valid follows, and has no other
        damage. What an interrupted append leaves, not rot."""
        return self.tail is not None and len(self.damage) == 1 and not self.header_damaged


def scan_file(fileio: FileIO, path: Path, scan: FileScan, *,
              file_no: int | None = None) -> Iterator[tuple[int, Record]]:
    """Yield (offset, record) in file order, reading past damage (`_scan`)."""
    return _scan(fileio, path, scan, file_no, runs=False)  # type: ignore[return-value]


def scan_ops(fileio: FileIO, path: Path, scan: FileScan, *,
             file_no: int | None = None) -> Iterator[list[OpRow]]:
    """The ops of a data file in file order, in batches (some may be empty): what
    `scan_file` yields flattened by `record_ops`, found by the same scan with the same
    checks. A run of plain ADD, UPDATE and DELETE records inside one chunk comes as one
    batch with no record object made (`_ChunkReader.plain_ops`)."""
    for offset, found in _scan(fileio, path, scan, file_no, runs=True):
        yield found if type(found) is list else record_ops(found, offset)  # type: ignore[misc,arg-type]


def _scan(fileio: FileIO, path: Path, scan: FileScan, file_no: int | None, *,
          runs: bool) -> Iterator[tuple[int, Record | list[OpRow]]]:
    """Yield (offset, record) in file order, reading past damage; with `runs`, also
    (offset after, ops) for each run of plain records read by `plain_ops`.

    Steps: (1) read and check the file header; if it is damaged (and `file_no`, from the
    file name, is given) look for records after it anyway; (2) read records in turn, each
    whole and CRC-checked, its seq above the previous record's; (3) at a bad record note
    the damage and resynchronise: take the next offset where a valid record starts (see
    `_ChunkReader.resync`) and go on from there. The damage ends the scan only when nothing
    valid follows it: that is what a torn tail looks like, and only then may recovery cut.
    """
    reader = _ChunkReader(fileio, path, scan.size)
    offset = scan.good_end = FILE_HEADER.size
    try:
        scan.header = FileHeader.decode(reader.read(0, FILE_HEADER.size))
    except UnsupportedVersion as exc:
        scan.error = exc
        return
    except RecordError as exc:
        scan.error = exc
        if file_no is None or isinstance(exc, TornRecord):
            return
        # A damaged header: records may follow it (a compaction marker only right after it).
        resume = FILE_HEADER.size if reader.intact(FILE_HEADER.size) else reader.resync(0, 0, tight=False)
        scan.damage.append(Damage(0, resume if resume is not None else scan.size, exc.reason,
                                  resume is not None))
        if resume is None:
            return
        scan.header, scan.header_damaged = FileHeader(file_no, 0), True
        offset = resume
    floor = scan.header.base_seq - 1
    while offset < scan.size:
        if runs:
            ops, offset, floor = reader.plain_ops(offset, floor)
            if ops:
                scan.good_end = offset
                yield offset, ops
                continue
        try:
            record, end = reader.record(offset)
            floor = _check_order(record, offset, floor, scan)
        except RecordError as exc:
            if scan.error is None:
                scan.error = exc
            tight = scan.sources is None and not scan.header_damaged
            resume = reader.resync(offset, floor, tight=tight)
            next_seq = reader.seq_at(resume) if resume is not None else None
            scan.damage.append(Damage(offset, resume if resume is not None else scan.size,
                                      exc.reason, resume is not None, floor, next_seq))
            if resume is None:
                return
            offset = resume
            continue
        yield offset, record
        offset = scan.good_end = end


def _check_order(record: Record, offset: int, floor: int, scan: FileScan) -> int:
    """Seqs rise strictly within a file; a compaction marker may only come first."""
    if isinstance(record, CompactedRecord):
        if offset != FILE_HEADER.size:
            raise CorruptRecord("compaction marker after the first record", offset)
        scan.sources = record.sources
        return floor
    if record.seq <= floor:
        raise CorruptRecord(f"seq {record.seq} not above previous {floor}", offset)
    return last_seq(record)


_LENGTH = struct.Struct("<I")
_KIND_BYTE = re.compile(b"[" + bytes(sorted(_DATA_KINDS)) + b"]")
_MIN_OP_BYTES = OP_HEADER.size  # the smallest op: a DELETE inside a transaction
_CHAIN = 2  # records that must follow a candidate found by scanning (or the file must end)
_PLAUSIBLE_GAP = 1 << 20


class _ChunkReader:
    """Reads a file through FileIO in chunks so a 32 MiB file never sits in memory twice."""

    def __init__(self, fileio: FileIO, path: Path, size: int) -> None:
        self._fileio = fileio
        self._path = path
        self._size = size
        self._start = 0
        self._buf = b""
        self._view = memoryview(self._buf)

    def read(self, offset: int, length: int) -> memoryview:
        """A view into the current chunk (no copy); re-reads when the range is outside it."""
        end = min(offset + length, self._size)
        if offset < self._start or end > self._start + len(self._buf):
            want = max(end - offset, _SCAN_CHUNK)
            self._buf = self._fileio.read_range(self._path, offset, want)
            self._view = memoryview(self._buf)
            self._start = offset
        return self._view[offset - self._start:end - self._start]

    def record(self, offset: int) -> tuple[Record, int]:
        at = offset - self._start
        buf = self._buf
        if at >= 0 and at + RECORD_HEADER.size <= len(buf):  # the common case: in this chunk
            length = _LENGTH.unpack_from(buf, at + 1)[0]
            end = at + RECORD_OVERHEAD + length
            if end <= len(buf):
                try:
                    record, _ = decode_record(self._view[at:end], 0)
                except RecordError as exc:
                    raise type(exc)(exc.reason, offset) from None
                return record, offset + RECORD_OVERHEAD + length
        head = self.read(offset, RECORD_HEADER.size)
        if len(head) < RECORD_HEADER.size:
            raise TornRecord(f"record header cut short ({len(head)} bytes)", offset)
        length = RECORD_HEADER.unpack_from(head, 0)[1]
        if offset + RECORD_OVERHEAD + length > self._size:
            raise TornRecord(f"record of {RECORD_OVERHEAD + length} bytes cut short "
                             f"({self._size - offset} bytes)", offset)
        try:
            record, end = decode_record(self.read(offset, RECORD_OVERHEAD + length), 0)
        except RecordError as exc:  # re-anchor the offset from the chunk to the file
            raise type(exc)(exc.reason, offset) from None
        return record, offset + end

    def plain_ops(self, offset: int, floor: int) -> tuple[list[OpRow], int, int]:
        """(ops, offset after them, their last seq) of the ADD, UPDATE and DELETE records
        that follow `offset` wholly inside the current chunk, each with a good CRC and a
        seq above the previous one; stops before the first record that is anything else
        (a transaction, a compaction marker, damage, the chunk's end), which `record`
        then reads (and, if it is damage, reports). The hot loop of recovery: one header
        unpack, one CRC and one payload copy per record, nothing else made but the op."""
        buf = self._buf
        start = self._start
        at = offset - start
        if at < 0:
            return [], offset, floor
        ops: list[OpRow] = []
        append = ops.append
        unpack_header = RECORD_HEADER.unpack_from
        unpack_crc = RECORD_CRC.unpack_from
        crc32 = zlib.crc32
        kinds = _OP_BY_KIND
        view = self._view
        header_size = RECORD_HEADER.size
        last_header = len(buf) - header_size
        while at <= last_header:
            kind, length, seq, id, type = unpack_header(buf, at)
            if not 0 < kind < 4 or seq <= floor:
                break
            body_end = at + header_size + length
            if body_end + 4 > len(buf) or crc32(view[at:body_end]) != unpack_crc(buf, body_end)[0]:
                break
            if kind == 3:  # a DELETE: type and payload are not read (`DeleteRecord`)
                append((seq, OpKind.DELETE, id, 0, b"", start + at + header_size))
            else:
                append((seq, kinds[kind], id, type, buf[at + header_size:body_end],
                        start + at + header_size))
            floor = seq
            at = body_end + 4
        return ops, start + at, floor

    def intact(self, offset: int) -> bool:
        try:
            self.record(offset)
        except RecordError:
            return False
        return True

    def seq_at(self, offset: int) -> int | None:
        head = self.read(offset, RECORD_HEADER.size)
        return RECORD_HEADER.unpack_from(head, 0)[2] if len(head) == RECORD_HEADER.size else None

    def resync(self, offset: int, floor: int, *, tight: bool) -> int | None:
        """The first offset after the bad record at `offset` where reading can go on.

        First the bad record's own length is tried (damage inside a payload leaves the
        header intact, and skipping by it never looks inside the payload, which may hold
        anything a client sent); then every later offset holding a data-kind byte. A
        candidate must carry a seq above `floor` — for an appended file (`tight`), whose
        seqs are consecutive, at most one per 15 bytes skipped above it — a length within
        the file and a good CRC; one found by scanning must also be followed by `_CHAIN`
        valid records in seq order or by the end of the file (a torn record at the end
        counts as the end), or by a damaged record whose header still carries a data kind
        and a seq just above. None when
        nothing valid follows: the damage runs to the end of the file.
        """
        head = self.read(offset, RECORD_HEADER.size)
        if len(head) == RECORD_HEADER.size:
            skip: int = offset + RECORD_OVERHEAD + RECORD_HEADER.unpack_from(head, 0)[1]
            if skip < self._size and self._candidate(skip, floor, offset, tight, chain=0):
                return skip
        position = offset + 1
        last = self._size - RECORD_OVERHEAD
        while position <= last:
            view = self.read(position, _SCAN_CHUNK)
            base = position
            for match in _KIND_BYTE.finditer(view):
                candidate = base + match.start()
                if candidate > last:
                    return None
                if self._candidate(candidate, floor, offset, tight, chain=_CHAIN):
                    return candidate
            position = base + len(view)
        return None

    def _candidate(self, at: int, floor: int, damaged_at: int, tight: bool, *, chain: int) -> bool:
        head = self.read(at, RECORD_HEADER.size)
        if len(head) < RECORD_HEADER.size:
            return False
        kind, length, seq, _id, _type = RECORD_HEADER.unpack_from(head, 0)
        ceiling = floor + 1 + (at - damaged_at) // _MIN_OP_BYTES if tight else floor + _SEQ_PROBE_WINDOW
        if kind not in _DATA_KINDS or not floor < seq <= ceiling:
            return False
        if at + RECORD_OVERHEAD + length > self._size:
            return False
        try:
            record, end = self.record(at)
        except RecordError:
            return False
        floor = last_seq(record)
        for _ in range(chain):
            if end >= self._size:
                return True
            try:
                record, end = self.record(end)
            except TornRecord:
                return True  # valid up to a torn end
            except RecordError:
                return self._plausible(end, floor)  # a record between two damaged ones
            if isinstance(record, CompactedRecord) or record.seq <= floor:
                return False
            floor = last_seq(record)
        return True

    def _plausible(self, at: int, floor: int) -> bool:
        """A damaged record's header still looks like the next one: the very next seq, or a
        data kind with a seq a little above and a length within the file."""
        head = self.read(at, RECORD_HEADER.size)
        if len(head) < RECORD_HEADER.size:
            return True
        kind, length, seq, _id, _type = RECORD_HEADER.unpack_from(head, 0)
        if seq == floor + 1:
            return True  # the next seq of an appended file, whatever else was hit
        return kind in _DATA_KINDS and floor < seq <= floor + _PLAUSIBLE_GAP and at + length < self._size

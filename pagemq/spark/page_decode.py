"""Page file bytes to Arrow columns, vectorised: the Spark readers' decoder.

Decoding a page record by record in Python (a `PagedRecord`, a `Message`, then one Python
object per column value) costs ~10 µs a row, several times what Spark's Python data source
API itself costs; so did one `struct` tuple per record, transposed into columns (~3.5 µs).
Here a page's bytes are read once and no Python object is made per record on the usual path:

1. `locate` walks the frames. A run of usual frames (a MESSAGE frame of one entry routed
   to one queue) is walked reading each frame's length, then taken column-wise: their
   fixed fields (frame header, entry head, queue id, message codec head) are cut out of
   the buffer in one Arrow `take` and read as numpy columns, checked as whole columns
   (length, ordinal, entry length), and each frame's CRC is computed. Anything else
   (MESSAGE frames routed to several queues and BATCH frames, one `struct` call per
   record; TX_BATCH frames, format-1 pages, damage, a torn tail through
   `page_format.read_frames`, which reads past damage and notes it exactly as every other
   page reader does) is read frame by frame, and the walk goes on after it. After a run
   that stopped short (damage, a frame written twice), a few frames are read one by one
   before the next run, so such pages cost no more than frame by frame.
2. `build_batch` turns a `Located` into a record batch of `schema.ARROW_SCHEMA` column by
   column: fixed fields from the numpy columns, variable ones (body, header text, header
   lengths) by one Arrow `take` over a binary array whose offsets cut the page buffer
   itself into [lengths, text, body, gap] per row, so the bytes are copied once, in C.
   Headers (the `headers` column) are decoded only when asked for.

A `Located` holds positions into the page buffer (`data`), so the buffer must outlive it.
Pure format code over pyarrow and numpy: no broker, no Spark; the batch source
(`page_scan`), a range read's spans (`range_parts`) and the broker's bulk range reads
(`paged_rows`) use it, and any reader of page-file bytes may.
"""

from __future__ import annotations

import functools
import re
import struct
import zlib
from collections.abc import Callable, Container, Hashable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa

from pagemq.spark.schema import ARROW_SCHEMA, timestamps
from pagemq.storage.message_codec import CodecError, decode_headers, read_head
from pagemq.storage.paging.page_format import (
    BATCH_COUNT,
    ENTRY_HEAD,
    FORMAT_VERSION,
    FRAME_CRC_FROM,
    FRAME_HEADER,
    FRAME_MAGIC,
    MAX_FRAME,
    PERSISTENT,
    TX_BATCH_HEAD,
    V1_FRAME_HEADER,
    FrameDamage,
    RecordType,
    read_frames,
)

__all__ = ["CODEC_HEAD", "FIELDS", "HEADERS_TYPE", "Located", "RowProblem", "build_batch", "header_map",
           "locate"]

CODEC_HEAD = struct.Struct("<BBBBQqqHII")  # message_codec's fixed head (docs/formats/page.md)
_MAX_FAST_QUEUES = 256  # a MESSAGE frame routed to more queues takes the general path


@functools.lru_cache(maxsize=_MAX_FAST_QUEUES)
def _message_frame(queues: int) -> struct.Struct:
    """A MESSAGE frame of one entry routed to `queues` queues, up to its message's codec head."""
    return struct.Struct("<4sIII" + "B" + ENTRY_HEAD.format.lstrip("<") + "Q" * queues
                         + CODEC_HEAD.format.lstrip("<"))


# One MESSAGE frame of one entry routed to one queue: frame header, record type, entry head,
# the queue id, the message's codec head. Field indices below name the columns of a `Located`
# (and the fields of its `rows`).
_FAST = _message_frame(1)
ORDINAL, KIND, FLAGS, MESSAGE_ID, QUEUE_COUNT, MESSAGE_LENGTH, QUEUE = 3, 4, 5, 6, 7, 8, 9
VERSION, PRIORITY, TIMESTAMP, HEADER_COUNT, HEADER_BYTES, BODY_LENGTH = 10, 12, 16, 17, 18, 19
FIELDS = range(ORDINAL, BODY_LENGTH + 1)  # what a `Located` holds per record
_ENTRY_AT = FRAME_HEADER.size + 1  # a MESSAGE frame's entry
_MESSAGE_AT = _ENTRY_AT + ENTRY_HEAD.size + 8  # its message, when routed to one queue
_MESSAGE_KIND = int(RecordType.MESSAGE)
_BATCH_KIND = int(RecordType.BATCH)
# A frame's head up to its entry's queue count: enough to tell a usual frame while walking.
_WALK = struct.Struct("<4sIIIBBQH")
assert _FAST.format.startswith(_WALK.format)
# One entry of a BATCH frame routed to one queue: entry head, the queue id, the codec head
# (its row is `_NO_FRAME`, ordinal, kind, then these: the same layout as `_FAST`'s).
_BATCH_ENTRY = struct.Struct("<" + ENTRY_HEAD.format.lstrip("<") + "Q" + CODEC_HEAD.format.lstrip("<"))
_ENTRY_MESSAGE_AT = _MESSAGE_AT - _ENTRY_AT  # an entry's message, when routed to one queue
_NO_FRAME = (None,) * ORDINAL  # stands for the frame-header fields of a row found the slow way
_CODEC_VERSION = 1
_NUMPY_CODES = {"B": "u1", "H": "<u2", "I": "<u4", "Q": "<u8", "q": "<i8"}


def _numpy_record(layout: struct.Struct) -> np.dtype[Any]:
    """`layout`'s fields as a packed numpy record (fields `f0`, `f1`, ...): the same bytes,
    read column-wise."""
    formats: list[str] = []
    for count, code in re.findall(r"(\d*)([a-zA-Z])", layout.format.lstrip("<")):
        formats += [f"S{count}"] if code == "s" else [_NUMPY_CODES[code]] * int(count or 1)
    record = np.dtype([(f"f{n}", kind) for n, kind in enumerate(formats)])
    assert record.itemsize == layout.size, layout.format
    return record


_FAST_RECORD = _numpy_record(_FAST)
_COLUMN_TYPES = {n: _FAST_RECORD[f"f{n}"] for n in FIELDS}
_EMPTY = {n: np.empty(0, kind) for n, kind in _COLUMN_TYPES.items()}


@dataclass(slots=True)
class Located:
    """The records of one page buffer, in file (ordinal) order, column-wise.

    `columns[f]` holds field `f` (`ORDINAL`, `MESSAGE_ID`, ... `BODY_LENGTH`: `_FAST`'s
    fields from the ordinal on) of every record, as a numpy array; `QUEUE` holds the queue
    id (uint64), or, when some record went to zero or several queues, Python objects (an id,
    or the tuple of ids). `ends[i]` is where record i's encoded message ends in the buffer
    (it starts `MESSAGE_LENGTH` bytes before). `txids[i]` is set for records of a TX_BATCH
    only. `damage` holds what `read_frames` noted."""

    data: bytes | memoryview
    columns: dict[int, np.ndarray[Any, Any]] = field(default_factory=lambda: dict(_EMPTY))
    ends: np.ndarray[Any, Any] = field(default_factory=lambda: np.empty(0, np.int64))
    txids: dict[int, int] = field(default_factory=dict)
    damage: list[FrameDamage] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def rows(self) -> list[tuple]:  # type: ignore[type-arg]
        """The records as tuples laid out as `_FAST`'s fields (the frame-header fields None):
        for the callers that look at records one by one."""
        columns = [self.columns[n].tolist() for n in FIELDS]
        return list(zip(*repeat(repeat(None), ORDINAL), *columns, strict=False))

    def message(self, i: int) -> memoryview:
        """Record `i`'s encoded message (the `message_codec` bytes)."""
        end = int(self.ends[i])
        return memoryview(self.data)[end - int(self.columns[MESSAGE_LENGTH][i]):end]

    def take(self, index: np.ndarray[Any, Any] | slice) -> Located:
        """Some of the records (positions, or a slice), in the order given."""
        positions = np.arange(len(self))[index] if self.txids else None
        txids = {} if positions is None else {
            n: self.txids[int(old)] for n, old in enumerate(positions) if int(old) in self.txids}
        return Located(self.data, {n: column[index] for n, column in self.columns.items()}, self.ends[index],
                       txids, self.damage)


class _Finding:
    """What `locate` found so far: runs of columns (usual frames, taken column-wise) and
    the rows of the frames read one by one since the last run, as tuples."""

    __slots__ = ("count", "damage", "ends", "parts", "rows", "txids")

    def __init__(self, damage: list[FrameDamage]) -> None:
        self.damage = damage
        self.parts: list[tuple[dict[int, np.ndarray[Any, Any]], np.ndarray[Any, Any]]] = []
        self.rows: list[tuple] = []  # type: ignore[type-arg]
        self.ends: list[int] = []
        self.txids: dict[int, int] = {}
        self.count = 0  # records in `parts`

    def usual(self, heads: np.ndarray[Any, Any], stops: np.ndarray[Any, Any]) -> None:
        self._flush()
        self.parts.append(({n: heads[f"f{n}"] for n in FIELDS}, stops))
        self.count += len(stops)

    def tx(self, txid: int) -> None:
        """The next row added belongs to transaction `txid`."""
        self.txids[self.count + len(self.rows)] = txid

    def _flush(self) -> None:
        if not self.rows:
            return
        columns = list(zip(*self.rows, strict=True))
        part = {n: np.array(columns[n], _COLUMN_TYPES[n]) for n in FIELDS if n != QUEUE}
        queues = columns[QUEUE]
        part[QUEUE] = (np.array(queues, np.uint64) if all(type(queue) is int for queue in queues)
                       else np.fromiter(queues, object, len(queues)))
        self.parts.append((part, np.array(self.ends, np.int64)))
        self.count += len(self.rows)
        self.rows, self.ends = [], []

    def located(self, data: bytes | memoryview) -> Located:
        self._flush()
        if not self.parts:
            return Located(data, txids=self.txids, damage=self.damage)
        if len(self.parts) == 1:
            columns, ends = self.parts[0]
            return Located(data, {n: np.ascontiguousarray(column) for n, column in columns.items()}, ends,
                           self.txids, self.damage)
        return Located(data, {n: np.concatenate([columns[n] for columns, _ in self.parts]) for n in FIELDS},
                       np.concatenate([ends for _, ends in self.parts]), self.txids, self.damage)


def locate(data: bytes | memoryview, start: int, end: int, *, version: int = FORMAT_VERSION,
           ordinal: int = 0, committed: Container[int] | None = None,
           damage: list[FrameDamage] | None = None, verify: bool = True) -> Located:
    """Every record of the intact frames in `data[start:end]` (see the module doc).

    `committed`, when given, keeps only the TX_BATCH records whose transaction is in it.
    Damage is read past and noted in `damage` (the list `Located.damage` is): `end` must be
    the end of the readable data, and bytes after the last complete frame are noted as a
    torn tail (`FrameDamage.torn`), which for a page still being written is an append in
    progress; the caller tells the two apart.

    Without `verify` the frames' CRCs are not computed (their structure still is checked):
    for a caller that only learns which records a span holds and hands the bytes to a
    reader that locates them again, verified (a broker shipping a page span as it is,
    `spark/range_parts.py`)."""
    found = _Finding(damage if damage is not None else [])
    view = memoryview(data)
    pos = start
    run = _FIRST_RUN
    one_by_one = 0  # frames to read one by one before walking a run again
    while pos < end:
        if version >= 2 and not one_by_one and (starts := _walk(view, pos, end, run)):
            heads, stops = _usual_frames(data, view, starts, ordinal, verify)
            if len(stops):
                found.usual(heads, stops)
                pos, ordinal = int(stops[-1]), int(heads["f3"][-1]) + 1
            if len(stops) == len(starts):
                run = min(4 * run, _LONGEST_RUN)
                continue
            run, one_by_one = _FIRST_RUN, _ONE_BY_ONE
            if len(stops):
                continue
        one_by_one = max(one_by_one - 1, 0)
        after = _other_frame(found, view, pos, end, version, ordinal, committed, verify)
        if after is None:
            break
        pos, ordinal = after
    return found.located(data)


# Frames walked at once: few after a frame that was not usual after all, and the next
# `_ONE_BY_ONE` frames read one by one first, so a page where such frames come often
# (damaged, or written twice) is neither walked again and again to its end nor taken a
# column-wise run of one or two frames at a time; growing while they all are usual.
_FIRST_RUN, _LONGEST_RUN, _ONE_BY_ONE = 16, 1 << 16, 16


def _walk(view: memoryview, pos: int, end: int, most: int) -> list[int]:
    """Where the frames from `pos` start (`most` of them at most), while they look usual (a
    MESSAGE frame of one entry routed to one queue, long enough to hold a codec head, whole
    before `end`): one `struct` call each, the rest of the checks left to `_usual_frames`."""
    starts: list[int] = []
    append, unpack = starts.append, _WALK.unpack_from
    last, header, fast_size = end - _FAST.size, FRAME_HEADER.size, _FAST.size
    while pos <= last and len(starts) < most:
        magic, _crc, length, _ordinal, kind, _flags, _id, queues = unpack(view, pos)
        stop = pos + header + length
        if (magic != FRAME_MAGIC or kind != _MESSAGE_KIND or queues != 1 or stop > end
                or stop < pos + fast_size):
            break
        append(pos)
        pos = stop
    return starts


def _usual_frames(data: bytes | memoryview, view: memoryview, starts: list[int], ordinal: int, verify: bool
                  ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The fixed fields (`_FAST_RECORD`s) and ends of the walked frames at `starts`, up to
    the first that is not a usual frame after all (its entry does not fill it, its ordinal
    does not follow, or its CRC does not match): what the frame-by-frame reader would take."""
    at = np.array(starts, np.int64)
    heads = _gather(data, at, _FAST.size)
    stops = at + FRAME_HEADER.size + heads["f2"].astype(np.int64)
    ordinals = heads["f3"].astype(np.int64)
    lengths = heads[f"f{MESSAGE_LENGTH}"].astype(np.int64)
    good = (lengths == stops - at - _MESSAGE_AT) & (heads["f2"] < MAX_FRAME)
    good[0] &= ordinals[0] >= ordinal
    good[1:] &= ordinals[1:] > ordinals[:-1]
    usual = len(good) if good.all() else int(np.argmin(good))
    if verify and usual:  # (the CRCs of the frames before the first that is not usual)
        crc32 = zlib.crc32
        crcs = [crc32(view[begin + FRAME_CRC_FROM:stop])
                for begin, stop in zip(starts[:usual], stops[:usual].tolist(), strict=True)]
        matched = np.array(crcs, np.uint32) == heads["f1"][:usual]
        usual = usual if matched.all() else int(np.argmin(matched))
    return heads[:usual], stops[:usual]


def _gather(data: bytes | memoryview, at: np.ndarray[Any, Any], size: int) -> np.ndarray[Any, Any]:
    """The `size` bytes at each of the positions `at` (ascending, `size` apart at least), as
    `_FAST_RECORD`s: cut out of `data` in one Arrow `take`."""
    count = len(at)
    cuts = np.empty(2 * count, np.int64)
    cuts[0::2], cuts[1::2] = at, at + size
    taken = _slices(data, cuts).take(_every(0, count, 2))
    values = taken.buffers()[2]
    return np.frombuffer(values, _FAST_RECORD, count)


def _other_frame(found: _Finding, view: memoryview, pos: int, end: int, version: int, ordinal: int,
                 committed: Container[int] | None, verify: bool) -> tuple[int, int] | None:
    """Read the frame at `pos` on its own (see the module doc): where the next one starts and
    its ordinal, or None when no intact frame is left."""
    if version >= 2 and pos + _FAST.size <= end:
        row = _FAST.unpack_from(view, pos)
        stop = pos + FRAME_HEADER.size + row[2]
        if (row[0] == FRAME_MAGIC and row[KIND] in (_MESSAGE_KIND, _BATCH_KIND) and stop <= end
                and row[ORDINAL] >= ordinal and 0 < row[2] < MAX_FRAME
                and (not verify or zlib.crc32(view[pos + FRAME_CRC_FROM:stop]) == row[1])):
            if row[KIND] == _BATCH_KIND:
                count = _batch_rows(view, pos, stop, row[ORDINAL], found)
                if count:
                    return stop, row[ORDINAL] + count
            elif (message := _message_row(view, pos, stop, row)) is not None:
                found.rows.append(message)
                found.ends.append(stop)
                return stop, row[ORDINAL] + 1
    frames = read_frames(view, pos, end, version=version, ordinal=ordinal, damage=found.damage)
    frame = next(frames, None)
    if frame is None:
        return None
    offset, size, first, entries = frame
    _add_frame(found, view, offset, version, first, committed)
    return offset + size, first + len(entries)


def _message_row(view: memoryview, pos: int, stop: int, row: tuple) -> tuple | None:  # type: ignore[type-arg]
    """The row of the MESSAGE frame at `pos` whose `_FAST` fields are `row`: a usual frame
    (one queue) whose entry fills it, or one routed to several queues (`_multi_queue_row`);
    None for anything else (the general path reads it)."""
    if row[QUEUE_COUNT] == 1:
        fills = row[MESSAGE_LENGTH] == stop - pos - _MESSAGE_AT >= CODEC_HEAD.size
        return (*_NO_FRAME, *row[ORDINAL:]) if fills else None
    return _multi_queue_row(view, pos, stop, row[QUEUE_COUNT]) if row[QUEUE_COUNT] > 1 else None


def _multi_queue_row(view: memoryview, pos: int, stop: int, queues: int) -> tuple | None:  # type: ignore[type-arg]
    """The row of the MESSAGE frame at `pos` (ending at `stop`) routed to `queues` queues,
    laid out as `_FAST`'s with `QUEUE` the tuple of their ids, when its entry fills the
    frame exactly and holds a codec head (one `struct` call, as for one queue); None for
    anything else (the general path reads it)."""
    if queues > _MAX_FAST_QUEUES:
        return None
    layout = _message_frame(queues)
    if pos + layout.size > stop:
        return None
    message_at = _MESSAGE_AT + 8 * (queues - 1)
    fields = layout.unpack_from(view, pos)
    if fields[MESSAGE_LENGTH] != stop - pos - message_at or fields[MESSAGE_LENGTH] < CODEC_HEAD.size:
        return None
    return (*_NO_FRAME, *fields[ORDINAL:QUEUE], fields[QUEUE:QUEUE + queues], *fields[QUEUE + queues:])


def _batch_rows(view: memoryview, pos: int, stop: int, first: int, found: _Finding) -> int:
    """Add the rows of the BATCH frame at `pos` (its CRC matched) when every entry is routed
    to one queue and holds a codec head: one `struct` call each, as for a MESSAGE frame (a
    COMMIT's sends to one address are one batch, so the pages the Spark sink's transactions
    fill are mostly BATCH frames); their count. 0, with nothing added, for
    anything else: the general path reads it."""
    count: int = BATCH_COUNT.unpack_from(view, pos + _ENTRY_AT)[0]
    at = pos + _ENTRY_AT + BATCH_COUNT.size
    rows: list[tuple] = []  # type: ignore[type-arg]
    stops: list[int] = []
    unpack, entry_size, head = _BATCH_ENTRY.unpack_from, _BATCH_ENTRY.size, _NO_FRAME
    for n in range(count):
        if at + entry_size > stop:
            return 0
        entry = unpack(view, at)
        message_end = at + _ENTRY_MESSAGE_AT + entry[3]
        if entry[2] != 1 or entry[3] < CODEC_HEAD.size or message_end > stop:
            return 0
        rows.append((*head, first + n, _BATCH_KIND, *entry))
        stops.append(message_end)
        at = message_end
    if at != stop:
        return 0
    found.rows += rows
    found.ends += stops
    return count


def _add_frame(found: _Finding, view: memoryview, offset: int, version: int, ordinal: int,
               committed: Container[int] | None) -> None:
    """The rows of one intact frame (any record type) that `read_frames` returned."""
    body = offset + (FRAME_HEADER.size if version >= 2 else V1_FRAME_HEADER.size)
    kind = view[body]
    txid = 0
    if kind == RecordType.MESSAGE:
        count, pos = 1, body + 1
    elif kind == RecordType.BATCH:
        (count,), pos = BATCH_COUNT.unpack_from(view, body + 1), body + 1 + BATCH_COUNT.size
    else:
        txid, count = TX_BATCH_HEAD.unpack_from(view, body + 1)
        pos = body + 1 + TX_BATCH_HEAD.size
    keep = not txid or committed is None or txid in committed
    for n in range(count):
        flags, message_id, queues, length = ENTRY_HEAD.unpack_from(view, pos)
        pos += ENTRY_HEAD.size
        queue: int | tuple[int, ...] = struct.unpack_from(f"<{queues}Q", view, pos)
        pos += 8 * queues
        if queues == 1:
            queue = queue[0]  # type: ignore[index]
        # (a message too short for a codec head gets zeros: no codec version, `_problems`)
        head = CODEC_HEAD.unpack_from(view, pos) if length >= CODEC_HEAD.size else (0,) * 10
        pos += length
        if keep:
            if txid:
                found.tx(txid)
            found.rows.append((*_NO_FRAME, ordinal + n, kind, flags, message_id, queues, length, queue,
                               *head))
            found.ends.append(pos)


@dataclass(frozen=True, slots=True)
class RowProblem:
    """A located row whose message does not decode: left out of the batch."""

    ordinal: int
    message_id: int
    reason: str


HEADERS_TYPE = ARROW_SCHEMA.field("headers").type


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


def build_batch(found: Located, *, address: str, seq_base: int, queue_name: Callable[[Hashable], str | None],
                include_headers: bool = True, seq_from_id: bool = False
                ) -> tuple[pa.RecordBatch, list[RowProblem]]:
    """One record batch of `ARROW_SCHEMA` from located records (all of a `Located`, or a
    `take` of them), and the records left out because their message does not decode.

    `seq` is `seq_base | ordinal`, or with `seq_from_id` the message id (a streaming
    range's offsets); `queue_name` names a record's `QUEUE` (an id, or a tuple of ids),
    called once per distinct value. Without `include_headers` the `headers` column is null
    and the header bytes are not read (nor checked)."""
    if not len(found):
        return _empty_batch(), []
    decodes = _decodes(found)
    problems: list[RowProblem] = []
    if not decodes.all():
        problems = _problems(found, np.flatnonzero(~decodes))
        found = found.take(np.flatnonzero(decodes))
        if not len(found):
            return _empty_batch(), problems
    try:
        return _batch(found, address, seq_base, queue_name, include_headers, seq_from_id), problems
    except _HeaderTrouble:
        bad = _header_problems(found)  # which rows: the slow way, only now
        keep = np.ones(len(found), bool)
        keep[list(bad)] = False
        found = found.take(np.flatnonzero(keep))
        return (_batch(found, address, seq_base, queue_name, include_headers, seq_from_id),
                problems + list(bad.values()))


def _every(first: int, count: int, step: int) -> pa.Array:
    """Indices first, first + step, ... (`count` of them)."""
    last = first + step * count
    return pa.array(np.arange(first, last, step, dtype=np.int32 if last < 1 << 31 else np.int64))


_MAX_SEQ = (1 << 63) - 1  # the `seq` column is int64


class _HeaderTrouble(ValueError):
    """Some row's header lengths or text do not decode (which one: `_header_problems`)."""


def _batch(found: Located, address: str, seq_base: int, queue_name: Callable[[Hashable], str | None],
           include_headers: bool, seq_from_id: bool) -> pa.RecordBatch:
    count = len(found)
    if not count:
        return _empty_batch()
    columns = found.columns
    header_counts = columns[HEADER_COUNT]
    # [lengths table, header text, body, gap up to the next row's table] for every row
    cuts = np.empty(4 * count, np.int64)
    cuts[3::4] = found.ends
    cuts[2::4] = found.ends - columns[BODY_LENGTH]
    cuts[1::4] = cuts[2::4] - columns[HEADER_BYTES]
    cuts[0::4] = cuts[1::4] - 6 * header_counts.astype(np.int64)
    parts = _slices(found.data, cuts)
    bodies = parts.take(_every(2, count, 4))
    if bodies.type != pa.binary():
        bodies = bodies.cast(pa.binary())
    headers = _headers(parts, count, header_counts) if include_headers else pa.nulls(count, HEADERS_TYPE)
    ids = columns[MESSAGE_ID]
    if seq_from_id:
        if int(ids.max()) > _MAX_SEQ:
            raise ValueError(f"message id {int(ids.max())} beyond {_MAX_SEQ}: not one a broker gives")
        seqs = pa.array(ids.astype(np.int64))
    else:
        seqs = pa.array(columns[ORDINAL].astype(np.int64) + seq_base)
    arrays = [
        pa.array(ids).cast(pa.string()),
        pa.repeat(pa.scalar(address, pa.string()), count),
        _queue_column(columns[QUEUE], queue_name),
        seqs,
        timestamps(pa.array(columns[TIMESTAMP])),
        pa.array(columns[PRIORITY].astype(np.int32)),
        pa.array((columns[FLAGS] & PERSISTENT) != 0),
        headers,
        bodies,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _decodes(found: Located) -> np.ndarray[Any, Any]:
    """Whether each row's codec head is version 1 and describes its message's length
    exactly (the usual answer; `_problems` says why not): the head, the lengths table, the
    header text and the body fill it."""
    columns = found.columns
    described = (CODEC_HEAD.size + 6 * columns[HEADER_COUNT].astype(np.int64)
                 + columns[HEADER_BYTES].astype(np.int64) + columns[BODY_LENGTH].astype(np.int64))
    length = columns[MESSAGE_LENGTH].astype(np.int64)
    decodes: np.ndarray[Any, Any] = (columns[VERSION] == _CODEC_VERSION) & (length >= CODEC_HEAD.size)
    decodes &= described == length
    return decodes


def _problems(found: Located, bad: np.ndarray[Any, Any]) -> list[RowProblem]:
    """Why the rows at `bad` do not decode (what `message_codec.read_head` checks; the
    header lengths are checked with the headers)."""
    problems = []
    for row in found.take(bad).rows:
        described = CODEC_HEAD.size + 6 * row[HEADER_COUNT] + row[HEADER_BYTES] + row[BODY_LENGTH]
        if row[MESSAGE_LENGTH] < CODEC_HEAD.size:
            reason = f"encoded message too short: {row[MESSAGE_LENGTH]} bytes"
        elif row[VERSION] != _CODEC_VERSION:
            reason = f"unknown message codec version {row[VERSION]}"
        else:
            reason = f"fields describe {described} bytes, got {row[MESSAGE_LENGTH]}"
        problems.append(RowProblem(row[ORDINAL], row[MESSAGE_ID], reason))
    return problems


def _slices(data: bytes | memoryview, cuts: np.ndarray[Any, Any]) -> pa.Array:
    """A binary array over `data` itself whose elements run from each cut to the next."""
    large = int(cuts[-1]) >= 1 << 31
    offsets = pa.array(cuts if large else cuts.astype(np.int32))
    kind = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(kind, len(cuts) - 1, [None, offsets.buffers()[1], pa.py_buffer(data)])


def _value_bytes(part: pa.Array) -> tuple[pa.Buffer, np.ndarray[Any, Any]]:
    """A freshly taken binary array's values buffer (all of it its own) and its offsets,
    rebased to 0, as int64 (`count + 1` of them)."""
    wide = part.type == pa.large_binary()
    offsets = np.frombuffer(part.buffers()[1], np.int64 if wide else np.int32, len(part) + 1,
                            offset=part.offset * (8 if wide else 4)).astype(np.int64)
    data = part.buffers()[2] or pa.py_buffer(b"")
    first = int(offsets[0])
    if first:
        offsets -= first
        data = data.slice(first)
    return data, offsets


_LENGTHS_PAIR = np.dtype([("name", "<u2"), ("value", "<u4")])  # a lengths table's entry


def _headers(parts: pa.Array, count: int, header_counts: np.ndarray[Any, Any]) -> pa.Array:
    """The `headers` map column from the rows' lengths tables and header texts, column-wise
    (a Python int per header token cost more than the rest of a row); `_HeaderTrouble` if
    some row's do not decode. A lengths table is `<HI` pairs (name length, value length)."""
    total = int(header_counts.sum())
    tables, _ = _value_bytes(parts.take(_every(0, count, 4)))
    text, text_offsets = _value_bytes(parts.take(_every(1, count, 4)))
    if tables.size < 6 * total:
        raise _HeaderTrouble("header lengths table shorter than its count says")
    pairs = np.frombuffer(tables, _LENGTHS_PAIR, total)
    names, values = pairs["name"].astype(np.int64), pairs["value"].astype(np.int64)
    ends = np.cumsum(names + values)  # where each pair's value ends in `text`
    if total and ends[-1] >= 1 << 31:
        raise _HeaderTrouble("header text of one batch past 2 GiB")
    # token offsets: name start, value start, ... interleaved, then the end of the text
    token_offsets = np.empty(2 * total + 1, np.int32)
    token_offsets[0:-1:2] = ends - names - values
    token_offsets[1::2] = ends - values
    token_offsets[-1] = ends[-1] if total else 0
    map_offsets = np.zeros(count + 1, np.int32)
    np.cumsum(header_counts, out=map_offsets[1:])
    # each row's tokens fill its header text exactly (message_codec's check)
    if not np.array_equal(token_offsets[2 * map_offsets], text_offsets):
        raise _HeaderTrouble("header lengths do not add up")
    tokens = pa.Array.from_buffers(pa.binary(), 2 * total, [None, pa.py_buffer(token_offsets), text])
    try:
        return header_map(tokens, pa.array(map_offsets))
    except pa.ArrowInvalid as exc:  # not UTF-8 (or a lone surrogate, which Arrow strings cannot hold)
        raise _HeaderTrouble(str(exc)) from exc


def header_map(tokens: pa.Array, map_offsets: pa.Array) -> pa.Array:
    """The `headers` column from binary tokens (name, value, name, value, ...) and each row's
    first pair; `pa.ArrowInvalid` if a token is not UTF-8."""
    count = len(tokens)
    keys = tokens.take(_every(0, count // 2, 2)).cast(pa.string())
    values = tokens.take(_every(1, count // 2, 2)).cast(pa.string())
    return pa.MapArray.from_arrays(map_offsets, keys, values).cast(HEADERS_TYPE)


def _header_problems(found: Located) -> dict[int, RowProblem]:
    """The rows whose headers `message_codec` would not decode, or Arrow not hold, by position."""
    problems = {}
    for i, row in enumerate(found.rows):
        message = found.message(i)
        try:
            _f, _p, _i, _e, _t, lengths, text_at, body_at = read_head(message)
            decode_headers(message[text_at:body_at], lengths)
            str(message[text_at:body_at], "utf-8")
        except CodecError as exc:
            problems[i] = RowProblem(row[ORDINAL], row[MESSAGE_ID], str(exc))
        except UnicodeDecodeError as exc:
            problems[i] = RowProblem(row[ORDINAL], row[MESSAGE_ID], f"header text is not UTF-8: {exc}")
    return problems


def _queue_column(queues: np.ndarray[Any, Any], queue_name: Callable[[Hashable], str | None]) -> pa.Array:
    distinct = set(queues.tolist()) if queues.dtype == object else np.unique(queues).tolist()
    names = {queue: queue_name(queue) for queue in distinct}
    if len(names) == 1:
        (name,) = names.values()
        return pa.repeat(pa.scalar(name, pa.string()), len(queues))
    return pa.array(list(map(names.__getitem__, queues.tolist())), pa.string())

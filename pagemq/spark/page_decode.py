"""Page file bytes to Arrow columns, vectorised: the Spark readers' decoder.

Decoding a page record by record in Python (a `PagedRecord`, a `Message`, then one Python
object per column value) costs ~10 µs a row, several times what Spark's Python data source
API itself costs. Here a page's bytes are read once and:

1. `locate` walks the frames with one `struct` call per record: the usual frame (a MESSAGE
   frame of one entry, routed to one queue or to several of a multicast address) is
   checked (magic, length, ordinal, CRC, entry length) and its fixed fields (frame header,
   entry head, queue ids, message codec head) are taken in that one call; a BATCH frame (a
   COMMIT's sends to one address) is checked once and each entry routed to one queue takes
   one call too. Anything else (TX_BATCH frames, BATCH entries routed to several queues,
   format-1 pages, damage, a torn tail) goes through `page_format.read_frames`, which
   reads past damage and notes it exactly as every other page reader does; the walk then
   goes on at the next frame.
2. `build_batch` turns located rows into a record batch of `schema.ARROW_SCHEMA` column by
   column: fixed fields by transposing the unpacked tuples, variable ones (body, header
   text, header lengths) by one Arrow `take` over a binary array whose offsets cut the page
   buffer itself into [lengths, text, body, gap] per row, so the bytes are copied once, in
   C. Headers (the `headers` column) are decoded only when asked for.

Rows hold positions into the page buffer (`data`), so the buffer must outlive the
`Located` made from it. Pure format code over pyarrow: no broker, no Spark; the batch
source (`page_scan`) uses it, and any reader of page-file bytes may.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable, Container, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import mul, sub

import pyarrow as pa
import pyarrow.compute as pc

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

__all__ = ["CODEC_HEAD", "HEADERS_TYPE", "Located", "RowProblem", "build_batch", "header_map", "locate"]

CODEC_HEAD = struct.Struct("<BBBBQqqHII")  # message_codec's fixed head (docs/formats/page.md)
_MAX_FAST_QUEUES = 256  # a MESSAGE frame routed to more queues takes the general path


@functools.lru_cache(maxsize=_MAX_FAST_QUEUES)
def _message_frame(queues: int) -> struct.Struct:
    """A MESSAGE frame of one entry routed to `queues` queues, up to its message's codec head."""
    return struct.Struct("<4sIII" + "B" + ENTRY_HEAD.format.lstrip("<") + "Q" * queues
                         + CODEC_HEAD.format.lstrip("<"))


# One MESSAGE frame of one entry routed to one queue: frame header, record type, entry head,
# the queue id, the message's codec head. Field indices below name what `Located.rows` hold.
_FAST = _message_frame(1)
ORDINAL, KIND, FLAGS, MESSAGE_ID, QUEUE_COUNT, MESSAGE_LENGTH, QUEUE = 3, 4, 5, 6, 7, 8, 9
VERSION, PRIORITY, TIMESTAMP, HEADER_COUNT, HEADER_BYTES, BODY_LENGTH = 10, 12, 16, 17, 18, 19
_ENTRY_AT = FRAME_HEADER.size + 1  # a MESSAGE frame's entry
_MESSAGE_AT = _ENTRY_AT + ENTRY_HEAD.size + 8  # its message, when routed to one queue
_MESSAGE_KIND = int(RecordType.MESSAGE)
_BATCH_KIND = int(RecordType.BATCH)
# One entry of a BATCH frame routed to one queue: entry head, the queue id, the codec head
# (its row is `_NO_FRAME`, ordinal, kind, then these: the same layout as `_FAST`'s).
_BATCH_ENTRY = struct.Struct("<" + ENTRY_HEAD.format.lstrip("<") + "Q" + CODEC_HEAD.format.lstrip("<"))
_ENTRY_MESSAGE_AT = _MESSAGE_AT - _ENTRY_AT  # an entry's message, when routed to one queue
_NO_FRAME = (None,) * ORDINAL  # stands for the frame-header fields of a row found the slow way
_BAD = -1  # VERSION of a row whose message is too short to hold a codec head
# typed scalars for compute calls (see schema.timestamps)
_PERSISTENT_FLAG, _ZERO_FLAGS = pa.scalar(PERSISTENT, pa.uint8()), pa.scalar(0, pa.uint8())
_CODEC_VERSION = 1


@dataclass(slots=True)
class Located:
    """The records of one page buffer, in file (ordinal) order.

    `rows[i]` is a tuple laid out as `_FAST`'s fields (indices `ORDINAL`, `MESSAGE_ID`, ...;
    `QUEUE` holds the queue id, or the tuple of ids when the record went to zero or several
    queues) and `ends[i]` is where its encoded message ends in the buffer (it starts
    `rows[i][MESSAGE_LENGTH]` bytes before). `txids[i]` is set for rows of a TX_BATCH
    only. `damage` holds what `read_frames` noted."""

    data: bytes | memoryview
    rows: list[tuple] = field(default_factory=list)  # type: ignore[type-arg]
    ends: list[int] = field(default_factory=list)
    txids: dict[int, int] = field(default_factory=dict)
    damage: list[FrameDamage] = field(default_factory=list)

    def message(self, i: int) -> memoryview:
        """Row `i`'s encoded message (the `message_codec` bytes)."""
        end = self.ends[i]
        return memoryview(self.data)[end - self.rows[i][MESSAGE_LENGTH]:end]


def locate(data: bytes | memoryview, start: int, end: int, *, version: int = FORMAT_VERSION,
           ordinal: int = 0, committed: Container[int] | None = None,
           damage: list[FrameDamage] | None = None, verify: bool = True) -> Located:
    """Every record of the intact frames in `data[start:end]` (see the module doc).

    `committed`, when given, keeps only the TX_BATCH records whose transaction is in it.
    Damage is read past and noted in `damage` (the list `Located.damage` is): `end` must be
    the end of the readable data, and bytes after the last complete frame are noted as a
    torn tail (`FrameDamage.torn`), which for a page still being written is an append in
    progress; the caller tells the two apart.

    Without `verify` the usual frames' CRCs are not computed (their structure still is
    checked): for a caller that only learns which records a span holds and hands the bytes
    to a reader that locates them again, verified (a broker shipping a page span as it is,
    `spark/range_parts.py`); a CRC costs about as much as the rest of a record's walk."""
    found = Located(data, damage=damage if damage is not None else [])
    view = memoryview(data)
    rows, ends = found.rows, found.ends
    append_row, append_end = rows.append, ends.append
    unpack, crc32, fast_size = _FAST.unpack_from, zlib.crc32, _FAST.size
    pos = start
    fast = version >= 2
    while pos < end:
        if fast and pos + fast_size <= end:  # the usual frame, inline
            row = unpack(view, pos)
            stop = pos + FRAME_HEADER.size + row[2]
            if (row[0] == FRAME_MAGIC and row[KIND] == _MESSAGE_KIND and row[QUEUE_COUNT] == 1
                    and stop <= end and row[ORDINAL] >= ordinal and row[2] < MAX_FRAME
                    and row[MESSAGE_LENGTH] == stop - pos - _MESSAGE_AT >= CODEC_HEAD.size
                    and (not verify or crc32(view[pos + FRAME_CRC_FROM:stop]) == row[1])):
                append_row(row)
                append_end(stop)
                ordinal = row[ORDINAL] + 1
                pos = stop
                continue
            if (row[0] == FRAME_MAGIC and row[KIND] == _MESSAGE_KIND and row[QUEUE_COUNT] > 1
                    and stop <= end and row[ORDINAL] >= ordinal and row[2] < MAX_FRAME
                    and (multi := _multi_queue_row(view, pos, stop, row[QUEUE_COUNT])) is not None
                    and (not verify or crc32(view[pos + FRAME_CRC_FROM:stop]) == row[1])):
                append_row(multi)  # (a multicast address's record, routed to several queues)
                append_end(stop)
                ordinal = row[ORDINAL] + 1
                pos = stop
                continue
            if (row[0] == FRAME_MAGIC and row[KIND] == _BATCH_KIND and stop <= end
                    and row[ORDINAL] >= ordinal and 0 < row[2] < MAX_FRAME
                    and (not verify or crc32(view[pos + FRAME_CRC_FROM:stop]) == row[1])
                    and (count := _batch_rows(view, pos, stop, row[ORDINAL], rows, ends))):
                ordinal = row[ORDINAL] + count
                pos = stop
                continue
        frames = read_frames(view, pos, end, version=version, ordinal=ordinal, damage=found.damage)
        frame = next(frames, None)
        if frame is None:
            break
        offset, size, first, entries = frame
        _add_frame(found, view, offset, version, first, committed)
        pos, ordinal = offset + size, first + len(entries)
    return found


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
    return (*fields[:QUEUE], fields[QUEUE:QUEUE + queues], *fields[QUEUE + queues:])


def _batch_rows(view: memoryview, pos: int, stop: int, first: int,
                rows: list[tuple], ends: list[int]) -> int:  # type: ignore[type-arg]
    """Add the rows of the BATCH frame at `pos` (its CRC matched) when every entry is routed
    to one queue and holds a codec head: one `struct` call each, as for a MESSAGE frame (a
    COMMIT's sends to one address are one batch, so the pages the Spark sink's transactions
    fill are mostly BATCH frames); their count. 0, with nothing added, for
    anything else: the general path reads it."""
    count: int = BATCH_COUNT.unpack_from(view, pos + _ENTRY_AT)[0]
    at = pos + _ENTRY_AT + BATCH_COUNT.size
    found: list[tuple] = []  # type: ignore[type-arg]
    stops: list[int] = []
    unpack, entry_size, head = _BATCH_ENTRY.unpack_from, _BATCH_ENTRY.size, _NO_FRAME
    for n in range(count):
        if at + entry_size > stop:
            return 0
        entry = unpack(view, at)
        message_end = at + _ENTRY_MESSAGE_AT + entry[3]
        if entry[2] != 1 or entry[3] < CODEC_HEAD.size or message_end > stop:
            return 0
        found.append((*head, first + n, _BATCH_KIND, *entry))
        stops.append(message_end)
        at = message_end
    if at != stop:
        return 0
    rows += found
    ends += stops
    return count


def _add_frame(found: Located, view: memoryview, offset: int, version: int, ordinal: int,
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
        head = CODEC_HEAD.unpack_from(view, pos) if length >= CODEC_HEAD.size else (_BAD,) + (0,) * 9
        pos += length
        if keep:
            if txid:
                found.txids[len(found.rows)] = txid
            found.rows.append((*_NO_FRAME, ordinal + n, kind, flags, message_id, queues,
                               length, queue, *head))
            found.ends.append(pos)


@dataclass(frozen=True, slots=True)
class RowProblem:
    """A located row whose message does not decode: left out of the batch."""

    ordinal: int
    message_id: int
    reason: str


HEADERS_TYPE = ARROW_SCHEMA.field("headers").type


def build_batch(data: bytes | memoryview, rows: Sequence[tuple], ends: Sequence[int], *,  # type: ignore[type-arg]
                address: str, seq_base: int, queue_name: Callable[[Hashable], str | None],
                include_headers: bool = True, seq_from_id: bool = False
                ) -> tuple[pa.RecordBatch, list[RowProblem]]:
    """One record batch of `ARROW_SCHEMA` from located rows (`Located.rows`/`ends`, or a
    selection of them), and the rows left out because their message does not decode.

    `seq` is `seq_base | ordinal`, or with `seq_from_id` the message id (a streaming
    range's offsets); `queue_name` names a row's `QUEUE` (an id, or a tuple of ids), called
    once per distinct value. Without `include_headers` the `headers` column is null and the
    header bytes are not read (nor checked)."""
    if not rows:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA), []
    columns = _transposed(rows)
    parts_at = _parts_at(columns, ends)
    problems = [] if _all_decode(columns, ends, parts_at) else _problems(rows)
    if problems:
        rows, ends = _without(rows, ends, problems)
        if not rows:
            return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA), problems
        columns = _transposed(rows)
        parts_at = _parts_at(columns, ends)
    try:
        batch = _batch(data, columns, ends, parts_at, address, seq_base, queue_name, include_headers,
                       seq_from_id)
        return batch, problems
    except _HeaderTrouble:
        more = _header_problems(data, rows, ends)  # which rows: the slow way, only now
        rows, ends = _without(rows, ends, more)
        columns = _transposed(rows)
        return (_batch(data, columns, ends, _parts_at(columns, ends), address, seq_base, queue_name,
                       include_headers, seq_from_id), problems + more)


def _transposed(rows: Sequence[tuple]) -> list[tuple]:  # type: ignore[type-arg]
    """The rows' fields as columns (one transposition, shared by the checks and the batch)."""
    return list(zip(*rows, strict=True))


def _every(first: int, count: int, step: int) -> pa.Array:
    """int32 indices first, first + step, ... (`count` of them), made by Arrow kernels: a
    Python range made into an array costs several times more per element."""
    if count > _COUNTING:
        return pa.array(range(first, first + step * count, step), pa.int32())
    return pc.add(pc.multiply(_counting().slice(0, count), pa.scalar(step, pa.int32())),
                  pa.scalar(first, pa.int32()))


_COUNTING = 1 << 18


@functools.cache
def _counting() -> pa.Array:
    """0, 1, 2, ... (`_COUNTING` of them), sliced by `_every`: made at the first decode, not
    at import (~50 ms, paid by every process that imports the Spark source, decoding or not)."""
    return pa.array(range(_COUNTING), pa.int32())


class _HeaderTrouble(ValueError):
    """Some row's header lengths or text do not decode (which one: `_header_problems`)."""


def _without(rows: Sequence[tuple], ends: Sequence[int], problems: list[RowProblem]  # type: ignore[type-arg]
             ) -> tuple[Sequence[tuple], Sequence[int]]:  # type: ignore[type-arg]
    if not problems:
        return rows, ends
    bad = {problem.ordinal for problem in problems}
    keep = [i for i, row in enumerate(rows) if row[ORDINAL] not in bad]
    return [rows[i] for i in keep], [ends[i] for i in keep]


def _batch(data: bytes | memoryview, columns: list[tuple], ends: Sequence[int],  # type: ignore[type-arg]
           parts_at: tuple[list[int], list[int], list[int]], address: str, seq_base: int,
           queue_name: Callable[[Hashable], str | None], include_headers: bool, seq_from_id: bool
           ) -> pa.RecordBatch:
    count = len(ends)
    if not count:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    header_counts = columns[HEADER_COUNT]
    tables_at, texts_at, bodies_at = parts_at
    # [lengths table, header text, body, gap up to the next row's table] for every row
    cuts: list[int] = [0] * (4 * count)
    cuts[0::4], cuts[1::4], cuts[2::4], cuts[3::4] = tables_at, texts_at, bodies_at, ends
    parts = _slices(data, cuts)
    bodies = parts.take(_every(2, count, 4))
    if bodies.type != pa.binary():
        bodies = bodies.cast(pa.binary())
    headers = _headers(parts, count, header_counts) if include_headers else pa.nulls(count, HEADERS_TYPE)
    millis = pa.array(columns[TIMESTAMP], pa.int64())
    ids = pa.array(columns[MESSAGE_ID], pa.int64() if seq_from_id else pa.uint64())
    if seq_from_id:
        seqs = ids
    else:
        seqs = pa.array(columns[ORDINAL], pa.int64())
        seqs = pc.add(seqs, pa.scalar(seq_base, pa.int64())) if seq_base else seqs
    arrays = [
        ids.cast(pa.string()),
        pa.repeat(pa.scalar(address, pa.string()), count),
        _queue_column(columns[QUEUE], queue_name),
        seqs,
        timestamps(millis),
        pa.array(columns[PRIORITY], pa.int32()),
        pc.not_equal(pc.bit_wise_and(pa.array(columns[FLAGS], pa.uint8()), _PERSISTENT_FLAG), _ZERO_FLAGS),
        headers,
        bodies,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _all_decode(columns: list[tuple], ends: Sequence[int],  # type: ignore[type-arg]
                parts_at: tuple[list[int], list[int], list[int]]) -> bool:
    """Whether every row's codec head is version 1 and describes its message's length
    exactly (the usual answer, checked column-wise; `_problems` says which rows fail):
    the lengths table its fields place (before header text and body) starts right after
    the head."""
    count = len(ends)
    if not count:
        return True
    if columns[VERSION].count(_CODEC_VERSION) != count:
        return False
    starts = map(sub, ends, columns[MESSAGE_LENGTH])  # where each message starts
    return list(map(sub, parts_at[0], starts)).count(CODEC_HEAD.size) == count


def _parts_at(columns: list[tuple], ends: Sequence[int]) -> tuple[list[int], list[int], list[int]]:  # type: ignore[type-arg]
    """Where each row's header lengths table, header text and body start, counted back from
    where its message ends by the lengths its codec head gives."""
    bodies_at = list(map(sub, ends, columns[BODY_LENGTH]))
    texts_at = list(map(sub, bodies_at, columns[HEADER_BYTES]))
    tables_at = list(map(sub, texts_at, map(mul, columns[HEADER_COUNT], repeat(6))))
    return tables_at, texts_at, bodies_at


def _problems(rows: Sequence[tuple]) -> list[RowProblem]:  # type: ignore[type-arg]
    """Rows whose codec head does not describe their message's length (what
    `message_codec.read_head` checks; the header lengths are checked with the headers)."""
    problems = []
    for row in rows:
        if row[VERSION] == _CODEC_VERSION and (
                CODEC_HEAD.size + 6 * row[HEADER_COUNT] + row[HEADER_BYTES] + row[BODY_LENGTH]
                == row[MESSAGE_LENGTH]):
            continue
        if row[VERSION] == _BAD:
            reason = f"encoded message too short: {row[MESSAGE_LENGTH]} bytes"
        elif row[VERSION] != _CODEC_VERSION:
            reason = f"unknown message codec version {row[VERSION]}"
        else:
            described = CODEC_HEAD.size + 6 * row[HEADER_COUNT] + row[HEADER_BYTES] + row[BODY_LENGTH]
            reason = f"fields describe {described} bytes, got {row[MESSAGE_LENGTH]}"
        problems.append(RowProblem(row[ORDINAL], row[MESSAGE_ID], reason))
    return problems


def _slices(data: bytes | memoryview, cuts: list[int]) -> pa.Array:
    """A binary array over `data` itself whose elements run from each cut to the next."""
    large = cuts[-1] >= 1 << 31
    offsets = pa.array(cuts, pa.int64() if large else pa.int32())
    kind = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(kind, len(cuts) - 1, [None, offsets.buffers()[1], pa.py_buffer(data)])


def _value_bytes(part: pa.Array) -> tuple[pa.Buffer, pa.Array]:
    """A freshly taken binary array's values buffer (all of it its own) and its offsets as an
    int64 array rebased to 0 (`count + 1` of them)."""
    wide = part.type == pa.large_binary()
    offsets = pa.Array.from_buffers(pa.int64() if wide else pa.int32(), len(part) + 1,
                                    [None, part.buffers()[1]], offset=part.offset).cast(pa.int64())
    first = offsets[0].as_py()
    data = part.buffers()[2] or pa.py_buffer(b"")
    if first or part.offset:
        offsets = pc.subtract(offsets, pa.scalar(first, pa.int64()))
        data = data.slice(first)
    return data, offsets


def _headers(parts: pa.Array, count: int, header_counts: Sequence[int]) -> pa.Array:
    """The `headers` map column from the rows' lengths tables and header texts, in Arrow
    kernels only (a Python int per header token cost more than the rest of a row);
    `_HeaderTrouble` if some row's do not decode.

    A lengths table is `<HI` pairs (name length, value length) packed 6 bytes each: all
    rows' tables laid end to end hold pair j's name length in bytes 6j, 6j + 1 and its value
    length in bytes 6j + 2 to 6j + 5, little-endian."""
    total = sum(header_counts)
    tables, _ = _value_bytes(parts.take(_every(0, count, 4)))
    text, text_offsets = _value_bytes(parts.take(_every(1, count, 4)))
    if tables.size < 6 * total:
        raise _HeaderTrouble("header lengths table shorter than its count says")
    table_bytes = pa.Array.from_buffers(pa.uint8(), 6 * total, [None, tables])
    names, values = _little_endian(table_bytes, total, 0, 2), _little_endian(table_bytes, total, 2, 4)
    ends = pc.cumulative_sum(pc.add(names, values))  # where each pair's value ends in `text`
    if total and ends[total - 1].as_py() >= 1 << 31:
        raise _HeaderTrouble("header text of one batch past 2 GiB")
    starts = pc.subtract(ends, pc.add(names, values))
    # token offsets: name start, value start, ... interleaved, then the end of the text
    both = pa.concat_arrays([starts, pc.add(starts, names), ends.slice(total - 1) if total else
                             pa.array([0], pa.int64())])
    token_offsets = both.take(_interleaved(total)).cast(pa.int32())
    map_offsets = pc.cumulative_sum(pa.array([0, *header_counts], pa.int32()))
    # each row's tokens fill its header text exactly (message_codec's check)
    row_starts = token_offsets.take(pc.multiply(map_offsets, pa.scalar(2, pa.int32())))
    if not pc.all(pc.equal(row_starts.cast(pa.int64()), text_offsets)).as_py():
        raise _HeaderTrouble("header lengths do not add up")
    tokens = pa.Array.from_buffers(pa.binary(), 2 * total, [None, token_offsets.buffers()[1], text])
    try:
        return header_map(tokens, map_offsets)
    except pa.ArrowInvalid as exc:  # not UTF-8 (or a lone surrogate, which Arrow strings cannot hold)
        raise _HeaderTrouble(str(exc)) from exc


def _little_endian(table_bytes: pa.Array, total: int, at: int, width: int) -> pa.Array:
    """int64 numbers of `width` bytes at byte `at` of each of `total` 6-byte pairs, read
    byte by byte (so no assumption on the machine's byte order)."""
    number = table_bytes.take(_every(at, total, 6)).cast(pa.int64())
    for k in range(1, width):
        byte = table_bytes.take(_every(at + k, total, 6)).cast(pa.int64())
        number = pc.bit_wise_or(number, pc.shift_left(byte, pa.scalar(8 * k, pa.int64())))
    return number


def _interleaved(total: int) -> pa.Array:
    """Indices 0, total, 1, total + 1, ..., total - 1, 2 total - 1, then 2 total: the order
    that interleaves two arrays of `total` laid end to end, and the element after them."""
    tokens, one = _every(0, 2 * total, 1), pa.scalar(1, pa.int32())
    index = pc.add(pc.shift_right(tokens, one),
                   pc.multiply(pc.bit_wise_and(tokens, one), pa.scalar(total, pa.int32())))
    return pa.concat_arrays([index, pa.array([2 * total], pa.int32())])


def header_map(tokens: pa.Array, map_offsets: pa.Array) -> pa.Array:
    """The `headers` column from binary tokens (name, value, name, value, ...) and each row's
    first pair; `pa.ArrowInvalid` if a token is not UTF-8."""
    count = len(tokens)
    keys = tokens.take(_every(0, count // 2, 2)).cast(pa.string())
    values = tokens.take(_every(1, count // 2, 2)).cast(pa.string())
    return pa.MapArray.from_arrays(map_offsets, keys, values).cast(HEADERS_TYPE)


def _header_problems(data: bytes | memoryview, rows: Sequence[tuple], ends: Sequence[int]  # type: ignore[type-arg]
                     ) -> list[RowProblem]:
    """The rows whose headers `message_codec` would not decode, or Arrow not hold."""
    view = memoryview(data)
    problems = []
    for row, end in zip(rows, ends, strict=True):
        message = view[end - row[MESSAGE_LENGTH]:end]
        try:
            _f, _p, _i, _e, _t, lengths, text_at, body_at = read_head(message)
            decode_headers(message[text_at:body_at], lengths)
            str(message[text_at:body_at], "utf-8")
        except CodecError as exc:
            problems.append(RowProblem(row[ORDINAL], row[MESSAGE_ID], str(exc)))
        except UnicodeDecodeError as exc:
            problems.append(RowProblem(row[ORDINAL], row[MESSAGE_ID], f"header text is not UTF-8: {exc}"))
    return problems


def _queue_column(queues: Sequence[Hashable], queue_name: Callable[[Hashable], str | None]) -> pa.Array:
    names = {queue: queue_name(queue) for queue in set(queues)}
    if len(names) == 1:
        (name,) = names.values()
        return pa.repeat(pa.scalar(name, pa.string()), len(queues))
    return pa.array(list(map(names.__getitem__, queues)), pa.string())


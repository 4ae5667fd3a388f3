"""A range read's answer as parts, with page-file spans shipped as they are: the wire of
`GET /api/streams/{queue}/read?...&pages=raw` (integrations/stream_api.py) and its reader
on the executors (spark/stream.py).

Why: a broker is one process, and decoding the paged records of a range into Arrow columns
took about half of its CPU per served message, so its serving rate bounded the whole stream
while Spark's Python workers, one per core, waited. With `pages=raw` a span of a page whose
records are all the queue's to serve (the usual span of a backlog: `PagedBlock.whole`) is
sent as the page's own bytes, plus what the broker found in it; the executor locates and
decodes it with the same decoder (`page_decode`), the work spread over the query's tasks.
Everything else (messages in memory, the spans the broker picks rows from, a selector's
reads) still comes as Arrow record batches built by the broker.

A part is a head (`_HEAD`: kind, length of its JSON meta, length of its payload), the meta,
then the payload:

- `H` (hello, first): meta `{"address", "queue"}`, the names the rows' columns carry;
- `B`: payload one Arrow IPC record batch message of the read schema (`RecordBatch.serialize`);
- `S`: payload a span of whole page frames; meta `{"page", "version", "ordinal", "rows",
  "first_id", "last_id", "txids"}`: the page's frame format, the span's first ordinal, how
  many records of it the broker serves, their first and last ids, and the transactions
  (TX_BATCH records) whose records it serves;
- `E` (end, last): a read without it was cut;
- `X` (instead of `E`): meta `{"error"}`, the broker cannot go on (a stored message that
  does not decode): the read fails naming it, where a cut read would be asked again.

The reader trusts nothing it cannot check: a span that does not locate to exactly the rows
the broker announced (count, first and last id) fails the read. The broker walks a span it
ships without computing its frames' CRCs (`paged_rows.page_blocks`); the reader verifies
every one, and a damaged frame (`SpanDamaged`) makes it ask for the rest of the range as
Arrow (`pages=arrow`), which the broker builds from verified frames only, reading past
damage as every page reader does.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import pyarrow as pa

from pagemq.spark.encoded_rows import EncodedRows
from pagemq.spark.page_decode import FLAGS, MESSAGE_ID, build_batch, locate
from pagemq.spark.schema import ARROW_SCHEMA
from pagemq.storage.message_codec import CodecError
from pagemq.storage.paging.page_format import PERSISTENT, FrameDamage

__all__ = ["CONTENT_TYPE", "RangeDecodeError", "Span", "SpanDamaged", "batch_head", "end_part",
           "failure_part", "hello_part", "read_parts", "span_batches", "span_head"]

CONTENT_TYPE = "application/x-pagemq-range"
_HEAD = struct.Struct("<cIQ")  # kind, meta length, payload length
_MAX_META = 1 << 20
_BATCH_ROWS = 8192  # rows per batch when a span's messages are built one by one


class RangeDecodeError(ValueError):
    """A range read's answer is not what its parts announced (or not parts at all)."""


class SpanDamaged(RangeDecodeError):
    """A shipped span holds a frame that does not verify (damage on disk, which the broker
    did not look for): ask for the rest of the range as Arrow, which reads past it."""


@dataclass(frozen=True, slots=True)
class Span:
    """What the broker found in a span it ships as it is (`S` part's meta)."""

    page: int
    version: int
    ordinal: int
    rows: int
    first_id: int
    last_id: int
    txids: tuple[int, ...]


def _head(kind: bytes, meta: dict[str, Any] | None, payload: int) -> bytes:
    text = json.dumps(meta, separators=(",", ":")).encode() if meta is not None else b""
    return _HEAD.pack(kind, len(text), payload) + text


def hello_part(address: str, queue: str) -> bytes:
    return _head(b"H", {"address": address, "queue": queue}, 0)


def batch_head(payload: int) -> bytes:
    """The head of a `B` part whose payload (`payload` bytes) follows."""
    return _head(b"B", None, payload)


def span_head(span: Span, payload: int) -> bytes:
    """The head of an `S` part whose payload, the span's bytes, follows."""
    meta = {"page": span.page, "version": span.version, "ordinal": span.ordinal, "rows": span.rows,
            "first_id": span.first_id, "last_id": span.last_id, "txids": list(span.txids)}
    return _head(b"S", meta, payload)


def end_part() -> bytes:
    return _head(b"E", None, 0)


def failure_part(problem: str) -> bytes:
    """The last part of an answer the broker cannot go on with (a stored message that does
    not decode): the reader fails at once, naming it, instead of asking again."""
    return _head(b"X", {"error": problem}, 0)


class _Readable(Protocol):
    def read(self, amount: int, /) -> bytes: ...


def _exactly(stream: _Readable | BinaryIO, amount: int) -> bytes:
    """`amount` bytes, or EOFError: an answer cut short (the caller asks again)."""
    data = stream.read(amount)
    if len(data) == amount:
        return data
    pieces = [data]
    got = len(data)
    while got < amount:
        more = stream.read(amount - got)
        if not more:
            raise EOFError(f"range read cut: {got} of a part's {amount} bytes came")
        pieces.append(more)
        got += len(more)
    return b"".join(pieces)


def read_parts(stream: _Readable | BinaryIO, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The record batches of a parts answer, in order (spans decoded here). EOFError when
    the answer ends before its `E` part (cut: ask again after the last row given);
    RangeDecodeError when a part is not what it says."""
    address = queue = None
    while True:
        kind, meta_length, payload_length = _HEAD.unpack(_exactly(stream, _HEAD.size))
        if meta_length > _MAX_META:
            raise RangeDecodeError(f"a part's meta of {meta_length} bytes: not a pagemq range answer")
        meta = json.loads(_exactly(stream, meta_length)) if meta_length else None
        if kind == b"H":
            address, queue = str(meta["address"]), str(meta["queue"])  # type: ignore[index]
            continue
        if kind == b"E":
            return
        if kind == b"X":
            raise RangeDecodeError(f"the broker cannot serve the range: {(meta or {}).get('error')}")
        payload = _exactly(stream, payload_length)
        if kind == b"B":
            yield pa.ipc.read_record_batch(pa.py_buffer(payload), ARROW_SCHEMA)
        elif kind == b"S":
            if address is None or queue is None:
                raise RangeDecodeError("a span came before the answer's hello part")
            assert isinstance(meta, dict)
            span = Span(int(meta["page"]), int(meta["version"]), int(meta["ordinal"]), int(meta["rows"]),
                        int(meta["first_id"]), int(meta["last_id"]), tuple(map(int, meta["txids"])))
            yield from span_batches(payload, span, address, queue, include_headers)
        else:
            raise RangeDecodeError(f"unknown part {kind!r} in a range answer")


def span_batches(data: bytes, span: Span, address: str, queue: str,
                 include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The rows of a shipped span, as the broker would have built them: in bulk
    (`build_batch`), or, when a message does not decode so, one by one from its stored
    bytes (`EncodedRows`, the broker's record path), which fails on a message that does not
    decode at all, as the broker's read would (RangeDecodeError naming it)."""
    damage: list[FrameDamage] = []
    located = locate(data, 0, len(data), version=span.version, ordinal=span.ordinal,
                     committed=frozenset(span.txids), damage=damage)
    if damage:
        lost = "" if damage[0].first_lost is None else f", the record of ordinal {damage[0].first_lost}"
        raise SpanDamaged(f"span of page {span.page} from ordinal {span.ordinal}: damaged, "
                          f"{damage[0].reason} of the span{lost}")
    ids = located.columns[MESSAGE_ID]
    if len(ids) != span.rows or not len(ids) or ids[0] != span.first_id or ids[-1] != span.last_id:
        found = f"{len(ids)} rows" + (f", ids {ids[0]}..{ids[-1]}" if len(ids) else "")
        raise RangeDecodeError(
            f"span of page {span.page} from ordinal {span.ordinal}: the broker announced {span.rows} rows, "
            f"ids {span.first_id}..{span.last_id}; found {found}")
    batch, problems = build_batch(located, address=address, seq_base=0, queue_name=lambda _queue: queue,
                                  include_headers=include_headers, seq_from_id=True)
    if not problems:
        yield batch
        return
    del batch
    encoded = EncodedRows(address, queue, include_headers=include_headers)
    for i, row in enumerate(located.rows):
        try:
            encoded.add(row[MESSAGE_ID], bytes(located.message(i)), bool(row[FLAGS] & PERSISTENT))
        except CodecError as exc:
            raise RangeDecodeError(f"message {row[MESSAGE_ID]} on page {span.page} does not decode: "
                                   f"{exc}") from exc
        if encoded.count >= _BATCH_ROWS:
            yield encoded.batch()
    if encoded.count:
        yield encoded.batch()

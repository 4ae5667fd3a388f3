"""Rows of the read schema built in bulk from messages as stored (the message codec's bytes):
what the broker's streaming range reads serve (integrations/stream_api.py).

`arrow_rows.ArrowRows.add_encoded` decodes each message's headers into a dict and copies its
body, then makes Arrow arrays of those Python objects, element by element. Here each message
costs only its head's unpacking in Python: the bodies are joined once into the `body`
column's buffer (its offsets are the running sum of their lengths), the header texts into
one buffer cut into keys and values by their stored lengths, which Arrow takes apart and
validates as UTF-8 in C. Both builders give the same rows (tests/spark/
test_spark_encoded_rows.py).

Imports pyarrow only (no PySpark, no numpy): the broker imports it lazily, as arrow_rows.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pagemq.spark.arrow_rows import ArrowRows
from pagemq.spark.page_decode import HEADERS_TYPE, header_map
from pagemq.spark.schema import ARROW_SCHEMA, timestamps
from pagemq.storage.message_codec import read_head

__all__ = ["EncodedRows"]

_MAX_BUFFER = (1 << 31) - 1  # int32 offsets: a chunk is cut well below this (CHUNK_BYTES)


class EncodedRows:
    """Encoded messages of one queue gathered, one record batch of `ARROW_SCHEMA` at a time.

    `bytes` is about what the rows take (the encoded messages), for callers bounding a batch
    by size; `include_headers=False` leaves the `headers` column null."""

    def __init__(self, address: str, queue: str | None, *, include_headers: bool = True) -> None:
        self.address = address
        self.queue = queue
        self.include_headers = include_headers
        self._clear()

    def _clear(self) -> None:
        self.count = 0
        self.bytes = 0
        self._ids: list[int] = []
        self._timestamps: list[int] = []
        self._priorities: list[int] = []
        self._persistent: list[bool] = []
        self._parts: list[bytes] = []
        self._bodies: list[memoryview] = []
        self._body_ends: list[int] = [0]  # the body column's offsets
        self._texts: list[memoryview] = []  # header texts: key0 value0 key1 value1 ...
        self._lengths: list[int] = []  # of each key and value, in that order
        self._pairs: list[int] = [0]  # the headers column's offsets: pairs so far

    def add(self, message_id: int, data: bytes, persistent: bool) -> None:
        """One message (CodecError if its bytes do not add up; nothing added then)."""
        _flags, priority, _id, _expiration, timestamp, lengths, text_at, body_at = read_head(data)
        body_length = len(data) - body_at
        if self._body_ends[-1] + body_length > _MAX_BUFFER:
            raise ValueError("a batch of encoded rows holds at most 2 GiB of bodies: take a batch first")
        view = memoryview(data)
        self.count += 1
        self.bytes += len(data)
        self._ids.append(message_id)
        self._timestamps.append(timestamp)
        self._priorities.append(priority)
        self._persistent.append(persistent)
        self._parts.append(data)
        self._bodies.append(view[body_at:])
        self._body_ends.append(self._body_ends[-1] + body_length)
        if self.include_headers:
            if lengths:
                self._texts.append(view[text_at:body_at])
                self._lengths.extend(lengths)
            self._pairs.append(self._pairs[-1] + len(lengths) // 2)

    def batch(self) -> pa.RecordBatch:
        """The rows added since the last batch, as one record batch of `ARROW_SCHEMA`."""
        count = self.count
        try:
            headers = self._headers()
        except pa.ArrowInvalid:
            return self._decoded()  # header text Arrow does not take as UTF-8: as ArrowRows does
        bodies = pa.Array.from_buffers(pa.binary(), count, [
            None, pa.array(self._body_ends, pa.int32()).buffers()[1], pa.py_buffer(b"".join(self._bodies))])
        millis = pa.array(self._timestamps, pa.int64())
        ids = pa.array(self._ids, pa.int64())
        columns = [
            pc.cast(ids, pa.string()),
            pa.repeat(pa.scalar(self.address, pa.string()), count),
            pa.repeat(pa.scalar(self.queue, pa.string()), count),
            ids,
            timestamps(millis),
            pa.array(self._priorities, pa.int32()),
            pa.array(self._persistent, pa.bool_()),
            headers,
            bodies,
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)

    def _headers(self) -> pa.Array:
        if not self.include_headers:
            return pa.nulls(self.count, HEADERS_TYPE)
        lengths = self._lengths
        ends = pc.cumulative_sum(pa.array(lengths, pa.int32()))
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), ends])
        texts = pa.Array.from_buffers(pa.binary(), len(lengths), [
            None, offsets.buffers()[1], pa.py_buffer(b"".join(self._texts))])
        return header_map(texts, pa.array(self._pairs, pa.int32()))

    def _decoded(self) -> pa.RecordBatch:
        rows = ArrowRows(self.address, include_headers=self.include_headers)
        for message_id, data, persistent in zip(self._ids, self._parts, self._persistent, strict=True):
            rows.add_encoded(message_id, self.queue, message_id, data, persistent)
        self._clear()
        return rows.batch()

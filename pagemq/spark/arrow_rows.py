"""Rows of the read schema (`schema.ARROW_SCHEMA`) built column by column into Arrow record
batches: shared by the batch reader (page files, `page_scan`) and the broker's streaming
range reads (`integrations/stream_api.py`), so both hand Spark the same bytes for a message.

Imports pyarrow only (no PySpark): the broker imports this module lazily, when a streaming
range is first read, and only if pyarrow is installed (`pagemq[spark]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from pagemq.spark.schema import ARROW_SCHEMA, timestamps
from pagemq.storage.message_codec import decode_headers, read_head

if TYPE_CHECKING:
    from pagemq.core.message import Message

__all__ = ["ArrowRows"]

_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type


class ArrowRows:
    """Column lists of the rows added so far, turned into one record batch at a time.

    `include_headers=False` leaves the `headers` column null (smaller batches when a query
    does not want them). `bytes` is about what the rows' bodies and headers take, for
    callers bounding a batch by size."""

    def __init__(self, address: str, *, include_headers: bool = True) -> None:
        self.address = address
        self.include_headers = include_headers
        self._clear()

    def _clear(self) -> None:
        self.count = 0
        self.bytes = 0
        self.ids: list[str] = []
        self.queues: list[str | None] = []
        self.seqs: list[int] = []
        self.timestamps: list[int] = []
        self.priorities: list[int] = []
        self.persistent: list[bool] = []
        self.offsets: list[int] = [0]
        self.keys: list[str] = []
        self.values: list[str] = []
        self.bodies: list[bytes] = []

    def add(self, message_id: int, queue: str | None, seq: int, message: Message, persistent: bool) -> None:
        self.count += 1
        self.ids.append(str(message_id))
        self.queues.append(queue)
        self.seqs.append(seq)
        self.timestamps.append(message.timestamp)
        self.priorities.append(message.priority)
        self.persistent.append(persistent)
        body = message.body
        self.bodies.append(body)
        self.bytes += len(body)
        if self.include_headers:
            headers = message.headers
            self.keys.extend(headers)
            self.values.extend(headers.values())
            self.offsets.append(len(self.keys))

    def add_encoded(self, message_id: int, queue: str | None, seq: int, data: bytes | memoryview,
                    persistent: bool) -> None:
        """`add` from a message's stored bytes (the message codec's), without making a
        `Message` of them first: what a paged record holds."""
        _flags, priority, _id, _expiration, timestamp, lengths, text_at, body_at = read_head(data)
        self.count += 1
        self.ids.append(str(message_id))
        self.queues.append(queue)
        self.seqs.append(seq)
        self.timestamps.append(timestamp)
        self.priorities.append(priority)
        self.persistent.append(persistent)
        body = bytes(data[body_at:])
        self.bodies.append(body)
        self.bytes += len(body)
        if self.include_headers:
            headers = decode_headers(data[text_at:body_at], lengths)
            self.keys.extend(headers)
            self.values.extend(headers.values())
            self.offsets.append(len(self.keys))

    def batch(self) -> pa.RecordBatch:
        """The rows added since the last batch, as one record batch of `ARROW_SCHEMA`."""
        millis = pa.array(self.timestamps, pa.int64())
        if self.include_headers:
            keys, values = pa.array(self.keys, pa.string()), pa.array(self.values, pa.string())
            offsets = pa.array(self.offsets, pa.int32())
            headers = pa.MapArray.from_arrays(offsets, keys, values).cast(_HEADERS_TYPE)
        else:
            headers = pa.nulls(self.count, _HEADERS_TYPE)
        columns = [
            pa.array(self.ids, pa.string()),
            pa.array([self.address] * self.count, pa.string()),
            pa.array(self.queues, pa.string()),
            pa.array(self.seqs, pa.int64()),
            timestamps(millis),
            pa.array(self.priorities, pa.int32()),
            pa.array(self.persistent, pa.bool_()),
            headers,
            pa.array(self.bodies, pa.binary()),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)

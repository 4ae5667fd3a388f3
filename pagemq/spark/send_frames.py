"""The sink's SEND frames for a slice of rows, encoded column-wise by Arrow.

Encoding a frame per row in Python (`protocol.stomp.frames.encode_frame`: a header list,
escaping checks, joins) costs ~15 µs a row, more than the broker spends storing the message.
Here a slice of a record batch becomes one `bytes` of SEND frames with Arrow kernels only:
each frame is the concatenation (`binary_join_element_wise`) of a constant head
(`SEND`, `destination`, `transaction`), the row's own headers (from its `headers` map:
escaped with `replace_substring`, one line per entry, joined per row with `binary_join`),
the constant `persistent` line, `_AMQ_DUPL_ID` (a constant prefix and the row's index),
`content-length` and the body. The frames are exactly what `encode_frame` makes of the same
headers (STOMP 1.2 escaping: `\\`, LF, CR and `:` in names and values), plus a
`content-length` for an empty body too.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pagemq.protocol.stomp import frames
from pagemq.protocol.stomp.batch import BATCH_HEADER, BATCH_VERSION, escape_value

__all__ = ["OWN_HEADERS", "SendTemplate", "batch_headers", "body_column", "encode_batch_send", "encode_sends",
           "escape", "split_rows"]

# Headers the sink sets itself (or that would make a SEND a batch SEND); a `headers` column
# entry by these names is not sent.
OWN_HEADERS = ("destination", "receipt", "content-length", "transaction", "_AMQ_DUPL_ID", BATCH_HEADER)
_ESCAPES = (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), (":", "\\c"))
_LITTLE = sys.byteorder == "little"
# Typed scalars for compute calls (a Python str costs pyarrow a failed import per call: schema.timestamps).
_COLON, _NEWLINE, _EMPTY = (pa.scalar(text, pa.string()) for text in (":", "\n", ""))


def escape(text: str) -> str:
    """A header name or value escaped for STOMP 1.2 (the protocol's own escaping)."""
    return frames.escape(text, "1.2")


class SendTemplate:
    """What every SEND of one task has in common: destination, persistence, the id prefix."""

    def __init__(self, destination: str, *, persistent: bool, duplicate_prefix: str) -> None:
        self.destination = destination
        self.persistent = persistent
        self.duplicate_prefix = duplicate_prefix  # the id less the row: spark:<job>:<batch>:<partition>:

    def head(self, transaction: str | None) -> bytes:
        lines = f"SEND\ndestination:{escape(self.destination)}\n"
        if transaction is not None:
            lines += f"transaction:{escape(transaction)}\n"
        return lines.encode("utf-8", "surrogatepass")

    def batch_head(self, transaction: str, size: int) -> bytes:
        """A batch SEND's head: what its rows share, and the length of its body."""
        persistent = "persistent:true\n" if self.persistent else ""
        return (f"SEND\ndestination:{escape(self.destination)}\ntransaction:{escape(transaction)}\n"
                f"{BATCH_HEADER}:{BATCH_VERSION}\n{persistent}content-length:{size}\n\n"
                ).encode("utf-8", "surrogatepass")

    def batch_id_prefix(self) -> bytes:
        """`_AMQ_DUPL_ID:<prefix>` for a batch's own header lines: a colon in a value needs no
        escape there (the line splits at its first colon), so the broker unescapes nothing."""
        return f"_AMQ_DUPL_ID:{escape_value(self.duplicate_prefix)}".encode("utf-8", "surrogatepass")

    def middle(self) -> bytes:
        persistent = "persistent:true\n" if self.persistent else ""
        return f"{persistent}_AMQ_DUPL_ID:{escape(self.duplicate_prefix)}".encode("utf-8", "surrogatepass")


def body_column(batch: pa.RecordBatch) -> pa.Array:
    """The `body` column as binary (a string column's UTF-8 bytes; null is empty)."""
    body = batch.column("body")
    if body.type != pa.binary():
        body = body.cast(pa.binary())
    return body.fill_null(b"") if body.null_count else body


def encode_sends(template: SendTemplate, bodies: pa.Array, headers: pa.Array | None, first_row: int,
                 transaction: str | None) -> bytes:
    """The SEND frames of these rows, one after the other: rows `first_row`, `first_row + 1`, ...
    `bodies` is binary (see `body_column`), `headers` a map<string,string> column or None."""
    count = len(bodies)
    if not count:
        return b""
    rows = pa.array(range(first_row, first_row + count), pa.int64()).cast(pa.string()).cast(pa.binary())
    lengths = pc.binary_length(bodies).cast(pa.string()).cast(pa.binary())
    parts: list[pa.Array | pa.Scalar] = [pa.scalar(template.head(transaction), pa.binary())]
    if headers is not None:
        parts.append(_header_lines(headers))
    parts += [pa.scalar(template.middle(), pa.binary()), rows, pa.scalar(b"\ncontent-length:", pa.binary()),
              lengths, pa.scalar(b"\n\n", pa.binary()), bodies, pa.scalar(b"\x00", pa.binary())]
    frames = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.binary()))
    return _concatenated(frames)


def encode_batch_send(template: SendTemplate, bodies: pa.Array, own_headers: pa.Array, transaction: str
                      ) -> bytes:
    """One batch SEND (`protocol.stomp.batch`) of these rows, for a broker that takes them:
    `own_headers` is each row's header text (`batch_headers`), the bodies go as they are."""
    count = len(bodies)
    lengths = pa.concat_arrays([pc.binary_length(own_headers).cast(pa.uint32()),
                                pc.binary_length(bodies).cast(pa.uint32())])
    if _LITTLE:  # Arrow's buffer is in the host's order: the layout's, here
        layout: bytes | memoryview = memoryview(lengths.buffers()[1])[lengths.offset * 4:
                                                                      (lengths.offset + 2 * count) * 4]
    else:
        swapped = array("I", lengths.to_pylist())
        swapped.byteswap()
        layout = swapped.tobytes()
    texts, values = _concatenated(own_headers), _concatenated(bodies)
    size = 4 + len(layout) + len(texts) + len(values)
    head = template.batch_head(transaction, size)
    return b"".join((head, count.to_bytes(4, "little"), layout, texts, values, b"\x00"))


def batch_headers(template: SendTemplate, headers: pa.Array | None, first_row: int, count: int) -> pa.Array:
    """Each row's own headers in a batch SEND: its `headers` entries (as `encode_sends` sends
    them) and its `_AMQ_DUPL_ID`, one `name:value\\n` line each; binary."""
    rows = pa.array(range(first_row, first_row + count), pa.int64()).cast(pa.string()).cast(pa.binary())
    parts: list[pa.Array | pa.Scalar] = []
    if headers is not None:
        parts.append(_header_lines(headers))
    parts += [pa.scalar(template.batch_id_prefix(), pa.binary()), rows, pa.scalar(b"\n", pa.binary())]
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.binary()))


def _header_lines(headers: pa.Array) -> pa.Array:
    """Per row, its `name:value\\n` lines, escaped; entries with a null value, or named as
    one of `OWN_HEADERS`, left out."""
    offsets = headers.offsets
    start = offsets[0].as_py()
    size = offsets[-1].as_py() - start
    keys, values = headers.keys.slice(start, size), headers.items.slice(start, size)
    lines = pc.binary_join_element_wise(_escaped(keys), _COLON, _escaped(values.fill_null(_EMPTY)), _NEWLINE,
                                        _EMPTY)
    dropped = pc.or_(pc.is_null(values), pc.is_in(keys, pa.array(OWN_HEADERS, pa.string())))
    lines = pc.if_else(dropped, _EMPTY, lines)
    per_row = pa.ListArray.from_arrays(pc.subtract(offsets, pa.scalar(start, offsets.type)), lines)
    joined = pc.binary_join(per_row, _EMPTY)
    return joined.fill_null(_EMPTY).cast(pa.binary())


def _escaped(texts: pa.Array) -> pa.Array:
    for raw, escaped in _ESCAPES:
        texts = pc.replace_substring(texts, raw, escaped)
    return texts


def _concatenated(frames: pa.Array) -> bytes:
    """The bytes of a freshly built binary array's values, in order."""
    offsets = frames.buffers()[1]
    ends = memoryview(offsets).cast("i")
    first, last = ends[frames.offset], ends[frames.offset + len(frames)]
    return memoryview(frames.buffers()[2])[first:last].tobytes()


def split_rows(lengths: Sequence[int], rows: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) slices of at most `rows` rows and about `size` bytes each (a row larger
    than `size` is a slice of its own)."""
    slices = []
    start, total = 0, 0
    for n, length in enumerate(lengths):
        if n > start and (n - start >= rows or total + length > size):
            slices.append((start, n))
            start, total = n, 0
        total += length
    if start < len(lengths):
        slices.append((start, len(lengths)))
    return slices

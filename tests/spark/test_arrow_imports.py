"""The Arrow code on the per-batch paths gives pyarrow's compute functions typed scalars:
given a Python number or string, pyarrow tries to import `dateutil` on every call (and,
without it, fails: ~150 µs each, more on an executor whose `sys.path` begins with Spark's
zip files), which cost the stream's executors more than decoding some batches."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

from pagemq.core.message import Message
from pagemq.spark.arrow_rows import ArrowRows
from pagemq.spark.encoded_rows import EncodedRows
from pagemq.spark.page_decode import build_batch, locate
from pagemq.spark.send_frames import SendTemplate, batch_headers, body_column, encode_batch_send, encode_sends
from pagemq.storage.message_codec import encode_message
from pagemq.storage.paging.page_format import PagedRecord, encode_frame


class _Imports:
    """A meta path finder that notes every module Python looks for (and finds nothing)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        self.asked.append(name)


@contextmanager
def imports_asked() -> Iterator[list[str]]:
    spy = _Imports()
    sys.meta_path.insert(0, spy)
    try:
        yield spy.asked
    finally:
        sys.meta_path.remove(spy)


def assert_imports_nothing(work: Callable[[], object]) -> None:
    work()  # first, so that what it imports once (lazily, by design) is imported
    with imports_asked() as asked:
        work()
    assert asked == []


def messages() -> list[Message]:
    return [Message(n, "a", {"n": str(n), "k": "v"}, b"x" * 100, persistent=n % 2 == 0,
                    timestamp=1_700_000_000_000 + n) for n in range(1, 50)]


def test_decoding_a_page_span_into_a_batch_imports_nothing() -> None:
    data = b"".join(encode_frame([PagedRecord(m.message_id, (7,), m.persistent, encode_message(m))], n)
                    for n, m in enumerate(messages()))
    located = locate(data, 0, len(data))
    for include_headers, seq_from_id in ((True, True), (False, True), (True, False)):  # stream, stream, scan
        assert_imports_nothing(lambda headers=include_headers, from_id=seq_from_id: build_batch(
            located, address="a", seq_base=5 << 32, queue_name=lambda _queue: "q",
            seq_from_id=from_id, include_headers=headers))


def test_building_rows_from_stored_messages_imports_nothing() -> None:
    def encoded() -> pa.RecordBatch:
        rows = EncodedRows("a", "q")
        for m in messages():
            rows.add(m.message_id, encode_message(m), m.persistent)
        return rows.batch()

    def decoded() -> pa.RecordBatch:
        rows = ArrowRows("a")
        for m in messages():
            rows.add(m.message_id, "q", m.message_id, m, m.persistent)
        return rows.batch()

    assert_imports_nothing(encoded)
    assert_imports_nothing(decoded)


def test_encoding_a_sink_batch_imports_nothing() -> None:
    batch = pa.RecordBatch.from_pydict({
        "body": pa.array([b"b%d" % n for n in range(40)], pa.binary()),
        "headers": pa.array([[("k", "v:1"), ("n", str(n))] for n in range(40)],
                            pa.map_(pa.string(), pa.string())),
    })
    template = SendTemplate("/queue/q", persistent=True, duplicate_prefix="spark:job:1:3:")
    bodies, headers = body_column(batch), batch.column("headers")
    assert_imports_nothing(lambda: encode_sends(template, bodies, headers, 100, "t1"))
    own = batch_headers(template, headers, 100, 40)
    assert_imports_nothing(lambda: batch_headers(template, headers, 100, 40))
    assert_imports_nothing(lambda: encode_batch_send(template, bodies, own, "t1"))

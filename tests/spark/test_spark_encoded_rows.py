"""`EncodedRows` (the streaming range reads' bulk row builder) gives exactly the rows
`ArrowRows.add_encoded` gives, message for message, without Spark."""

from __future__ import annotations

import pytest

from pagemq.core.message import Message
from pagemq.spark.arrow_rows import ArrowRows
from pagemq.spark.encoded_rows import EncodedRows
from pagemq.spark.schema import ARROW_SCHEMA
from pagemq.storage.message_codec import CodecError, encode_message

ADDRESS, QUEUE = "orders", "orders"

MESSAGES = [
    Message(7, ADDRESS, {"n": "0", "content-type": "text/plain"}, b"x" * 1024, persistent=True,
            priority=9, timestamp=1_700_000_000_123),
    Message(9, ADDRESS, {}, b"no headers", priority=0, timestamp=1),
    Message(12, ADDRESS, {"empty": ""}, b"", persistent=True),
    Message(13, ADDRESS, {"ключ": "значение", "emoji": "\U0001f600", "k": "v"}, bytes(range(256))),
    Message(2**53 + 1, ADDRESS, {"": "empty key"}, b"\x00\xff", timestamp=-5),
]


def both(include_headers: bool, messages: list[Message]) -> tuple[object, object]:
    bulk = EncodedRows(ADDRESS, QUEUE, include_headers=include_headers)
    one_by_one = ArrowRows(ADDRESS, include_headers=include_headers)
    for message in messages:
        data = encode_message(message)
        bulk.add(message.message_id, data, message.persistent)
        one_by_one.add_encoded(message.message_id, QUEUE, message.message_id, data, message.persistent)
    return bulk.batch(), one_by_one.batch()


@pytest.mark.parametrize("include_headers", [True, False])
def test_bulk_rows_equal_the_rows_built_one_by_one(include_headers):
    bulk, one_by_one = both(include_headers, MESSAGES)
    assert bulk.schema == ARROW_SCHEMA
    assert bulk.to_pylist() == one_by_one.to_pylist()  # type: ignore[attr-defined]
    assert bulk.num_rows == len(MESSAGES)


def test_a_builder_starts_afresh_after_each_batch_and_many_rows_keep_their_bodies():
    rows = EncodedRows(ADDRESS, QUEUE)
    rows.add(1, encode_message(MESSAGES[0]), True)
    first = rows.batch()
    assert first.num_rows == 1 and rows.count == 0 and rows.bytes == 0
    many = [Message(n, ADDRESS, {"n": str(n)}, f"body-{n}".encode() * (n % 7)) for n in range(1, 5000)]
    for message in many:
        rows.add(message.message_id, encode_message(message), False)
    batch = rows.batch()
    assert batch.column("body").to_pylist() == [m.body for m in many]
    assert [dict(h) for h in batch.column("headers").to_pylist()] == [m.headers for m in many]


def test_bytes_that_do_not_add_up_are_refused_and_add_nothing():
    rows = EncodedRows(ADDRESS, QUEUE)
    data = encode_message(MESSAGES[0])
    with pytest.raises(CodecError):
        rows.add(1, data[:-1], True)
    assert rows.count == 0
    rows.add(1, data, True)
    assert rows.batch().num_rows == 1

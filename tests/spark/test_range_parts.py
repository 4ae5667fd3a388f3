"""The parts wire of `pages=raw` range reads (spark/range_parts.py): a reader decodes what
the broker ships, and refuses what does not add up instead of yielding wrong rows."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from pagemq.core.message import Message
from pagemq.spark.encoded_rows import EncodedRows
from pagemq.spark.range_parts import (
    CONTENT_TYPE,
    RangeDecodeError,
    Span,
    SpanDamaged,
    batch_head,
    end_part,
    failure_part,
    hello_part,
    read_parts,
    span_head,
)
from pagemq.spark.schema import ARROW_SCHEMA
from pagemq.storage.message_codec import CodecError, encode_message
from pagemq.storage.paging.page_format import PagedRecord, encode_frame

ADDRESS, QUEUE = "orders", "orders-q"


def message(n: int) -> Message:
    return Message(n, ADDRESS, {"n": str(n), "kind": "order"}, b"body-%d" % n, persistent=n % 3 != 0,
                   priority=n % 10, timestamp=1_700_000_000_000 + n)


def span_bytes(ids: range, txid: int = 0) -> bytes:
    """Frames of records 0.. (ordinals from 0): one per id, or one TX_BATCH with `txid`."""
    records = [PagedRecord(n, (7,), message(n).persistent, encode_message(message(n)), txid) for n in ids]
    if txid:
        return encode_frame(records, 0)
    return b"".join(encode_frame([record], ordinal) for ordinal, record in enumerate(records))


def answer(*parts: bytes) -> io.BytesIO:
    return io.BytesIO(hello_part(ADDRESS, QUEUE) + b"".join(parts))


def shipped(data: bytes, span: Span) -> bytes:
    return span_head(span, len(data)) + data


def expected_rows(ids: range) -> list[dict[str, object]]:
    rows = EncodedRows(ADDRESS, QUEUE)
    for n in ids:
        rows.add(n, encode_message(message(n)), message(n).persistent)
    return rows.batch().to_pylist()


def test_a_span_and_a_batch_decode_to_the_rows_the_broker_would_have_built() -> None:
    data = span_bytes(range(1, 41))
    built = EncodedRows(ADDRESS, QUEUE)
    built.add(41, encode_message(message(41)), True)
    payload = built.batch().serialize().to_pybytes()
    span = shipped(data, Span(3, 2, 0, 40, 1, 40, ()))
    served = answer(span, batch_head(len(payload)), payload, end_part())
    batches = list(read_parts(served, True))
    assert [batch.schema for batch in batches] == [ARROW_SCHEMA, ARROW_SCHEMA]
    last = dict(expected_rows(range(41, 42))[0], persistent=True)
    assert pa.Table.from_batches(batches).to_pylist() == [*expected_rows(range(1, 41)), last]


def test_a_transactions_records_are_kept_only_when_the_broker_served_them() -> None:
    data = span_bytes(range(1, 11), txid=99)
    served = answer(shipped(data, Span(3, 2, 0, 10, 1, 10, (99,))), end_part())
    assert pa.Table.from_batches(read_parts(served, True)).to_pylist() == expected_rows(range(1, 11))
    with pytest.raises(RangeDecodeError, match=r"announced 10 rows, ids 1\.\.10; found 0 rows"):
        list(read_parts(answer(shipped(data, Span(3, 2, 0, 10, 1, 10, ())), end_part()), True))


@pytest.mark.parametrize("span", [Span(3, 2, 0, 39, 1, 40, ()), Span(3, 2, 0, 40, 2, 40, ()),
                                  Span(3, 2, 0, 40, 1, 41, ())])
def test_a_span_that_does_not_hold_what_the_broker_announced_fails_the_read(span: Span) -> None:
    with pytest.raises(RangeDecodeError, match="span of page 3 from ordinal 0: the broker announced"):
        list(read_parts(answer(shipped(span_bytes(range(1, 41)), span), end_part()), True))


def test_a_damaged_span_is_told_apart_so_the_reader_asks_for_arrow_instead() -> None:
    data = bytearray(span_bytes(range(1, 41)))
    data[200] ^= 0xFF
    expected = ("span of page 3 from ordinal 0: damaged, frame CRC mismatch at offset 107 of the span, "
                "the record of ordinal 1$")
    with pytest.raises(SpanDamaged, match=expected):
        list(read_parts(answer(shipped(bytes(data), Span(3, 2, 0, 40, 1, 40, ()))), True))


def test_an_answer_cut_before_its_end_part_is_an_eof_for_the_reader_to_ask_again() -> None:
    whole = answer(shipped(span_bytes(range(1, 41)), Span(3, 2, 0, 40, 1, 40, ())), end_part()).getvalue()
    for cut in (len(whole) - len(end_part()), len(whole) - 100, 30):
        with pytest.raises(EOFError):
            list(read_parts(io.BytesIO(whole[:cut]), True))


def test_a_message_that_does_not_decode_fails_the_read_naming_it() -> None:
    bad = PagedRecord(5, (7,), True, b"\x01" * 40)  # long enough for a codec head, nonsense
    data = encode_frame([bad], 0)
    with pytest.raises(RangeDecodeError, match="message 5 on page 3 does not decode") as caught:
        list(read_parts(answer(shipped(data, Span(3, 2, 0, 1, 5, 5, ()))), True))
    assert isinstance(caught.value.__cause__, CodecError)


def test_what_is_not_a_parts_answer_is_refused() -> None:
    with pytest.raises(RangeDecodeError, match="unknown part"):
        list(read_parts(io.BytesIO(b"Q" + bytes(12)), True))
    assert CONTENT_TYPE == "application/x-pagemq-range"


def test_a_failure_part_fails_the_read_at_once_with_the_brokers_words() -> None:
    data = span_bytes(range(1, 5))
    failed = failure_part("message 9 on page 3 does not decode")
    stream = answer(shipped(data, Span(3, 2, 0, 4, 1, 4, ())), failed)
    batches = read_parts(stream, True)
    assert next(batches).num_rows == 4
    with pytest.raises(RangeDecodeError, match="the broker cannot serve the range: message 9 on page 3"):
        next(batches)

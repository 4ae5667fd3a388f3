"""The message codec: exact round trips, strict rejection of damaged input, a pinned layout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagemq.core.message import Message
from pagemq.core.message_codec import CodecError, decode_message, encode_message


def _message(**overrides: object) -> Message:
    fields: dict[str, object] = {
        "message_id": 7,
        "address": "orders",
        "headers": {"content-type": "text/plain", "color": "red"},
        "body": b"hello",
        "persistent": True,
        "priority": 9,
        "expiration": 1_700_000_100_000,
        "timestamp": 1_700_000_000_000,
    }
    fields.update(overrides)
    return Message(
        fields["message_id"], fields["address"], fields["headers"], fields["body"],  # type: ignore[arg-type]
        persistent=fields["persistent"], priority=fields["priority"],  # type: ignore[arg-type]
        expiration=fields["expiration"], timestamp=fields["timestamp"],  # type: ignore[arg-type]
    )


def _same(a: Message, b: Message) -> bool:
    return (a.message_id, a.headers, a.body, a.persistent, a.priority, a.expiration, a.timestamp) == (
        b.message_id, b.headers, b.body, b.persistent, b.priority, b.expiration, b.timestamp
    )


def test_round_trip_keeps_every_field_and_takes_the_given_address() -> None:
    original = _message()
    decoded = decode_message(encode_message(original), "dead-letters")
    assert _same(original, decoded)
    assert decoded.address == "dead-letters"
    assert list(decoded.headers) == list(original.headers)  # header order kept


def test_decodes_from_a_memoryview_slice() -> None:
    data = b"prefix" + encode_message(_message())
    assert _same(decode_message(memoryview(data)[6:], "orders"), _message())


def test_non_ascii_and_surrogate_headers_round_trip() -> None:
    headers = {"città": "Zürich ☃", "k": "\udcff lone surrogate", "": ""}
    decoded = decode_message(encode_message(_message(headers=headers)), "a")
    assert decoded.headers == headers


def test_empty_message_round_trips() -> None:
    original = _message(headers={}, body=b"", persistent=False, priority=0, expiration=0, timestamp=0)
    assert _same(decode_message(encode_message(original), "a"), original)


def test_layout_is_pinned() -> None:
    encoded = encode_message(_message(headers={"k": "vv"}, body=b"B", expiration=0, timestamp=2))
    assert encoded.hex() == (
        "0101090007000000000000000000000000000000020000000000000001000300000001000000"
        "010002000000" "6b7676" "42"
    )


@pytest.mark.parametrize("cut", [0, 1, 37, 38, 40, -1])
def test_truncated_input_is_rejected(cut: int) -> None:
    data = encode_message(_message())
    with pytest.raises(CodecError):
        decode_message(data[:cut], "a")


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(CodecError):
        decode_message(encode_message(_message()) + b"\0", "a")


def test_unknown_version_is_rejected() -> None:
    data = bytearray(encode_message(_message()))
    data[0] = 2
    with pytest.raises(CodecError, match="version"):
        decode_message(bytes(data), "a")


def test_unrepresentable_field_raises_codec_error() -> None:
    with pytest.raises(CodecError):
        encode_message(_message(priority=300))
    with pytest.raises(CodecError):
        encode_message(_message(headers={"k" * 70_000: "v"}))


@given(
    headers=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=8),
    body=st.binary(max_size=300),
    message_id=st.integers(0, 2**64 - 1),
    persistent=st.booleans(),
    priority=st.integers(0, 9),
    expiration=st.integers(-(2**63), 2**63 - 1),
)
def test_any_message_round_trips(
    headers: dict[str, str], body: bytes, message_id: int, persistent: bool, priority: int, expiration: int
) -> None:
    original = _message(
        headers=headers, body=body, message_id=message_id, persistent=persistent,
        priority=priority, expiration=expiration,
    )
    assert _same(decode_message(encode_message(original), "a"), original)

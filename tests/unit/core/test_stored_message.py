"""`stored_message`: a message rebuilt from stored bytes without decoding its headers or body
(the journal's in-memory messages at start-up), the same as `decode_message` once read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagemq.core.message import Message, estimate_memory
from pagemq.core.message_codec import CodecError, decode_message, encode_message, stored_message

_SLOTS = [name for name in Message.__slots__ if name != "__weakref__"]


def _message(headers: dict[str, str] | None = None, body: bytes = b"hello") -> Message:
    return Message(
        7, "orders", {"content-type": "text/plain", "color": "red"} if headers is None else headers,
        body, persistent=True, priority=9, expiration=1_700_000_100_000, timestamp=1_700_000_000_000,
    )


def _stored(message: Message, prefix: bytes = b"record") -> Message:
    return stored_message(prefix + encode_message(message), len(prefix), "orders")


def test_every_field_equals_the_decoded_message_once_read() -> None:
    original = _message()
    eager = decode_message(encode_message(original), "orders")
    lazy = _stored(original)
    assert {name: getattr(lazy, name) for name in _SLOTS} == {name: getattr(eager, name) for name in _SLOTS}
    assert list(lazy.headers) == list(original.headers)


def test_headers_and_body_stay_encoded_until_first_read() -> None:
    lazy = _stored(_message())
    assert lazy._encoded is not None  # type: ignore[attr-defined]
    assert (lazy.message_id, lazy.priority, lazy.expiration, lazy.persistent) == (
        7, 9, 1_700_000_100_000, True)
    assert lazy._encoded is not None  # type: ignore[attr-defined]  # none of those decoded
    assert lazy.body == b"hello"
    assert lazy.headers == {"content-type": "text/plain", "color": "red"}
    assert lazy._encoded is None  # type: ignore[attr-defined]  # both read: the bytes are let go


def test_a_value_assigned_before_the_first_read_is_kept() -> None:
    lazy = _stored(_message())
    lazy.headers = {"replaced": "yes"}
    assert lazy.body == b"hello"
    assert lazy.headers == {"replaced": "yes"}


def test_other_missing_attributes_still_raise() -> None:
    lazy = _stored(_message())
    with pytest.raises(AttributeError):
        lazy.no_such_thing  # type: ignore[attr-defined]  # noqa: B018


def test_memory_size_is_the_decoded_messages_for_ascii_headers_and_no_less_otherwise() -> None:
    for headers in ({"content-type": "text/plain", "color": "red"}, {}, {"k": "v" * 300}):
        original = _message(headers, bytes(1024))
        assert _stored(original).memory_size == estimate_memory(original.headers, original.body)
    wide = _message({"città": "Zürich ☃"}, b"x")
    assert _stored(wide).memory_size >= estimate_memory(wide.headers, wide.body)


@pytest.mark.parametrize("damage", ["version", "truncated", "trailing", "lengths", "utf-8"])
def test_bytes_that_would_not_decode_are_refused_at_once(damage: str) -> None:
    """What the broker must not start without reading: refused when rebuilt, not when read."""
    data = bytearray(encode_message(_message({"k": "\xe9t\xe9"})))
    if damage == "version":
        data[0] = 2
    elif damage == "truncated":
        del data[-1]
    elif damage == "trailing":
        data += b"\0"
    elif damage == "lengths":
        data[38] += 1  # key 1 a byte longer, value as long: they no longer add up
    else:
        at = data.index("é".encode())
        data[at:at + 2] = b"\xff\xfe"  # still the same length, not UTF-8
    with pytest.raises(CodecError):
        decode_message(bytes(data), "a")
    with pytest.raises(CodecError):
        stored_message(b"x" + bytes(data), 1, "a")


@given(
    headers=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=8),
    body=st.binary(max_size=300),
    read_body_first=st.booleans(),
)
def test_any_message_reads_back_as_decoded(
    headers: dict[str, str], body: bytes, read_body_first: bool
) -> None:
    original = _message(headers, body)
    lazy = _stored(original, b"\x01\x02")
    if read_body_first:
        assert lazy.body == body
    assert lazy.headers == headers and lazy.body == body

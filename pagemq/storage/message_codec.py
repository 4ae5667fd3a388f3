"""Binary encoding of a `Message` for page files and the journal.

Both stores keep the same bytes for a message, so a message moved between memory, journal
and page files is never re-encoded differently. The address is not stored: it is implied by
the page folder or the journal record that holds the message, and a message can be read
back under another address name (e.g. after a move to a dead-letter address).

Layout (format version 1, little-endian; see docs/formats/page.md, "Encoded message"):

    offset  size  type  field            meaning
    0       1     u8    version          codec format version, 1
    1       1     u8    flags            bit 0: persistent; other bits 0
    2       1     u8    priority         0..9
    3       1     u8    reserved         0
    4       8     u64   message_id       broker-wide message id
    12      8     i64   expiration       ms since the epoch, 0 = never
    20      8     i64   timestamp        ms since the epoch
    28      2     u16   header_count     n
    30      4     u32   header_bytes     length of the header text block
    34      4     u32   body_length      length of the body
    38      6n          lengths          n x (u16 key bytes, u32 value bytes)
    38+6n   h           header text      key0 value0 key1 value1 ... (UTF-8)
    ...     b           body             the message body

Lengths come first, texts after, so decoding is one `struct` call for all lengths and one
UTF-8 decode for all header text (sliced by character offsets when the text is ASCII, the
common case) — this is what keeps decoding above 200k messages/s in CPython.

This module knows bytes and fields only, not the broker's `Message` class (storage does not
import the core): it encodes any object with a message's fields (`EncodableMessage`) and
decodes into fields (`read_head`, `decode_headers`, `decode_fields`). The core builds its
messages from these (`pagemq.core.message_codec`): eagerly, or from the fixed head and the
lengths only, decoding headers and body when first read (a journal's in-memory messages at
start-up).
"""

from __future__ import annotations

import struct
from itertools import chain
from typing import NamedTuple, Protocol

__all__ = ["CODEC_VERSION", "PERSISTENT_FLAG", "CodecError", "EncodableMessage", "MessageFields",
           "check_encoded", "decode_fields", "decode_headers", "encode_message", "read_expiration",
           "read_head"]

CODEC_VERSION = 1
PERSISTENT_FLAG = 0x01
_PERSISTENT = PERSISTENT_FLAG


class EncodableMessage(Protocol):
    """What the codec reads of a message (the core's `Message` is one)."""

    @property
    def message_id(self) -> int: ...
    @property
    def persistent(self) -> bool: ...
    @property
    def priority(self) -> int: ...
    @property
    def expiration(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def headers(self) -> dict[str, str]: ...
    @property
    def body(self) -> bytes: ...


class MessageFields(NamedTuple):
    """A decoded message as storage sees it (tools, readers of page files)."""

    message_id: int
    persistent: bool
    priority: int
    expiration: int
    timestamp: int
    headers: dict[str, str]
    body: bytes

_HEAD = struct.Struct("<BBBxQqqHII")
assert _HEAD.size == 38

_LENGTHS: dict[int, struct.Struct] = {}


class CodecError(ValueError):
    """The bytes are not an encoded message this codec can read (damaged or too new)."""


def _lengths(count: int) -> struct.Struct:
    """One cached Struct per header count: packing all lengths in one call is the fast path."""
    layout = _LENGTHS.get(count)
    if layout is None:
        layout = _LENGTHS[count] = struct.Struct("<" + "HI" * count)
    return layout


def _encoding(count: int) -> struct.Struct:
    """The head and the lengths of a message of `count` headers as one Struct (cached): one
    pack call for both, as this runs for every message stored."""
    layout = _ENCODINGS.get(count)
    if layout is None:
        layout = _ENCODINGS[count] = struct.Struct(_HEAD.format + "HI" * count)
    return layout


_ENCODINGS: dict[int, struct.Struct] = {}


def encode_message(msg: EncodableMessage, prefix: bytes = b"") -> bytes:
    """The message's bytes (after `prefix`: what a caller would otherwise join it to,
    copying it again); raises CodecError if a field cannot be represented."""
    headers = msg.headers
    flat = [*chain.from_iterable(headers.items())]  # name, value, name, value, ...
    text = "".join(flat)
    if text.isascii():
        lengths = map(len, flat)
        blob = text.encode("ascii")
    else:
        parts = [s.encode("utf-8", "surrogatepass") for s in flat]
        lengths = map(len, parts)
        blob = b"".join(parts)
    body = msg.body
    count = len(headers)
    try:
        head = _encoding(count).pack(
            CODEC_VERSION,
            _PERSISTENT if msg.persistent else 0,
            msg.priority,
            msg.message_id,
            msg.expiration,
            msg.timestamp,
            count,
            len(blob),
            len(body),
            *lengths,
        )
    except struct.error as exc:
        raise CodecError(f"message {msg.message_id} cannot be encoded: {exc}") from exc
    return b"".join((prefix, head, blob, body))


def decode_fields(data: bytes | memoryview, at: int = 0) -> MessageFields:
    """The message encoded in `data[at:]` (nothing may follow it), decoded; CodecError."""
    flags, priority, message_id, expiration, timestamp, lengths, text_at, body_at = read_head(data, at)
    return MessageFields(message_id, bool(flags & _PERSISTENT), priority, expiration, timestamp,
                         decode_headers(data[text_at:body_at], lengths), bytes(data[body_at:]))


def check_encoded(data: bytes | memoryview) -> int:
    """What a decode checks, without building anything (`pagemq data check`): the message
    id, or CodecError."""
    _flags, _priority, message_id, _expiration, _timestamp, lengths, text_at, body_at = read_head(data)
    decode_headers(data[text_at:body_at], lengths)
    return message_id


_EXPIRATION = struct.Struct("<Bxxxxxxxxxxxq")  # version, then the expiration at byte 12
assert _EXPIRATION.size == 20


def read_expiration(data: bytes | memoryview) -> int:
    """The expiration (ms since the epoch, 0 for none) of an encoded message, from its head
    alone: an expiry scan of page files reads it for every record and decodes only the due
    ones. CodecError unless the head is one this codec writes."""
    if len(data) < _HEAD.size:
        raise CodecError(f"encoded message too short: {len(data)} bytes")
    version, expiration = _EXPIRATION.unpack_from(data, 0)
    if version != CODEC_VERSION:
        raise CodecError(f"unknown message codec version {version}")
    return int(expiration)


def read_head(data: bytes | memoryview, at: int = 0
              ) -> tuple[int, int, int, int, int, tuple[int, ...], int, int]:
    """The head's fields, the header lengths, and where in `data` the header text and the
    body start, of the message encoded in `data[at:]`; CodecError unless they add up."""
    if len(data) - at < _HEAD.size:
        raise CodecError(f"encoded message too short: {len(data) - at} bytes")
    version, flags, priority, message_id, expiration, timestamp, count, text_len, body_len = (
        _HEAD.unpack_from(data, at)
    )
    if version != CODEC_VERSION:
        raise CodecError(f"unknown message codec version {version}")
    layout = _lengths(count)
    text_at = at + _HEAD.size + layout.size
    body_at = text_at + text_len
    if body_at + body_len != len(data):
        raise CodecError(
            f"encoded message {message_id}: fields describe {body_at - at + body_len} bytes, "
            f"got {len(data) - at}"
        )
    lengths = layout.unpack_from(data, at + _HEAD.size)
    if sum(lengths) != text_len:
        raise CodecError(f"encoded message {message_id}: header lengths do not add up")
    return flags, priority, message_id, expiration, timestamp, lengths, text_at, body_at


def decode_headers(raw: bytes | memoryview, lengths: tuple[int, ...]) -> dict[str, str]:
    """Decode the text block once; byte lengths equal character lengths when it is ASCII."""
    try:
        text = str(raw, "utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise CodecError(f"header text is not UTF-8: {exc}") from exc
    headers: dict[str, str] = {}
    pos = 0
    pairs = iter(lengths)
    if len(text) == len(raw):
        for key_len in pairs:
            value_at = pos + key_len
            end = value_at + next(pairs)
            headers[text[pos:value_at]] = text[value_at:end]
            pos = end
        return headers
    blob = bytes(raw)
    for key_len in pairs:
        value_at = pos + key_len
        end = value_at + next(pairs)
        try:
            key = blob[pos:value_at].decode("utf-8", "surrogatepass")
            value = blob[value_at:end].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise CodecError(f"header split inside a UTF-8 sequence: {exc}") from exc
        headers[key] = value
        pos = end
    return headers

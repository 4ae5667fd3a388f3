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

`stored_message` reads only the fixed head and the lengths (a message's queues need its id,
priority, expiration and size, not its headers or body): a journal's in-memory messages
are rebuilt at start-up without decoding one header, and each is decoded the first time
anything reads its headers or body (`StoredMessage`).
"""

from __future__ import annotations

import struct
from itertools import chain

from pagemq.core.message import Message, estimate_from_lengths

__all__ = ["CODEC_VERSION", "CodecError", "StoredMessage", "decode_message", "encode_message",
           "stored_message"]

CODEC_VERSION = 1
_PERSISTENT = 0x01

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


def encode_message(msg: Message) -> bytes:
    """The message's bytes; raises CodecError if a field cannot be represented."""
    headers = msg.headers
    text = "".join(chain.from_iterable(headers.items()))
    if text.isascii():
        lengths = [len(s) for s in chain.from_iterable(headers.items())]
        blob = text.encode("ascii")
    else:
        parts = [s.encode("utf-8", "surrogatepass") for s in chain.from_iterable(headers.items())]
        lengths = [len(part) for part in parts]
        blob = b"".join(parts)
    body = msg.body
    try:
        head = _HEAD.pack(
            CODEC_VERSION,
            _PERSISTENT if msg.persistent else 0,
            msg.priority,
            msg.message_id,
            msg.expiration,
            msg.timestamp,
            len(headers),
            len(blob),
            len(body),
        )
        packed_lengths = _lengths(len(headers)).pack(*lengths)
    except struct.error as exc:
        raise CodecError(f"message {msg.message_id} cannot be encoded: {exc}") from exc
    return b"".join((head, packed_lengths, blob, body))


def decode_message(data: bytes | memoryview, address: str) -> Message:
    """The message encoded in all of `data` (nothing may follow it), placed on `address`."""
    flags, priority, message_id, expiration, timestamp, lengths, text_at, body_at = _fields(data)
    headers = _decode_headers(data[text_at:body_at], lengths)
    body = bytes(data[body_at:])
    return Message(
        message_id,
        address,
        headers,
        body,
        persistent=bool(flags & _PERSISTENT),
        priority=priority,
        expiration=expiration,
        timestamp=timestamp,
    )


class StoredMessage(Message):
    """A message rebuilt from its stored bytes whose headers and body are decoded when
    first read: until then it holds the bytes it was read from (`_encoded`, the message's
    encoding starting at `_at`). Made by `stored_message` only.

    `headers` and `body` are the base class's slots, left unset: reading one that is unset
    falls through to `__getattr__`, which decodes it and sets it, so after the first read it
    is a plain slot again and the hot paths pay nothing for the laziness.
    """

    __slots__ = ("_at", "_encoded")

    def __getattr__(self, name: str) -> object:
        encoded = self._encoded
        if encoded is None or name not in _LAZY:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        *_, lengths, text_at, body_at = _fields(encoded, self._at)
        decoded = {"headers": _decode_headers(encoded[text_at:body_at], lengths),
                   "body": encoded[body_at:]}
        for attr in _LAZY:
            try:
                object.__getattribute__(self, attr)  # set already (assigned since): kept
            except AttributeError:
                setattr(self, attr, decoded[attr])
        self._encoded = None
        return decoded[name]


_LAZY = ("headers", "body")


def stored_message(data: bytes, at: int, address: str) -> Message:
    """The message encoded in `data[at:]` (nothing may follow it), placed on `address`, its
    headers and body left encoded (`StoredMessage`). Checks what `decode_message` checks
    (CodecError), so bytes that would not decode are refused now, not when first read: the
    header text is decoded here only when it is not ASCII (ASCII text always slices)."""
    flags, priority, message_id, expiration, timestamp, lengths, text_at, body_at = _fields(data, at)
    text = data[text_at:body_at]
    if not text.isascii():
        _decode_headers(text, lengths)
    message = StoredMessage.__new__(StoredMessage)
    message.message_id = message_id
    message.address = address
    message.persistent = bool(flags & _PERSISTENT)
    message.priority = priority
    message.expiration = expiration
    message.timestamp = timestamp
    message.refs = message.durable_refs = 0
    message.memory_size = estimate_from_lengths(len(lengths) // 2, body_at - text_at, len(data) - body_at)
    message.write = None
    message._encoded, message._at = data, at
    return message


def check_encoded(data: bytes | memoryview) -> int:
    """What `decode_message` checks, without building the message (`pagemq data check`):
    the message id, or CodecError."""
    _flags, _priority, message_id, _expiration, _timestamp, lengths, text_at, body_at = _fields(data)
    _decode_headers(data[text_at:body_at], lengths)
    return int(message_id)


def _fields(data: bytes | memoryview, at: int = 0
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


def _decode_headers(raw: bytes | memoryview, lengths: tuple[int, ...]) -> dict[str, str]:
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

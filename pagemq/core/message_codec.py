"""The core's messages from their stored bytes (storage's `message_codec` knows only bytes
and fields): decoded at once, or lazily.

`stored_message` reads only the fixed head and the lengths (a message's queues need its id,
priority, expiration and size, not its headers or body): a journal's in-memory messages
are rebuilt at start-up without decoding one header, and each is decoded the first time
anything reads its headers or body (`StoredMessage`).
"""

from __future__ import annotations

from pagemq.core.message import Message, estimate_from_lengths
from pagemq.storage.message_codec import (
    PERSISTENT_FLAG,
    CodecError,
    decode_headers,
    encode_message,
    read_head,
)

__all__ = ["CodecError", "StoredMessage", "decode_message", "encode_message", "stored_message"]


def decode_message(data: bytes | memoryview, address: str) -> Message:
    """The message encoded in all of `data` (nothing may follow it), placed on `address`."""
    flags, priority, message_id, expiration, timestamp, lengths, text_at, body_at = read_head(data)
    headers = decode_headers(data[text_at:body_at], lengths)
    body = bytes(data[body_at:])
    return Message(
        message_id,
        address,
        headers,
        body,
        persistent=bool(flags & PERSISTENT_FLAG),
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

    _encoded: bytes | None
    _at: int

    def __getattr__(self, name: str) -> object:
        encoded = self._encoded
        if encoded is None or name not in _LAZY:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        *_, lengths, text_at, body_at = read_head(encoded, self._at)
        decoded = {"headers": decode_headers(encoded[text_at:body_at], lengths),
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
    flags, priority, message_id, expiration, timestamp, lengths, text_at, body_at = read_head(data, at)
    text = data[text_at:body_at]
    if not text.isascii():
        decode_headers(text, lengths)
    message = StoredMessage.__new__(StoredMessage)
    message.message_id = message_id
    message.address = address
    message.persistent = bool(flags & PERSISTENT_FLAG)
    message.priority = priority
    message.expiration = expiration
    message.timestamp = timestamp
    message.refs = message.durable_refs = message.journal_charge = 0
    message.memory_size = estimate_from_lengths(len(lengths) // 2, body_at - text_at, len(data) - body_at)
    message.write = None
    message._encoded, message._at = data, at
    return message

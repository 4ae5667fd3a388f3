"""The broker's message: one object shared by every queue it was routed to.

A message is immutable once routed; queues hold references to it (see `core.queue`), so a
multicast address keeps exactly one copy in memory and on disk whatever its queue count.
Its `memory_size` is what the object graph really costs in this CPython process, so the
memory accountant can bound the broker's RSS rather than the payload bytes alone.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

# Measured with sys.getsizeof on CPython 3.11 (64-bit); see tests/unit/core/test_message.py,
# which checks the estimate against tracemalloc so the figures cannot silently drift.
_OBJECT_OVERHEAD = 48 + 13 * 8          # the Message instance with its slots
_BYTES_OVERHEAD = sys.getsizeof(b"")    # a bytes object's header
_STR_OVERHEAD = sys.getsizeof("")       # an ASCII str's header
_DICT_BASE = sys.getsizeof({})
_DICT_PER_ITEM = 40                     # amortised hash-table slot + index for small dicts
_REF_OVERHEAD = 120                     # one queue's reference: the small object + list/heap slot



class Message:
    """A routed message. Headers are the sender's, minus per-frame transport headers."""

    __slots__ = (
        "__weakref__",
        "address",
        "body",
        "durable_refs",
        "expiration",
        "headers",
        "journal_charge",
        "memory_size",
        "message_id",
        "persistent",
        "priority",
        "refs",
        "timestamp",
        "write",
    )

    def __init__(
        self,
        message_id: int,
        address: str,
        headers: dict[str, str],
        body: bytes,
        *,
        persistent: bool = False,
        priority: int = 4,
        expiration: int = 0,
        timestamp: int = 0,
        memory_size: int = -1,
    ) -> None:
        self.message_id = message_id
        self.address = address
        self.headers = headers
        self.body = body
        self.persistent = persistent
        self.priority = priority
        self.expiration = expiration
        self.timestamp = timestamp
        # Queues still holding this message in memory / in the journal; see core.queue.
        self.refs = 0
        self.durable_refs = 0
        self.memory_size = estimate_memory(headers, body) if memory_size < 0 else memory_size
        self.journal_charge = 0  # its journal index entry, while held (core.ledger)
        # The journal write batch (a future) that stores it, while it may still fail.
        self.write: asyncio.Future[None] | None = None

    def expired(self, now_ms: int) -> bool:
        return self.expiration > 0 and now_ms >= self.expiration

    def __repr__(self) -> str:
        return f"Message(id={self.message_id}, address={self.address!r}, {len(self.body)}B)"


def estimate_memory(headers: dict[str, str], body: bytes) -> int:
    """Bytes this message's objects occupy in CPython, overheads included.

    Header strings are counted at their ASCII size plus object header; an interned key shared
    with other messages is still counted (the estimate errs high, which keeps RSS bounded).
    Inline sums, not a call of `estimate_from_lengths`: this runs for every SEND (a plain
    loop over the items is faster than two `sum(map(len, ...))` up to dozens of headers).
    """
    size = _FIXED + len(body) + len(headers) * _PER_HEADER
    for name, value in headers.items():
        size += len(name) + len(value)
    return size


def estimate_from_lengths(header_count: int, header_text: int, body_length: int, messages: int = 1) -> int:
    """`estimate_memory` of a message known by its lengths only (an encoded one, whose
    header text is counted in bytes: at least its characters, so the estimate errs high),
    or of `messages` messages by their lengths' sums."""
    return messages * _FIXED + body_length + header_count * _PER_HEADER + header_text


_FIXED = _OBJECT_OVERHEAD + _BYTES_OVERHEAD + _DICT_BASE + _REF_OVERHEAD
_PER_HEADER = _DICT_PER_ITEM + 2 * _STR_OVERHEAD

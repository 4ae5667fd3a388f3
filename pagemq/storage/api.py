"""The store the broker core writes through: bindings, messages and acknowledgements.

The core speaks in these terms only; the journal-backed implementation
(`storage.message_store.JournalMessageStore`) turns them into journal records, and
`MemoryStore` keeps nothing (a broker with persistence off, and the second target of the
store contract tests). Futures returned by writes resolve when the write is durable.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from pagemq.core.message import Message


@dataclass(frozen=True, slots=True)
class AddressRecord:
    address_id: int
    name: str
    routing_type: str


@dataclass(frozen=True, slots=True)
class QueueRecord:
    queue_id: int
    name: str
    address: str
    routing_type: str
    filter: str | None = None


@dataclass(slots=True)
class RecoveredMessage:
    """A message record of the journal, still encoded: its bytes are `payload[at:]` (the
    core rebuilds the message from them, decoding its headers and body when first read)."""

    payload: bytes
    at: int
    address: str
    queue_ids: list[int]
    # queue id -> how often it was delivered there and given back (type-12 updates), if ever
    delivery_counts: dict[int, int] | None = None


@dataclass(frozen=True, slots=True)
class CursorAck:
    """A queue acknowledged the records at these ordinals of one page of its address.

    One record holds the acks a queue made in one page within one event-loop turn, so a
    drain writes a record per burst of ACK frames rather than one per message.
    """

    record_id: int
    queue_id: int
    page_no: int
    ordinals: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CursorComplete:
    """A queue has acknowledged every record of a page meant for it."""

    record_id: int
    queue_id: int
    page_no: int


@dataclass(frozen=True, slots=True)
class PageTxCommit:
    """Transaction `txid` committed, and with it its batch in page `page_no` of `address`.

    A transaction that pages (to one address or several) and may also write the journal is
    committed by this record, written in the same journal transaction as the rest of it:
    a transactional batch in a page file without its commit record is dropped at start-up.
    """

    record_id: int
    txid: int
    address: str
    page_no: int


@dataclass(frozen=True, slots=True)
class DuplicateIdRecord:
    """An address saw these `_AMQ_DUPL_ID`s, in this order (duplicate detection,
    `core.duplicates`): one record for all the ids a COMMIT sends to an address, so a
    transaction of a few hundred sends writes one record and not a few hundred. Kept until
    every one of its ids has left the address's cache, when the core deletes the record."""

    record_id: int
    address: str
    dup_ids: tuple[str, ...]
    gone: int = 0  # how many of the first ids have left the cache (updates of the record)
    # The address's id-cache-size when it was written (0: unknown, a type-9 record): start-up
    # replays the records with it, so ids pushed out then by later durable ones stay out.
    cache_size: int = 0


@dataclass(slots=True)
class Recovered:
    addresses: list[AddressRecord] = field(default_factory=list)
    queues: list[QueueRecord] = field(default_factory=list)
    messages: list[RecoveredMessage] = field(default_factory=list)
    max_id: int = 0
    cursor_acks: list[CursorAck] = field(default_factory=list)
    cursor_completes: list[CursorComplete] = field(default_factory=list)
    page_tx_commits: list[PageTxCommit] = field(default_factory=list)
    duplicate_ids: list[DuplicateIdRecord] = field(default_factory=list)  # oldest first
    # Damaged bytes were read past (not a crash's torn tail): records may be missing, so a
    # message naming a queue no record names may have lost its queue's record, not its queue.
    damaged: bool = False


class StoreMessage(NamedTuple):
    """A held message to journal. A named tuple (immutable as the other ops): a COMMIT of
    a thousand sends makes a thousand, and a frozen dataclass costs twice as much to make."""

    message: Message
    queue_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StoreAck:
    message_id: int
    queue_id: int
    last: bool  # no other queue still holds the message: its record can go


StoreOp = StoreMessage | StoreAck | CursorAck | PageTxCommit | DuplicateIdRecord


class MessageStore(Protocol):
    def load(self) -> Recovered: ...

    def delivery_count(self, message_id: int, queue_id: int, count: int) -> None:
        """A journaled message given back unacknowledged by a queue: how often that queue has
        delivered it, so a restart neither resets it nor loses it to max-delivery-attempts."""
        ...

    def start(self, loop: asyncio.AbstractEventLoop) -> None: ...

    def add_address(self, record: AddressRecord) -> None: ...

    def delete_address(self, address_id: int) -> None: ...

    def add_queue(self, record: QueueRecord) -> None: ...

    def delete_queue(self, queue_id: int) -> None: ...

    def store_message(
        self, message: Message, queue_ids: tuple[int, ...], *, sync: bool
    ) -> asyncio.Future[None] | None: ...

    def acknowledge(self, message_id: int, queue_id: int, *, last: bool) -> None: ...

    def transaction(
        self, ops: list[StoreOp], *, sync: bool
    ) -> asyncio.Future[None] | None: ...

    def cursor_ack(self, record: CursorAck) -> None: ...

    def add_duplicate_id(self, record: DuplicateIdRecord) -> None:
        """Written with the next flush: the message sent with the id waits for that anyway."""
        ...

    def duplicate_ids_gone(self, record_id: int, gone: int) -> None:
        """The first `gone` ids of a duplicate-ids record have left the cache (an update)."""
        ...

    def cursor_complete(self, record: CursorComplete) -> None: ...

    def delete_record(self, record_id: int) -> None: ...

    def flush(self) -> asyncio.Future[None]: ...

    def cleanup(self, *, compact: bool = True) -> dict[str, int]: ...

    def cleanup_wanted(self) -> bool:
        """Enough was written since the last cleanup that another is due now."""
        ...

    async def close(self) -> None: ...

    def stats(self) -> dict[str, int]: ...


class MemoryStore:
    """A store that keeps nothing: every write is complete at once."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def load(self) -> Recovered:
        return Recovered()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def add_address(self, record: AddressRecord) -> None:
        return None

    def delete_address(self, address_id: int) -> None:
        return None

    def add_queue(self, record: QueueRecord) -> None:
        return None

    def delete_queue(self, queue_id: int) -> None:
        return None

    def store_message(
        self, message: Message, queue_ids: tuple[int, ...], *, sync: bool
    ) -> asyncio.Future[None] | None:
        return None

    def acknowledge(self, message_id: int, queue_id: int, *, last: bool) -> None:
        return None

    def delivery_count(self, message_id: int, queue_id: int, count: int) -> None:
        return None

    def transaction(self, ops: list[StoreOp], *, sync: bool) -> asyncio.Future[None] | None:
        return None

    def cursor_ack(self, record: CursorAck) -> None:
        return None

    def add_duplicate_id(self, record: DuplicateIdRecord) -> None:
        return None

    def duplicate_ids_gone(self, record_id: int, gone: int) -> None:
        return None

    def cursor_complete(self, record: CursorComplete) -> None:
        return None

    def delete_record(self, record_id: int) -> None:
        return None

    def flush(self) -> asyncio.Future[None]:
        loop = self._loop or asyncio.get_event_loop()
        future: asyncio.Future[None] = loop.create_future()
        future.set_result(None)
        return future

    def cleanup(self, *, compact: bool = True) -> dict[str, int]:
        return {}

    def cleanup_wanted(self) -> bool:
        return False

    async def close(self) -> None:
        return None

    def stats(self) -> dict[str, int]:
        return {}

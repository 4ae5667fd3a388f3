"""The broker's durable state as journal records (seed 004: the AMQ message store).

Record types (the journal's `type` field, `RecordType`; never reuse a number): the one
table of them, with byte layouts, is in docs/formats/journal.md ("Record types of the
broker"): 1 address, 2 queue, 3 message, 4 ack (update), 5 cursor ack (read only),
6 cursor page complete, 7 cursor acks, 8 page transaction commit, 9 duplicate id (read
only), 10 duplicate ids, 11 duplicate ids gone (update).

The last queue's acknowledgement deletes the message record, so a spent data file holds
no live record and the journal's cleanup can delete, archive or compact it.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import json
import logging
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from pagemq.storage.api import (
    AddressRecord,
    CursorAck,
    CursorComplete,
    DuplicateIdRecord,
    PageTxCommit,
    QueueRecord,
    Recovered,
    RecoveredMessage,
    StoreAck,
    StoreMessage,
    StoreOp,
)
from pagemq.storage.fileio import REAL_FILE_IO, FileIO
from pagemq.storage.group_commit import JournalError
from pagemq.storage.journal import Journal, OpKind
from pagemq.storage.message_codec import CodecError, encode_message

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pagemq.core.message import Message

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_CURSOR_ACK = struct.Struct("<QQI")  # queue id, page number, ordinal (5) / ordinal count (7)
_CURSOR_COMPLETE = struct.Struct("<QQ")
_PAGE_TX_COMMIT = struct.Struct("<QQ")  # transaction id, page number; then the address
_DELIVERY_COUNT = struct.Struct("<QI")  # queue id, deliveries


log = logging.getLogger("pagemq.journal")


class RecordType(enum.IntEnum):
    ADDRESS = 1
    QUEUE = 2
    MESSAGE = 3
    ACK = 4
    CURSOR_ACK = 5  # one ordinal per record: written by earlier versions, still read
    CURSOR_COMPLETE = 6
    CURSOR_ACKS = 7
    PAGE_TX_COMMIT = 8
    DUPLICATE_ID = 9  # one id per record: written by earlier versions, still read
    DUPLICATE_IDS = 10
    DUPLICATE_IDS_GONE = 11  # update of a type-10 record: u32, how many of its first ids are gone
    DELIVERY_COUNT = 12  # update of a type-3 record: u64 queue id, u32 deliveries given back


@functools.lru_cache(maxsize=64)
def _queue_ids_struct(count: int) -> struct.Struct:
    return struct.Struct(f"<H{count}Q")


@functools.lru_cache(maxsize=4096)
def _address_field(address: str) -> bytes:
    encoded = address.encode()
    return _U16.pack(len(encoded)) + encoded


def _message_payload(message: Message, queue_ids: tuple[int, ...]) -> bytes:
    """Hot path (every persistent SEND): one pack, one join."""
    return encode_message(message, _queue_ids_struct(len(queue_ids)).pack(len(queue_ids), *queue_ids)
                          + _address_field(message.address))


def message_refs(payload: bytes) -> tuple[list[int], str, memoryview]:
    """A type-3 payload's queue ids, address and encoded message, without decoding it.
    struct.error or UnicodeDecodeError when the payload is too short for its counts."""
    queue_ids, address, at = _message_fields(payload, {})
    return queue_ids, address, memoryview(payload)[at:]


def _message_fields(payload: bytes, addresses: dict[bytes, str]) -> tuple[list[int], str, int]:
    """(queue ids, address, where the encoded message starts) of a type-3 payload; each
    address decoded once per `addresses` cache, so recovered messages share the string."""
    (count,) = _U16.unpack_from(payload, 0)
    queue_ids = list(_queue_ids_struct(count).unpack_from(payload, 0)[1:])
    offset = 2 + 8 * count
    (length,) = _U16.unpack_from(payload, offset)
    offset += 2
    if offset + length > len(payload):
        raise struct.error(f"address of {length} bytes runs past the record")
    raw = payload[offset:offset + length]
    address = addresses.get(raw)
    if address is None:
        address = addresses[raw] = raw.decode()
    return queue_ids, address, offset + length


def _delivery_counts(updates: list[tuple[int, bytes]]) -> dict[int, int] | None:
    """Per queue, the largest delivery count its type-12 updates give; None if none does."""
    counts: dict[int, int] = {}
    for kind, data in updates:
        if kind == RecordType.DELIVERY_COUNT:
            queue_id, count = _DELIVERY_COUNT.unpack(data)
            counts[queue_id] = max(count, counts.get(queue_id, 0))
    return counts or None


def acked_queue(payload: bytes) -> int:
    """The queue id of a type-4 update."""
    return int(_U64.unpack(payload)[0])


def cursor_record(record_id: int, type: int, payload: bytes) -> CursorAck | CursorComplete:
    """A type 5, 6 or 7 record; CodecError or struct.error when its payload is malformed."""
    if type == RecordType.CURSOR_ACKS:
        return _decode_cursor_acks(record_id, payload)
    if type == RecordType.CURSOR_ACK:
        queue_id, page_no, ordinal = _CURSOR_ACK.unpack(payload)
        return CursorAck(record_id, queue_id, page_no, (ordinal,))
    queue_id, page_no = _CURSOR_COMPLETE.unpack(payload)
    return CursorComplete(record_id, queue_id, page_no)


def page_tx_commit(record_id: int, payload: bytes) -> PageTxCommit:
    """A type-8 record; struct.error or UnicodeDecodeError when its payload is malformed."""
    txid, page_no = _PAGE_TX_COMMIT.unpack_from(payload, 0)
    (length,) = _U16.unpack_from(payload, _PAGE_TX_COMMIT.size)
    start = _PAGE_TX_COMMIT.size + _U16.size
    if start + length != len(payload):
        raise struct.error(f"page-transaction record {record_id}: address length {length} "
                           f"does not fit {len(payload)} bytes")
    return PageTxCommit(record_id, txid, payload[start:].decode(), page_no)


def _page_tx_payload(record: PageTxCommit) -> bytes:
    return _PAGE_TX_COMMIT.pack(record.txid, record.page_no) + _address_field(record.address)


def _duplicate_ids_payload(record: DuplicateIdRecord) -> bytes:
    encoded = [dup_id.encode("utf-8", "surrogatepass") for dup_id in record.dup_ids]
    count = len(encoded)
    lengths = struct.pack(f"<II{count}I", record.cache_size, count, *map(len, encoded))
    return b"".join((_address_field(record.address), lengths, *encoded))


def decode_duplicate_ids(record_id: int, type: int, payload: bytes,
                         updates: Sequence[tuple[int, bytes]] = ()) -> DuplicateIdRecord:
    """A type-9 (one id) or type-10 record, with its type-11 updates; CodecError,
    struct.error or UnicodeDecodeError when its payload is malformed."""
    gone = max((_U32.unpack(data)[0] for kind, data in updates if kind == RecordType.DUPLICATE_IDS_GONE),
               default=0)
    (length,) = _U16.unpack_from(payload)
    start = _U16.size + length
    address = payload[_U16.size:start].decode()
    if type == RecordType.DUPLICATE_ID:
        dup_id = payload[start:].decode("utf-8", "surrogatepass")
        return DuplicateIdRecord(record_id, address, (dup_id,), gone)
    cache_size, count = _U32.unpack_from(payload, start)[0], _U32.unpack_from(payload, start + 4)[0]
    lengths = struct.unpack_from(f"<{count}I", payload, start + 2 * _U32.size)
    offset = start + _U32.size * (count + 2)
    if offset + sum(lengths) != len(payload):
        raise CodecError(f"duplicate-ids record {record_id}: {count} ids of {sum(lengths)} bytes "
                         f"do not fill {len(payload) - offset} bytes")
    dup_ids = []
    for size in lengths:
        dup_ids.append(payload[offset:offset + size].decode("utf-8", "surrogatepass"))
        offset += size
    return DuplicateIdRecord(record_id, address, tuple(dup_ids), gone, cache_size)


def _cursor_acks_payload(record: CursorAck) -> bytes:
    ordinals = record.ordinals
    return _CURSOR_ACK.pack(record.queue_id, record.page_no, len(ordinals)) + struct.pack(
        f"<{len(ordinals)}I", *ordinals
    )


def _decode_cursor_acks(record_id: int, payload: bytes) -> CursorAck:
    queue_id, page_no, count = _CURSOR_ACK.unpack_from(payload, 0)
    if len(payload) != _CURSOR_ACK.size + 4 * count:
        raise CodecError(
            f"cursor-ack record {record_id}: {len(payload)} bytes for {count} ordinals"
        )
    ordinals = struct.unpack_from(f"<{count}I", payload, _CURSOR_ACK.size)
    return CursorAck(record_id, queue_id, page_no, ordinals)


class JournalMessageStore:
    """`MessageStore` over a `Journal`; see the record table in the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        file_size: int,
        sync: bool = True,
        archive_directory: Path | None = None,
        fileio: FileIO = REAL_FILE_IO,
    ) -> None:
        self.journal = Journal(
            directory, file_size=file_size, sync=sync, archive_directory=archive_directory,
            fileio=fileio,
        )

    def load(self) -> Recovered:
        result = self.journal.load()
        recovered = Recovered(max_id=result.max_id, damaged=any(
            report.kind in ("damage", "unreadable file") for report in result.damage))
        messages = recovered.messages
        addresses: dict[bytes, str] = {}
        for record in result.records:
            # A message keeps its record's payload (the core decodes it when first read,
            # `core.message_codec.stored_message`): recovery holds one copy of the in-memory
            # messages.
            kind = record.type
            if kind == RecordType.MESSAGE:
                payload = record.payload
                queue_ids, address, at = _message_fields(payload, addresses)
                counts = None
                if record.updates:
                    acked = {
                        _U64.unpack(update)[0]
                        for update_type, update in record.updates
                        if update_type == RecordType.ACK
                    }
                    queue_ids = [q for q in queue_ids if q not in acked]
                    counts = _delivery_counts(record.updates)
                if queue_ids:
                    messages.append(RecoveredMessage(payload, at, address, queue_ids, counts))
            elif kind == RecordType.QUEUE:
                data = json.loads(record.payload)
                recovered.queues.append(
                    QueueRecord(record.id, data["name"], data["address"], data["routing_type"],
                                data.get("filter"))
                )
            elif kind == RecordType.ADDRESS:
                data = json.loads(record.payload)
                recovered.addresses.append(
                    AddressRecord(record.id, data["name"], data["routing_type"])
                )
            elif kind == RecordType.CURSOR_ACKS:
                recovered.cursor_acks.append(_decode_cursor_acks(record.id, record.payload))
            elif kind == RecordType.CURSOR_ACK:
                queue_id, page_no, ordinal = _CURSOR_ACK.unpack(record.payload)
                recovered.cursor_acks.append(CursorAck(record.id, queue_id, page_no, (ordinal,)))
            elif kind == RecordType.CURSOR_COMPLETE:
                queue_id, page_no = _CURSOR_COMPLETE.unpack(record.payload)
                recovered.cursor_completes.append(CursorComplete(record.id, queue_id, page_no))
            elif kind == RecordType.PAGE_TX_COMMIT:
                recovered.page_tx_commits.append(page_tx_commit(record.id, record.payload))
            elif kind == RecordType.DUPLICATE_IDS or kind == RecordType.DUPLICATE_ID:
                recovered.duplicate_ids.append(
                    decode_duplicate_ids(record.id, kind, record.payload, record.updates))
        recovered.duplicate_ids.sort(key=lambda record: record.record_id)
        return recovered

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.journal.start(loop)

    def add_address(self, record: AddressRecord) -> None:
        payload = json.dumps({"name": record.name, "routing_type": record.routing_type})
        _heard(self.journal.add(record.address_id, RecordType.ADDRESS, payload.encode(), sync=True))

    def delete_address(self, address_id: int) -> None:
        _heard(self.journal.delete(address_id, sync=True))

    def add_queue(self, record: QueueRecord) -> None:
        payload = json.dumps({
            "name": record.name, "address": record.address,
            "routing_type": record.routing_type, "filter": record.filter,
        })
        _heard(self.journal.add(record.queue_id, RecordType.QUEUE, payload.encode(), sync=True))

    def delete_queue(self, queue_id: int) -> None:
        _heard(self.journal.delete(queue_id, sync=True))

    def store_message(
        self, message: Message, queue_ids: tuple[int, ...], *, sync: bool
    ) -> asyncio.Future[None] | None:
        return self.journal.add(
            message.message_id, RecordType.MESSAGE, _message_payload(message, queue_ids), sync=sync
        )

    def delivery_count(self, message_id: int, queue_id: int, count: int) -> None:
        try:
            self.journal.update(message_id, RecordType.DELIVERY_COUNT, _DELIVERY_COUNT.pack(queue_id, count))
        except JournalError:  # connections closing after the journal (shutdown): not kept
            log.debug("delivery count of message %d not kept: the journal is closed", message_id)

    def acknowledge(self, message_id: int, queue_id: int, *, last: bool) -> None:
        if last:
            self.journal.delete(message_id)
        else:
            self.journal.update(message_id, RecordType.ACK, _U64.pack(queue_id))

    def transaction(self, ops: list[StoreOp], *, sync: bool) -> asyncio.Future[None] | None:
        journal_ops: list[tuple[OpKind, int, int, bytes]] = []
        for op in ops:
            if isinstance(op, StoreMessage):
                journal_ops.append((
                    OpKind.ADD, op.message.message_id, RecordType.MESSAGE,
                    _message_payload(op.message, op.queue_ids),
                ))
            elif isinstance(op, StoreAck):
                if op.last:
                    journal_ops.append((OpKind.DELETE, op.message_id, 0, b""))
                else:
                    journal_ops.append(
                        (OpKind.UPDATE, op.message_id, RecordType.ACK, _U64.pack(op.queue_id))
                    )
            elif isinstance(op, CursorAck):
                journal_ops.append(
                    (OpKind.ADD, op.record_id, RecordType.CURSOR_ACKS, _cursor_acks_payload(op))
                )
            elif isinstance(op, DuplicateIdRecord):
                journal_ops.append(
                    (OpKind.ADD, op.record_id, RecordType.DUPLICATE_IDS, _duplicate_ids_payload(op))
                )
            else:
                journal_ops.append(
                    (OpKind.ADD, op.record_id, RecordType.PAGE_TX_COMMIT, _page_tx_payload(op))
                )
        return self.journal.transaction(journal_ops, sync=sync)

    def cursor_ack(self, record: CursorAck) -> None:
        self.journal.add(record.record_id, RecordType.CURSOR_ACKS, _cursor_acks_payload(record))

    def add_duplicate_id(self, record: DuplicateIdRecord) -> None:
        self.journal.add(record.record_id, RecordType.DUPLICATE_IDS, _duplicate_ids_payload(record))

    def duplicate_ids_gone(self, record_id: int, gone: int) -> None:
        self.journal.update(record_id, RecordType.DUPLICATE_IDS_GONE, _U32.pack(gone))

    def cursor_complete(self, record: CursorComplete) -> None:
        payload = _CURSOR_COMPLETE.pack(record.queue_id, record.page_no)
        self.journal.add(record.record_id, RecordType.CURSOR_COMPLETE, payload)

    def delete_record(self, record_id: int) -> None:
        self.journal.delete(record_id)

    def flush(self) -> asyncio.Future[None]:
        return self.journal.flush()

    def cleanup(self, *, compact: bool = True) -> dict[str, int]:
        return dict(vars(self.journal.cleanup(compact=compact)))

    async def cleanup_in_thread(self, *, compact: bool = True) -> dict[str, int]:
        """`cleanup` with its file work off the event loop (`Journal.cleanup_in_thread`)."""
        return dict(vars(await self.journal.cleanup_in_thread(compact=compact)))

    def cleanup_wanted(self) -> bool:
        return self.journal.cleanup_wanted()

    async def close(self) -> None:
        await self.journal.close()

    def stats(self) -> dict[str, int]:
        return self.journal.stats()


def _heard(future: asyncio.Future[None] | None) -> None:
    """A record written with the next sync, whose caller waits on that sync another way
    (`flush`, a RECEIPT's): its own future's failure is theirs to report, not asyncio's
    "exception was never retrieved" (a full disk failed an address's record, made for a
    message moved to the dead-letter address, with a traceback in the log)."""
    if future is not None:
        future.add_done_callback(lambda done: done.cancelled() or done.exception())


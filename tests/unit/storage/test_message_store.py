"""The broker's records in the journal: messages and cursor records written and read back."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from pagemq.core.broker import Broker
from pagemq.core.message import Message
from pagemq.core.message_codec import CodecError, StoredMessage, encode_message, stored_message
from pagemq.core.settings import AddressSettingsRepository
from pagemq.storage.api import CursorAck, CursorComplete, DuplicateIdRecord
from pagemq.storage.message_store import JournalMessageStore, RecordType


def write(directory: Path, *records: tuple[int, int, bytes]) -> None:
    """Raw (id, type, payload) records, as any version of the broker may have left them."""

    async def body() -> None:
        store = JournalMessageStore(directory, file_size=1 << 20)
        store.load()
        store.start(asyncio.get_running_loop())
        for record_id, kind, payload in records:
            store.journal.add(record_id, kind, payload)
        await store.close()

    asyncio.run(body())


def test_cursor_acks_with_many_ordinals_are_read_back(tmp_path: Path) -> None:
    async def body() -> None:
        store = JournalMessageStore(tmp_path, file_size=1 << 20)
        store.load()
        store.start(asyncio.get_running_loop())
        store.cursor_ack(CursorAck(10, 3, 7, (0, 1, 2, 500)))
        store.cursor_ack(CursorAck(11, 3, 8, (4,)))
        store.cursor_complete(CursorComplete(12, 4, 7))
        await store.close()

    asyncio.run(body())
    recovered = JournalMessageStore(tmp_path, file_size=1 << 20).load()
    assert recovered.cursor_acks == [CursorAck(10, 3, 7, (0, 1, 2, 500)), CursorAck(11, 3, 8, (4,))]
    assert recovered.cursor_completes == [CursorComplete(12, 4, 7)]


def test_single_ordinal_cursor_acks_of_earlier_versions_are_still_read(tmp_path: Path) -> None:
    write(tmp_path, (20, RecordType.CURSOR_ACK, struct.pack("<QQI", 3, 9, 42)))
    recovered = JournalMessageStore(tmp_path, file_size=1 << 20).load()
    assert recovered.cursor_acks == [CursorAck(20, 3, 9, (42,))]


def test_a_cursor_acks_record_of_the_wrong_length_is_refused_by_name(tmp_path: Path) -> None:
    write(tmp_path, (30, RecordType.CURSOR_ACKS, struct.pack("<QQI", 3, 9, 5) + b"\x00" * 8))
    with pytest.raises(CodecError, match="cursor-ack record 30: 28 bytes for 5 ordinals"):
        JournalMessageStore(tmp_path, file_size=1 << 20).load()


def _stored(tmp_path: Path, messages: list[tuple[Message, tuple[int, ...]]], acks: list[tuple[int, int]]
            ) -> None:
    async def body() -> None:
        store = JournalMessageStore(tmp_path, file_size=1 << 20)
        store.load()
        store.start(asyncio.get_running_loop())
        for message, queue_ids in messages:
            store.store_message(message, queue_ids, sync=False)
        for message_id, queue_id in acks:
            store.acknowledge(message_id, queue_id, last=False)
        await store.close()

    asyncio.run(body())


def test_messages_come_back_undecoded_with_the_queues_that_still_hold_them(tmp_path: Path) -> None:
    wide = {"città": "Zürich ☃", "k": "v"}
    _stored(tmp_path, [
        (Message(5, "orders", {"a": "1"}, b"one", persistent=True, priority=7), (1, 2)),
        (Message(6, "orders", wide, b"two", persistent=True, expiration=99), (2,)),
        (Message(7, "events", {}, b"", persistent=True), (3, 4, 5)),
    ], acks=[(5, 1), (7, 4)])
    recovered = JournalMessageStore(tmp_path, file_size=1 << 20).load()
    first, second, third = (stored_message(m.payload, m.at, m.address) for m in recovered.messages)
    assert [(m.message_id, r.queue_ids) for m, r in zip((first, second, third), recovered.messages,
                                                         strict=True)] == [(5, [2]), (6, [2]), (7, [3, 5])]
    assert all(isinstance(m, StoredMessage) and m._encoded is not None  # type: ignore[attr-defined]
               for m in (first, second, third))
    assert (first.priority, second.expiration, third.address) == (7, 99, "events")
    assert first.address is second.address  # one string per address, not one per message
    assert (first.headers, first.body) == ({"a": "1"}, b"one")
    assert (second.headers, second.body) == (wide, b"two")
    assert (third.headers, third.body) == ({}, b"")


def test_a_message_record_whose_message_would_not_decode_stops_the_recovery(tmp_path: Path) -> None:
    """Checked when recovered, although decoded only when first read: a broker must not start
    without a message it cannot read (the next cleanup would lose it). The store hands the
    record's bytes over; the core's recovery rebuilds (and so checks) every message."""
    payload = struct.pack("<HQ", 1, 3) + struct.pack("<H", 1) + b"q"
    encoded = bytearray(encode_message(Message(9, "q", {"k": "\xe9"}, b"x", persistent=True)))
    at = encoded.index("é".encode())
    encoded[at:at + 2] = b"\xff\xfe"
    write(tmp_path, (9, RecordType.MESSAGE, payload + bytes(encoded)))
    with pytest.raises(CodecError, match="UTF-8"):
        Broker(AddressSettingsRepository(), store=JournalMessageStore(tmp_path, file_size=1 << 20)).recover()


def test_a_commits_duplicate_ids_are_one_record_read_back_in_order(tmp_path: Path) -> None:
    ids = ("spark:q:1:0:0", "", "ünïcode\\c:", "x" * 70_000)

    async def body() -> None:
        store = JournalMessageStore(tmp_path, file_size=1 << 20)
        store.load()
        store.start(asyncio.get_running_loop())
        await store.transaction([DuplicateIdRecord(40, "orders", ids, cache_size=7)], sync=True)
        store.add_duplicate_id(DuplicateIdRecord(41, "orders", ("last",)))
        await store.close()

    asyncio.run(body())
    recovered = JournalMessageStore(tmp_path, file_size=1 << 20).load()
    assert recovered.duplicate_ids == [DuplicateIdRecord(40, "orders", ids, cache_size=7),
                                       DuplicateIdRecord(41, "orders", ("last",))]


def test_single_duplicate_id_records_of_earlier_versions_are_still_read(tmp_path: Path) -> None:
    write(tmp_path, (50, RecordType.DUPLICATE_ID, struct.pack("<H", 6) + b"orders" + b"id:7"))
    recovered = JournalMessageStore(tmp_path, file_size=1 << 20).load()
    assert recovered.duplicate_ids == [DuplicateIdRecord(50, "orders", ("id:7",))]


def test_a_duplicate_ids_record_whose_ids_do_not_fill_it_is_refused_by_name(tmp_path: Path) -> None:
    payload = struct.pack("<H", 1) + b"a" + struct.pack("<IIII", 20000, 2, 3, 3) + b"abcdefg"
    write(tmp_path, (60, RecordType.DUPLICATE_IDS, payload))
    with pytest.raises(CodecError, match="duplicate-ids record 60: 2 ids of 6 bytes do not fill 7 bytes"):
        JournalMessageStore(tmp_path, file_size=1 << 20).load()

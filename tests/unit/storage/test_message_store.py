"""The broker's records in the journal: cursor records written and read back."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from pagemq.storage.api import CursorAck, CursorComplete
from pagemq.storage.message_codec import CodecError
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

"""`describe_paging`: readable lines for every folder and page, also when files are damaged."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pagemq.core.message import Message
from pagemq.storage.message_codec import encode_message
from pagemq.storage.paging.page_store import PagedRecord, PageStore
from pagemq.storage.paging.paging_print import describe_paging


def _fill(directory: Path, address: str, count: int, *, close: bool = True) -> Path:
    async def body() -> Path:
        store = PageStore(directory, address, page_size_bytes=2000)
        store.open()
        store.start(asyncio.get_running_loop())
        for i in range(count):
            message = Message(i, address, {"color": "red", "n": str(i)}, b"x" * 100, persistent=i % 2 == 0)
            store.append([PagedRecord(i, (7,), message.persistent, encode_message(message))])
        await store.flush()
        if close:
            await store.close()
        else:
            await store._writer.stop()  # type: ignore[union-attr]
        return store.folder

    return asyncio.run(body())


def test_lists_each_address_page_counts_and_first_and_last_message(tmp_path: Path) -> None:
    _fill(tmp_path, "orders/eu", 20)
    _fill(tmp_path, "audit", 1)
    lines = list(describe_paging(tmp_path))
    text = "\n".join(lines)
    assert "address 'orders/eu'" in text and "address 'audit'" in text
    assert "000000001.page" in text and "summary ok" in text
    assert "first @24: id=0 queues=[7] persistent" in text
    assert "color='red'" in text and "body=100B" in text
    assert any(line.strip().startswith("last @") for line in lines)


def test_filters_by_address_and_verbose_prints_every_record(tmp_path: Path) -> None:
    _fill(tmp_path, "orders", 5)
    _fill(tmp_path, "audit", 3)
    lines = list(describe_paging(tmp_path, "audit", verbose=True))
    assert not any("orders" in line for line in lines)
    assert sum(1 for line in lines if line.strip().startswith("record @")) == 3
    assert list(describe_paging(tmp_path, "missing")) == ["no page folder for address 'missing'"]


def test_reports_damage_without_failing(tmp_path: Path) -> None:
    folder = _fill(tmp_path, "orders", 40, close=False)
    pages = sorted(folder.glob("*.page"))
    with open(pages[-1], "ab") as handle:
        handle.write(b"\x40\x00\x00\x00torn")
    pages[0].write_bytes(b"JUNK")
    (folder / "000000002.summary").write_bytes(b"bad")
    text = "\n".join(describe_paging(tmp_path))
    assert "unreadable file header" in text
    assert "summary damaged" in text
    assert "torn tail: incomplete frame" in text
    assert "no summary (live or not closed)" in text


def test_missing_directory_is_reported(tmp_path: Path) -> None:
    assert list(describe_paging(tmp_path / "none")) == [f"no paging directory at {tmp_path / 'none'}"]

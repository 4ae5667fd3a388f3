"""Random pages read through the worker's byte ranges (page_store._PageReader with
page_io.ReadAhead): frames from 1 byte to 300 KiB (longer than a range), up to three bits
flipped anywhere after the file header (frame headers included), a start ordinal mid-page,
a range size that changes while reading (a queue's budget share does), reads landing one
at a time or all at once. Whatever happens, the records read ahead are those read at once,
each at most once and in order, and every record whose frame no flip touched is read."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import pytest

from pagemq.storage.paging.page_format import FILE_HEADER, FRAME_HEADER, PagedRecord
from pagemq.storage.paging.page_io import QueuedPageIO, ReadSize
from pagemq.storage.paging.page_store import PageStore

QUEUE = 7
SIZES = [1, 10, 100, 3000, 20_000, 70_000, 300_000]
RANGES = [64, 1000, 16 * 1024, 64 * 1024, 256 * 1024]


def _frame_spans(data: bytes) -> list[tuple[int, int]]:
    at, spans = FILE_HEADER.size, []
    while at < len(data):
        end = at + FRAME_HEADER.size + FRAME_HEADER.unpack_from(data, at)[2]
        spans.append((at, end))
        at = end
    return spans


async def _write_one_record_frames(folder: Path, records: list[PagedRecord]) -> None:
    store = PageStore(folder, "a", page_size_bytes=64 << 20)
    store.open()
    store.start(asyncio.get_running_loop())
    for record in records:
        store.append([record])
    await store.flush()
    await store.close()


@pytest.mark.parametrize("seed", range(40))
def test_ranged_reads_of_a_random_damaged_page_read_every_intact_record_once_in_order(
        tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="pagemq.paging")  # damage warnings are expected
    rnd = random.Random(seed)
    count = rnd.randint(1, 30)
    sizes = [rnd.choice(SIZES) for _ in range(count)]

    asyncio.run(_write_one_record_frames(
        tmp_path, [PagedRecord(n + 1, (QUEUE,), True, bytes([n]) * size) for n, size in enumerate(sizes)]))
    (page,) = tmp_path.glob("*/*.page")
    data = bytearray(page.read_bytes())
    spans = _frame_spans(bytes(data))
    touched: set[int] = set()
    for _ in range(rnd.randint(0, 3)):
        at = rnd.randrange(FILE_HEADER.size, len(data))
        data[at] ^= 1 << rnd.randrange(8)
        touched |= {n for n, (first, end) in enumerate(spans) if first <= at < end}
    page.write_bytes(bytes(data))
    start = rnd.choice([0, 0, rnd.randrange(count)])

    async def read() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        io = QueuedPageIO()
        pages = PageStore(tmp_path, "a", page_size_bytes=64 << 20, page_io=io)
        pages.open()
        pages.start(asyncio.get_running_loop())
        at_once = [(o, r.message_id) for o, r in pages.read_page(1, start)]
        size = ReadSize(rnd.choice(RANGES))
        ahead: list[tuple[int, int]] = []
        for entry in pages.read_page_ahead(1, start, size=size, arrived=lambda: None):
            if rnd.random() < 0.2:
                size.bytes = rnd.choice(RANGES)
            if entry is None:
                assert io.run(rnd.choice([1, None])) >= 1
                continue
            ahead.append((entry[0], entry[1].message_id))
        await pages.close()
        return at_once, ahead

    at_once, ahead = asyncio.run(read())
    assert ahead == at_once
    assert ahead == sorted(set(ahead))
    assert all(message_id == ordinal + 1 for ordinal, message_id in ahead)
    intact = {(n, n + 1) for n in range(start, count) if n not in touched}
    assert intact <= set(ahead), sorted(intact - set(ahead))

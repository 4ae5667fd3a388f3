"""The page writers' shared pool: many page stores, a few threads, each store's batches in
order and durable before their futures resolve, and a kill -9 after the futures keeps all."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from pagemq.storage.fileio import FaultyFileIO
from pagemq.storage.paging.page_recovery import recover_folder
from pagemq.storage.paging.page_store import PagedRecord, PageStore
from pagemq.storage.paging.page_sync_pool import PageSyncPool

STORES = 200


def rec(message_id: int) -> PagedRecord:
    return PagedRecord(message_id, (1,), True, bytes([message_id % 251]) * 64)


def writer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("test-pool")]


def test_two_hundred_page_stores_share_two_threads_and_keep_each_ones_order(tmp_path: Path) -> None:
    async def body() -> None:
        pool = PageSyncPool(threads=2, name="test-pool")
        loop = asyncio.get_running_loop()
        stores = []
        for n in range(STORES):
            store = PageStore(tmp_path, f"tenant.{n}", page_size_bytes=4096, sync_pool=pool,
                              sync_timeout=0.001)
            store.open()
            store.start(loop)
            stores.append(store)
        futures = []
        for round_ in range(5):  # interleaved: every store has several batches in flight
            for n, store in enumerate(stores):
                futures.append(store.append([rec(n * 10 + round_)])[2])
        await asyncio.gather(*futures)
        assert pool.threads <= 2 and len(writer_threads()) <= 2
        for n, store in enumerate(stores):
            read = [r.message_id for info in store.pages() for _, r in store.read_page(info.page_no)]
            assert read == [n * 10 + round_ for round_ in range(5)]
        await asyncio.gather(*(store.close() for store in stores))
        pool.shutdown()
        assert writer_threads() == []

    asyncio.run(body())


def test_a_pool_without_paging_starts_no_thread() -> None:
    pool = PageSyncPool(threads=4, name="test-pool")
    assert pool.threads == 0 and writer_threads() == []
    pool.shutdown()


def test_receipted_appends_of_many_stores_survive_a_power_cut(tmp_path: Path) -> None:
    """A future resolved means that store's page was fsynced, whichever pool thread wrote it."""
    fileio = FaultyFileIO()

    async def body() -> None:
        pool = PageSyncPool(threads=3, name="test-pool")
        loop = asyncio.get_running_loop()
        stores = [PageStore(tmp_path, f"tenant.{n}", page_size_bytes=4096, sync_pool=pool,
                            fileio=fileio) for n in range(40)]
        for store in stores:
            store.open()
            store.start(loop)
        await asyncio.gather(*(store.append([rec(n)])[2] for n, store in enumerate(stores)))
        fileio.crash()  # power cut: what was not fsynced is gone
        pool.shutdown()

    asyncio.run(body())
    for n in range(40):
        folder = tmp_path / PageStore(tmp_path, f"tenant.{n}", page_size_bytes=4096).folder.name
        recovered = recover_folder(folder, f"tenant.{n}", fileio, write_summaries=False)
        assert [page.stats.count for page in recovered.pages] == [1], f"tenant.{n}"


def test_recovery_after_a_kill_leaves_the_scanned_summary_to_the_writer(tmp_path: Path) -> None:
    """Opening a folder whose live page has no summary reads it and writes nothing; once the
    store is started its writer writes the summary, so the next open reads no page."""

    async def fill() -> None:
        store = PageStore(tmp_path, "orders", page_size_bytes=4096)
        store.open()
        store.start(asyncio.get_running_loop())
        await store.append([rec(1), rec(2)])[2]  # type: ignore[misc]
        await store._writer.stop()  # type: ignore[union-attr]  # no roll: like a kill

    asyncio.run(fill())
    store = PageStore(tmp_path, "orders", page_size_bytes=4096)
    store.open(defer_summaries=True)
    assert store.stats()["pages_scanned"] == 1
    assert not list(store.folder.glob("*.summary"))  # nothing written on the caller's thread

    async def start() -> None:
        store.start(asyncio.get_running_loop())
        await store.flush()
        await store.close()

    asyncio.run(start())
    again = PageStore(tmp_path, "orders", page_size_bytes=4096)
    again.open()
    assert again.stats()["pages_scanned"] == 0 and again.stats()["summaries_read"] == 1
    assert [r.message_id for _, r in again.read_page(1)] == [1, 2]


@pytest.mark.parametrize("threads", [0, -1])
def test_a_pool_needs_a_thread(threads: int) -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        PageSyncPool(threads=threads)


def test_one_page_store_writing_without_pause_keeps_to_one_thread(tmp_path: Path) -> None:
    """A store's next batch, scheduled by the pool thread that ends the one before, is run by
    that thread: a second thread would only wake to wait and take the GIL from the loop."""
    async def body() -> None:
        pool = PageSyncPool(threads=4, name="test-pool")
        store = PageStore(tmp_path, "orders", page_size_bytes=1 << 20, sync_pool=pool, sync_timeout=0.002)
        store.open()
        store.start(asyncio.get_running_loop())
        futures = []
        for n in range(400):  # appends keep coming while batches are written
            futures.append(store.append([rec(n)])[2])
            await asyncio.sleep(0.0002)
        await asyncio.gather(*futures)
        assert len({id(f) for f in futures}) > 5 and pool.threads == 1  # many batches, one thread
        read = [r.message_id for info in store.pages() for _, r in store.read_page(info.page_no)]
        assert read == list(range(400))
        await store.close()
        pool.shutdown()

    asyncio.run(body())

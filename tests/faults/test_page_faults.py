"""Page store under injected faults (`FaultyFileIO`); each test names the fault it injects.

`crash()` is a power cut: bytes not fsynced and directory entries (create, rename, remove,
mkdir) whose directory was not fsynced are gone. A future that resolved promised its
records, closes and deletes are durable; these tests hold the store to that.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from pagemq.core.message import Message
from pagemq.storage.api import AddressRecord, QueueRecord
from pagemq.storage.fileio import REAL_FILE_IO, FaultyFileIO, SimulatedCrash
from pagemq.storage.inventory import read_state
from pagemq.storage.message_codec import encode_message
from pagemq.storage.message_store import JournalMessageStore
from pagemq.storage.paging.page_format import folder_name
from pagemq.storage.paging.page_recovery import remove_unfinished_folders
from pagemq.storage.paging.page_store import PagedRecord, PageStore


def rec(message_id: int, *, persistent: bool = True, size: int = 100) -> PagedRecord:
    return PagedRecord(message_id, (1,), persistent, bytes([message_id % 251]) * size)


async def started(directory: Path, fio: FaultyFileIO, page_size: int = 4096) -> PageStore:
    store = PageStore(directory, "orders", page_size_bytes=page_size, fileio=fio)
    store.open()
    store.start(asyncio.get_running_loop())
    return store


def reopen(directory: Path, page_size: int = 4096) -> PageStore:
    store = PageStore(directory, "orders", page_size_bytes=page_size)
    store.open()
    return store


def all_ids(store: PageStore) -> list[int]:
    return [r.message_id for info in store.pages() for _, r in store.read_page(info.page_no)]


async def power_cut(store: PageStore, fio: FaultyFileIO) -> None:
    """Every further step fails (the process is gone), then the power goes."""
    fio.crash_after(1)
    await store.close()
    fio.crash()


def test_power_loss_keeps_a_new_address_folder_and_its_first_receipted_record(tmp_path: Path) -> None:
    """Fault: power cut right after the first append's future resolved. The paging
    directory, the address folder and the page file were all created by that append:
    each entry must be durable (parent directories fsynced) before the future resolves."""
    paging = tmp_path / "data" / "paging"
    fio = FaultyFileIO()

    async def body() -> None:
        store = await started(paging, fio)
        await store.append([rec(1)])[2]  # type: ignore[misc]
        await power_cut(store, fio)

    asyncio.run(body())
    assert (paging / folder_name("orders") / "address.txt").read_bytes() == b"orders"
    assert all_ids(reopen(paging)) == [1]


async def _journal_knowing_orders(data: Path) -> None:
    """The journal as the broker leaves it before an address first pages: the address and
    its queue (id 1) are recorded, so `data check` knows whose page folder it finds."""
    store = JournalMessageStore(data / "journal", file_size=64 * 1024)
    store.load()
    store.start(asyncio.get_running_loop())
    store.add_address(AddressRecord(7, "orders", "anycast"))
    store.add_queue(QueueRecord(1, "orders", "orders", "anycast"))
    await store.flush()
    await store.close()


def _check_findings(data: Path) -> tuple[list[str], list[str]]:
    """(problems, notes) of `pagemq data check` on the data directory."""
    state = read_state(data)
    problems = [f.line(data) for f in state.findings if f.problem]
    notes = [f.line(data) for f in state.findings if not f.problem]
    return problems, notes


@pytest.mark.parametrize("power_cut_too", [False, True], ids=["kill", "power-cut"])
@pytest.mark.parametrize("step", range(1, 17))
def test_a_crash_at_any_step_of_a_new_address_folder_leaves_what_data_check_and_a_start_accept(
    tmp_path: Path, step: int, power_cut_too: bool
) -> None:
    """Fault: the process dies at the n-th mutating step of an address's first append (its
    folder, address.txt, the page file, the fsyncs), then a start (unfinished folders
    removed, folders discovered and opened) and a clean stop. Seed 665 of the model-based
    test: a kill -9 between the folder's mkdir and address.txt's rename left a folder without
    its address.txt that no start completed, and `data check` failed after the clean stop.
    Neither right after the crash nor after the stop may `data check` find a problem, and
    after the stop every folder in the paging directory is an address folder."""
    data = tmp_path / "data"
    paging = data / "paging"
    fio = FaultyFileIO()
    receipted: list[int] = []

    async def crash_then_start() -> None:
        await _journal_knowing_orders(data)
        paging.mkdir()  # as BrokerServer.start makes it
        store = await started(paging, fio)
        fio.crash_after(step)
        try:
            message = encode_message(Message(1, "orders", {}, b"m1", persistent=True))
            await store.append([PagedRecord(1, (1,), True, message)])[2]  # type: ignore[misc]
            receipted.append(1)
        except OSError:
            pass
        with pytest.raises(SimulatedCrash):
            fio.crash_after(1)  # whatever the step was, the process is gone now
            fio.fsync_directory(tmp_path)
        await store.close()
        if power_cut_too:
            fio.crash()
        problems, _notes = _check_findings(data)
        assert not problems, (step, problems)

        remove_unfinished_folders(paging, REAL_FILE_IO)  # as BrokerServer.start does
        for address in PageStore.discover(paging):
            again = PageStore(paging, address, page_size_bytes=4096)
            again.open()
            again.start(asyncio.get_running_loop())
            assert all_ids(again) == receipted or not receipted
            await again.close()

    asyncio.run(crash_then_start())
    problems, notes = _check_findings(data)
    assert not problems, (step, problems)
    assert not [n for n in notes if "paging" in n], (step, notes)
    for folder in paging.iterdir():
        assert (folder / "address.txt").read_bytes() == b"orders", (step, sorted(paging.iterdir()))


def test_power_loss_after_a_page_close_keeps_its_data_and_summary(tmp_path: Path) -> None:
    """Fault: power cut after a close completed. Non-persistent records are never fsynced
    on their own; the close must fsync the page before writing the summary, and the
    summary's name must be durable, so the page opens from its summary, whole."""
    fio = FaultyFileIO()

    async def body() -> None:
        store = await started(tmp_path, fio)
        await store.append([rec(1)])[2]  # type: ignore[misc]
        for i in range(2, 6):
            assert store.append([rec(i, persistent=False)])[2] is None
        store.roll()
        await store.flush()
        await power_cut(store, fio)

    asyncio.run(body())
    store = reopen(tmp_path)
    assert store.stats()["pages_scanned"] == 0  # the summary survived and matches the page
    info = store.pages()[0]
    assert (info.count, info.persistent_count) == (5, 1)


def test_power_loss_after_a_delete_completed_does_not_bring_the_page_back(tmp_path: Path) -> None:
    """Fault: power cut after the delete's future resolved. The removal must be durable
    (folder fsynced) by then: the core deletes the page's journal records at that point,
    and a page coming back without them would be delivered again."""
    fio = FaultyFileIO()
    in_first: list[int] = []

    async def body() -> None:
        store = await started(tmp_path, fio, page_size=400)
        for i in range(6):
            await store.append([rec(i)])[2]  # type: ignore[misc]
        in_first.extend(r.message_id for _, r in store.read_page(1))
        deleted = store.delete_page(1)
        assert deleted is not None
        await deleted
        await power_cut(store, fio)

    asyncio.run(body())
    store = reopen(tmp_path, page_size=400)
    assert in_first and 1 not in {info.page_no for info in store.pages()}
    assert all_ids(store) == [i for i in range(6) if i not in in_first]


@pytest.mark.parametrize("step", range(1, 30))
def test_power_loss_at_any_step_of_roll_close_and_delete_keeps_every_completed_promise(
    tmp_path: Path, step: int
) -> None:
    """Fault: power cut at the n-th mutating step while pages are written, closed and
    deleted. Whatever future resolved before the cut holds: receipted records are there
    unless their page's deletion completed; a completed deletion stays done."""
    fio = FaultyFileIO()
    receipted: set[int] = set()
    deleted_pages: set[int] = set()
    deleted_ids: set[int] = set()

    async def body() -> None:
        store = await started(tmp_path, fio, page_size=400)
        fio.crash_after(step)
        try:
            for i in range(12):
                future = store.append([rec(i)])[2]
                await future  # type: ignore[misc]
                receipted.add(i)
                if i % 4 == 3:
                    first = store.pages()[0].page_no
                    ids_in_page = {r.message_id for _, r in store.read_page(first)}
                    done = store.delete_page(first)
                    assert done is not None
                    await done
                    deleted_pages.add(first)
                    deleted_ids.update(ids_in_page)
        except OSError:
            pass
        await store.close()
        fio.crash()

    asyncio.run(body())
    store = reopen(tmp_path, page_size=400)
    present = set(all_ids(store))
    assert receipted - deleted_ids <= present, (step, sorted(receipted - deleted_ids - present))
    assert not deleted_pages & {info.page_no for info in store.pages()}, step


def test_a_failed_page_delete_fails_flush_and_its_own_future(tmp_path: Path) -> None:
    """Fault: the remove of a page file fails (EIO). The delete's future and the next
    flush() carry the error (the core then keeps the page's cursor records); the page
    stays on disk; the flush after that is clean again."""
    fio = FaultyFileIO()

    async def body() -> None:
        store = await started(tmp_path, fio, page_size=400)
        for i in range(6):
            await store.append([rec(i)])[2]  # type: ignore[misc]
        page = store.folder / "000000001.page"
        fio.fail_remove(1)
        deleted = store.delete_page(1)
        flushed = store.flush()
        with pytest.raises(OSError) as info:
            await flushed
        assert info.value.errno == errno.EIO and "000000001.page" in str(info.value)
        with pytest.raises(OSError):
            await deleted  # type: ignore[misc]
        assert page.exists()
        await store.flush()  # reported once: later flushes are not poisoned
        store.append([rec(99)])
        await store.flush()
        await store.close()

    asyncio.run(body())


def test_a_delete_failure_in_a_batch_in_flight_fails_a_flush_asked_later(tmp_path: Path) -> None:
    """Fault: the delete fails while the batch holding it is being written; a flush asked
    after that batch was taken (nothing queued any more) still reports it."""
    fio = FaultyFileIO()

    async def body() -> None:
        store = await started(tmp_path, fio, page_size=400)
        for i in range(6):
            await store.append([rec(i)])[2]  # type: ignore[misc]
        fio.fail_remove(1)
        done = store.delete_page(1)
        assert done is not None
        with pytest.raises(OSError):
            await done
        with pytest.raises(OSError, match=r"000000001\.page"):
            await store.flush()
        await store.close()

    asyncio.run(body())


def test_held_fsync_holds_the_append_future(tmp_path: Path) -> None:
    """Fault: fsync blocked. A persistent append's future (what a RECEIPT waits for) does
    not resolve until the fsync is released."""
    fio = FaultyFileIO()

    async def body() -> None:
        store = await started(tmp_path, fio)
        await store.append([rec(0)])[2]  # type: ignore[misc]
        fio.hold_fsync()
        future = store.append([rec(1)])[2]
        assert future is not None
        assert await asyncio.to_thread(fio.fsync_waiting.wait, 5)
        await asyncio.sleep(0.2)
        assert not future.done()
        fio.release_fsync()
        await asyncio.wait_for(future, 5)
        await store.close()

    asyncio.run(body())

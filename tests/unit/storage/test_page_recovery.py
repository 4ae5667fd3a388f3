"""Opening a page folder after crashes and damage; each test names the fault it injects."""

from __future__ import annotations

import asyncio
import logging
import shutil
from io import StringIO
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagemq.storage.data_commands import check
from pagemq.storage.fileio import FaultyFileIO, FileIO
from pagemq.storage.paging.page_format import FILE_HEADER, encode_frame, folder_name, read_frames
from pagemq.storage.paging.page_recovery import remove_unfinished_folders, unfinished_folder
from pagemq.storage.paging.page_store import PagedRecord, PageStore
from pagemq.storage.paging.paging_print import describe_paging


def rec(message_id: int, *, persistent: bool = True, size: int = 100) -> PagedRecord:
    return PagedRecord(message_id, (1,), persistent, bytes([message_id % 251]) * size)


def reopen(directory: Path, fileio: FileIO | None = None, page_size: int = 4096) -> PageStore:
    store = (
        PageStore(directory, "orders", page_size_bytes=page_size, fileio=fileio)
        if fileio is not None else PageStore(directory, "orders", page_size_bytes=page_size)
    )
    store.open()
    return store


def all_ids(store: PageStore) -> list[int]:
    return [r.message_id for info in store.pages() for _, r in store.read_page(info.page_no)]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def write_pages(directory: Path, records: list[list[PagedRecord]], page_size: int = 4096,
                *, close: bool = True) -> Path:
    """Append each batch, wait for it; close cleanly or leave as a kill -9 would."""

    async def body() -> Path:
        store = PageStore(directory, "orders", page_size_bytes=page_size)
        store.open()
        store.start(asyncio.get_running_loop())
        for batch in records:
            store.append(batch)
        await store.flush()
        if close:
            await store.close()
        else:
            await store._writer.stop()  # type: ignore[union-attr]  # no roll: like a kill
        return store.folder

    return asyncio.run(body())


async def kill(store: PageStore, fileio: FaultyFileIO) -> None:
    """Power cut: every further step fails, then unsynced bytes vanish."""
    fileio.crash_after(1)
    await store.close()
    fileio.crash()


def test_recovering_an_undamaged_folder_changes_nothing(tmp_path: Path) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(50)], page_size=1000)
    before = snapshot(folder)
    store = reopen(tmp_path, page_size=1000)
    assert snapshot(folder) == before
    assert all_ids(store) == list(range(50))


def test_second_open_after_a_kill_is_a_no_op(tmp_path: Path) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(50)], page_size=1000, close=False)
    reopen(tmp_path, page_size=1000)
    after_first = snapshot(folder)
    store = reopen(tmp_path, page_size=1000)
    assert snapshot(folder) == after_first
    assert store.stats()["pages_scanned"] == 0
    assert all_ids(store) == list(range(50))


def test_torn_tail_is_truncated_at_every_byte_offset_of_the_last_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_pages(tmp_path / "orig", [[rec(0)], [rec(1)], [rec(2), rec(3)]], close=False)
    page = folder / "000000001.page"
    data = page.read_bytes()
    last = len(encode_frame([rec(2), rec(3)]))
    whole = len(data) - last
    for cut in range(last):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(tmp_path / "orig", work)
        torn = work / folder.name / page.name
        torn.write_bytes(data[: whole + cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pagemq.paging"):
            store = reopen(work)
        assert all_ids(store) == [0, 1], cut
        assert torn.stat().st_size == whole
        if cut:
            (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert str(torn) in warning and f"offset {whole}" in warning
            assert f"dropping {cut} bytes" in warning
        shutil.rmtree(work)


@pytest.mark.parametrize("tear_at", [1, 7, 8, 60, 200, -1])
def test_batch_is_all_or_nothing_when_its_write_is_torn_by_a_crash(tmp_path: Path, tear_at: int) -> None:
    batch = [rec(2), rec(3, persistent=False), rec(4)]

    async def body() -> None:
        fileio = FaultyFileIO()
        store = PageStore(tmp_path, "orders", page_size_bytes=4096, fileio=fileio)
        store.open()
        store.start(asyncio.get_running_loop())
        await store.append([rec(1)])[2]  # type: ignore[misc]
        fileio.tear_write(1, tear_at % len(encode_frame(batch)))
        with pytest.raises(OSError, match="simulated crash"):
            await store.append(batch)[2]  # type: ignore[misc]
        await kill(store, fileio)

    asyncio.run(body())
    assert all_ids(reopen(tmp_path)) == [1]


@pytest.mark.parametrize("step", range(1, 40))
def test_a_crash_at_any_step_keeps_every_acknowledged_batch_whole(tmp_path: Path, step: int) -> None:
    async def body() -> list[int]:
        fileio = FaultyFileIO()
        store = PageStore(tmp_path, "orders", page_size_bytes=700, fileio=fileio)
        store.open()
        store.start(asyncio.get_running_loop())
        fileio.crash_after(step)
        acked: list[int] = []
        for i in range(0, 16, 2):
            try:
                await store.append([rec(i), rec(i + 1)])[2]  # type: ignore[misc]
            except OSError:
                break
            acked += [i, i + 1]
        await store.close()
        fileio.crash()
        return acked

    acked = asyncio.run(body())
    recovered = all_ids(reopen(tmp_path, page_size=700))
    assert recovered[: len(acked)] == acked
    assert recovered == list(range(len(recovered))) and len(recovered) % 2 == 0


def test_unsynced_non_persistent_records_vanish_with_a_crash(tmp_path: Path) -> None:
    async def body() -> None:
        fileio = FaultyFileIO()
        store = PageStore(tmp_path, "orders", page_size_bytes=4096, fileio=fileio)
        store.open()
        store.start(asyncio.get_running_loop())
        await store.append([rec(1)])[2]  # type: ignore[misc]
        assert store.append([rec(2, persistent=False)])[2] is None
        await store.flush()
        await kill(store, fileio)

    asyncio.run(body())
    assert all_ids(reopen(tmp_path)) == [1]


def test_missing_summary_of_a_closed_page_is_rebuilt_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(30)], page_size=1000)
    (folder / "000000002.summary").unlink()
    with caplog.at_level(logging.WARNING, logger="pagemq.paging"):
        store = reopen(tmp_path, page_size=1000)
    assert any("000000002.page" in r.getMessage() and "rescanning" in r.getMessage() for r in caplog.records)
    assert (folder / "000000002.summary").exists()
    assert store.stats()["pages_scanned"] == 1
    assert all_ids(store) == list(range(30))


@pytest.mark.parametrize("damage", ["corrupt", "stale"])
def test_unusable_summary_is_replaced_from_the_page(tmp_path: Path, damage: str) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(30)], page_size=1000)
    last_of_first = reopen(tmp_path, page_size=1000).pages()[0].last_id
    summary = folder / "000000001.summary"
    if damage == "corrupt":
        summary.write_bytes(summary.read_bytes()[:-3] + b"xyz")
    else:
        page = folder / "000000001.page"
        page.write_bytes(page.read_bytes()[:-5])  # the page lost its tail behind the summary's back
    store = reopen(tmp_path, page_size=1000)
    assert store.stats()["pages_scanned"] == 1
    lost = set() if damage == "corrupt" else {last_of_first}
    assert all_ids(store) == [i for i in range(30) if i not in lost]


def test_orphan_summary_and_temporary_files_are_removed(tmp_path: Path) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(30)], page_size=1000)
    (folder / "000000001.page").unlink()  # a crash between the two removals of a delete
    (folder / "000000002.summary.tmp").write_bytes(b"half")
    store = reopen(tmp_path, page_size=1000)
    assert not (folder / "000000001.summary").exists()
    assert not (folder / "000000002.summary.tmp").exists()
    assert store.pages()[0].page_no == 2


def test_torn_file_header_page_is_removed_and_damaged_header_read_past_or_set_aside(tmp_path: Path) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(30)], page_size=1000, close=False)
    pages = sorted(folder.glob("*.page"))
    last = pages[-1]
    middle, junk = pages[1], pages[2]
    in_middle = [r.message_id for _, r in reopen(tmp_path, page_size=1000).read_page(2)]
    last.write_bytes(last.read_bytes()[: FILE_HEADER.size - 3])
    # (no summary: a page with one was closed, and one shorter than it records is damaged)
    last.with_name(last.name.replace(".page", ".summary")).unlink(missing_ok=True)
    for page in (middle, junk):
        page.with_name(page.name.replace(".page", ".summary")).unlink()
    middle.write_bytes(b"JUNK" + middle.read_bytes()[4:])  # header damaged, frames intact
    junk.write_bytes(b"JUNK" + bytes(len(junk.read_bytes()) - 4))  # nothing readable
    store = reopen(tmp_path, page_size=1000)
    assert not last.exists()
    assert [r.message_id for _, r in store.read_page(2)] == in_middle
    assert (folder / (junk.name + ".damaged")).exists() and not junk.exists()
    assert 3 not in {i.page_no for i in store.pages()}
    assert store.live_page_no() == len(pages) + 1  # no number seen on disk is reused


def test_damage_inside_a_summarised_page_is_read_past_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(5)])
    page = folder / "000000001.page"
    data = bytearray(page.read_bytes())
    third = FILE_HEADER.size + 2 * len(encode_frame([rec(0)]))
    data[third + 20] ^= 0xFF
    page.write_bytes(bytes(data))
    store = reopen(tmp_path)
    with caplog.at_level(logging.WARNING, logger="pagemq.paging"):
        assert list((o, r.message_id) for o, r in store.read_page(1)) == [(0, 0), (1, 1), (3, 3), (4, 4)]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"damaged bytes at offset {third}" in warning and "1 record(s) lost" in warning
    assert store.pages()[0].page_no == 1


def test_a_damaged_frame_in_the_live_page_does_not_cut_the_receipted_records_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The defect: recovery truncated a page at its first bad frame, dropping every record
    after it. Now only the bad frame is lost, the file is not cut, and the summary says the
    page is damaged, so it is set aside rather than deleted when done with."""
    folder = write_pages(tmp_path, [[rec(i)] for i in range(8)], close=False)
    page = folder / "000000001.page"
    data = bytearray(page.read_bytes())
    size = len(data)
    bad = FILE_HEADER.size + 3 * len(encode_frame([rec(0)]))
    data[bad + 40] ^= 0x01
    page.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="pagemq.paging"):
        store = reopen(tmp_path)
    assert page.stat().st_size == size
    assert [r.message_id for _, r in store.read_page(1)] == [0, 1, 2, 4, 5, 6, 7]
    assert any(f"damaged bytes at offset {bad}" in r.getMessage() for r in caplog.records)
    again = reopen(tmp_path)  # from the summary now, still known as damaged
    assert again.stats()["pages_scanned"] == 0 and again._pages[1].damaged


def test_a_damaged_page_is_set_aside_not_deleted_when_done_with(tmp_path: Path) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(4)])
    page = folder / "000000001.page"
    data = bytearray(page.read_bytes())
    data[FILE_HEADER.size + 40] ^= 0x01
    page.write_bytes(bytes(data))

    async def body() -> None:
        store = PageStore(tmp_path, "orders", page_size_bytes=4096)
        store.open()
        store.start(asyncio.get_running_loop())
        assert [r.message_id for _, r in store.read_page(1)] == [1, 2, 3]
        await store.delete_page(1)  # type: ignore[misc]
        await store.close()

    asyncio.run(body())
    assert not page.exists() and not (folder / "000000001.summary").exists()
    assert (folder / "000000001.page.damaged").read_bytes() == bytes(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4))
def test_random_damage_to_the_live_page_costs_only_the_frames_it_hits(
    tmp_path: Path, flips: list[tuple[int, int]]
) -> None:
    work = tmp_path / "random"
    shutil.rmtree(work, ignore_errors=True)
    records = [[rec(i)] if i % 3 else [rec(i, size=40)] for i in range(25)]
    folder = write_pages(work, records, close=False)
    page = folder / "000000001.page"
    data = bytearray(page.read_bytes())
    spans, at = [], FILE_HEADER.size
    for i, batch in enumerate(records):
        size = len(encode_frame(batch, i))
        spans.append((at, at + size, i))
        at += size
    hit = set()
    for offset, xor in flips:
        where = FILE_HEADER.size + offset % (len(data) - FILE_HEADER.size)
        data[where] ^= xor
        hit |= {i for start, end, i in spans if start <= where < end}
    page.write_bytes(bytes(data))
    ids = all_ids(reopen(work))
    assert ids == sorted(ids) and set(ids) <= set(range(25))
    assert set(range(25)) - hit <= set(ids), (sorted(hit), ids)


def test_damage_found_reading_a_summarised_page_is_counted_in_a_new_summary(tmp_path: Path) -> None:
    """The next start counts only what can be delivered (so queues can finish the page),
    knows the page is damaged, and never cuts it."""
    folder = write_pages(tmp_path, [[rec(i)] for i in range(5)])
    page = folder / "000000001.page"
    data = bytearray(page.read_bytes())
    third = FILE_HEADER.size + 2 * len(encode_frame([rec(0)]))
    data[third + 20] ^= 0xFF
    page.write_bytes(bytes(data))

    async def body() -> None:
        store = PageStore(tmp_path, "orders", page_size_bytes=4096)
        store.open()
        store.start(asyncio.get_running_loop())
        assert store.pages()[0].queue_counts == {1: 5}
        assert [r.message_id for _, r in store.read_page(1)] == [0, 1, 3, 4]
        await store.flush()
        await store.close()

    asyncio.run(body())
    store = reopen(tmp_path)
    info = store.pages()[0]
    assert store.stats()["pages_scanned"] == 0 and store._pages[1].damaged
    assert (info.count, info.queue_counts) == (5, {1: 4})
    assert page.read_bytes() == bytes(data)


def test_a_start_removes_what_an_interrupted_folder_creation_left_and_nothing_else(tmp_path: Path) -> None:
    """Fault: folder creations cut by a crash. A staging folder (`<name>.tmp`, with or without
    its address.txt) and a folder made in place by an older version with only
    `address.txt.tmp` hold no page: `data check` notes them (exit 0), a start removes them.
    A folder without address.txt that holds a page is not one of them: kept, and a problem."""
    data = tmp_path / "data"
    paging = data / "paging"
    staged = paging / (folder_name("a") + ".tmp")
    staged_empty = paging / (folder_name("b") + ".tmp")
    in_place = paging / folder_name("c")
    for folder in (staged, staged_empty, in_place):
        folder.mkdir(parents=True)
    (staged / "address.txt").write_bytes(b"a")
    (in_place / "address.txt.tmp").write_bytes(b"c")
    out = StringIO()
    assert check(data, out=out) == 0, out.getvalue()
    assert out.getvalue().count("a crash interrupted") == 3
    assert PageStore.discover(paging) == {}  # a staging folder's address.txt names no folder yet
    printed = list(describe_paging(paging))
    assert len(printed) == 3 and all("a crash interrupted" in line for line in printed), printed

    kept = paging / "not-a-page-folder"  # not named as the broker names its folders
    kept.mkdir()
    assert [f for f in sorted(paging.iterdir()) if unfinished_folder(f)] == [staged, staged_empty, in_place]

    assert remove_unfinished_folders(paging, FaultyFileIO()) == [staged, staged_empty, in_place]
    assert sorted(paging.iterdir()) == [kept]

    orphan = write_pages(tmp_path / "other", [[rec(1)]])
    (orphan / "address.txt").unlink()
    shutil.move(orphan, paging / orphan.name)
    assert remove_unfinished_folders(paging, FaultyFileIO()) == []
    out = StringIO()
    assert check(data, out=out) == 1
    assert "without a readable address.txt" in out.getvalue()


def test_damage_found_reading_tells_which_queues_lost_how_many_records_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Fault: a byte flipped in a summarised page (of an earlier run: persistent records
    only count). The first reader to meet it logs file and offset; the store re-counts the
    page and reports, once, the records lost per queue and their ordinals; a second reader
    passing the same damage logs nothing more and nothing is reported again."""
    batches = [[PagedRecord(i, (1, 2) if i % 2 else (1,), i != 3, bytes([i]) * 100)] for i in range(6)]
    folder = write_pages(tmp_path, batches)
    page = folder / "000000001.page"
    data = bytearray(page.read_bytes())
    offsets = [at for at, _size, _first, _entries in read_frames(bytes(data), FILE_HEADER.size, len(data))]
    data[offsets[3] + 30] ^= 0xFF  # record 3: non-persistent (not counted after a restart)
    data[offsets[4] + 30] ^= 0xFF  # record 4: persistent, queue 1 only
    page.write_bytes(bytes(data))
    reports = []

    async def body() -> None:
        store = PageStore(tmp_path, "orders", page_size_bytes=4096)
        store.on_records_lost = reports.append
        store.open()
        store.start(asyncio.get_running_loop())
        assert store.pages()[0].queue_counts == {1: 5, 2: 2}
        with caplog.at_level(logging.WARNING, logger="pagemq.paging"):
            assert [r.message_id for _, r in store.read_page(1)] == [0, 1, 2, 5]
            await store.flush()
            await asyncio.sleep(0)
            assert [r.message_id for _, r in store.read_page(1, 2)] == [2, 5]
            await store.flush()
        await store.close()

    asyncio.run(body())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"damaged bytes at offset {offsets[3]}" in warnings[0], warnings
    assert "2 record(s) lost" in warnings[0]
    (report,) = reports
    assert (report.page_no, report.path, report.records) == (1, page, 1)
    assert report.queues == {1: 1} and report.ordinals == {3, 4}


def test_damage_met_by_a_reader_in_a_worker_thread_is_recounted_on_the_loop(tmp_path: Path) -> None:
    folder = write_pages(tmp_path, [[rec(i)] for i in range(5)])
    page = folder / "000000001.page"
    data = bytearray(page.read_bytes())
    data[FILE_HEADER.size + 2 * len(encode_frame([rec(0)])) + 30] ^= 0xFF
    page.write_bytes(bytes(data))
    reports = []

    async def body() -> None:
        store = PageStore(tmp_path, "orders", page_size_bytes=4096)
        store.on_records_lost = reports.append
        store.open()
        store.start(asyncio.get_running_loop())
        ids = await asyncio.to_thread(lambda: [r.message_id for _, r in store.read_page(1)])
        assert ids == [0, 1, 3, 4]
        await asyncio.sleep(0)  # the loop takes the damage over from the thread
        await store.flush()
        await asyncio.sleep(0)
        await store.close()

    asyncio.run(body())
    (report,) = reports
    assert report.queues == {1: 1} and report.ordinals == {2}

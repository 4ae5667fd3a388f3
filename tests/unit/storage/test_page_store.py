"""PageStore: appends and reads, rolling, summaries, deletion, group commit, write failures."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import pytest

from pagemq.storage.fileio import FaultyFileIO, FileIO, StrPath
from pagemq.storage.paging.page_format import FILE_HEADER, encode_frame, read_frames
from pagemq.storage.paging.page_recovery import PageFolderConflict
from pagemq.storage.paging.page_store import PagedRecord, PageStore


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


def rec(
    message_id: int, *, persistent: bool = True, queues: tuple[int, ...] = (1,), size: int = 100
) -> PagedRecord:
    return PagedRecord(message_id, queues, persistent, bytes([message_id % 251]) * size)


async def started(directory: Path, page_size: int = 4096, **options: object) -> PageStore:
    store = PageStore(directory, "orders", page_size_bytes=page_size, **options)  # type: ignore[arg-type]
    store.open()
    store.start(asyncio.get_running_loop())
    return store


def reopen(directory: Path, fileio: FileIO | None = None, page_size: int = 4096) -> PageStore:
    store = (
        PageStore(directory, "orders", page_size_bytes=page_size, fileio=fileio)
        if fileio is not None else PageStore(directory, "orders", page_size_bytes=page_size)
    )
    store.open()
    return store


def ids(store: PageStore, page_no: int, start: int = 0) -> list[tuple[int, int]]:
    return [(ordinal, r.message_id) for ordinal, r in store.read_page(page_no, start)]


def frame_size(record: PagedRecord) -> int:
    return len(encode_frame([record]))


class Builder:
    """A stand-in selector-summary builder: records the property values it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def fold(self, item: Mapping[str, object]) -> None:
        self.seen.append(str(item.get("color")))

    def to_bytes(self) -> bytes:
        return ",".join(self.seen).encode()


def test_appended_records_read_back_with_ordinals_queues_and_flags(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path)
        records = [rec(10, queues=(1, 2)), rec(11, persistent=False), rec(12, queues=())]
        positions = [store.append([r]) for r in records]
        assert [(p, o) for p, o, _ in positions] == [(1, 0), (1, 1), (1, 2)]
        assert positions[1][2] is None and positions[0][2] is not None
        await store.flush()
        assert list(store.read_page(1)) == list(enumerate(records))
        assert ids(store, 1, start=2) == [(2, 12)]
        info = store.pages()[0]
        assert (info.count, info.persistent_count, info.first_id, info.last_id) == (3, 2, 10, 12)
        assert info.queue_counts == {1: 2, 2: 1} and not info.closed
        await store.close()

    run(body)


def test_batch_gets_consecutive_ordinals_in_one_frame(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path)
        store.append([rec(1)])
        page_no, first, future = store.append([rec(2), rec(3, persistent=False), rec(4)])
        assert (page_no, first) == (1, 1)
        assert future is not None
        await future
        assert ids(store, 1) == [(0, 1), (1, 2), (2, 3), (3, 4)]
        assert ids(store, 1, start=2) == [(2, 3), (3, 4)]
        await store.close()

    run(body)


def test_records_that_only_share_a_write_are_a_frame_each_and_damage_costs_one(tmp_path: Path) -> None:
    """Not `atomic` (the SENDs of one socket read): one write, a MESSAGE frame each, so a
    flipped byte in one costs that record only; a BATCH frame would lose all three."""
    async def body() -> None:
        store = await started(tmp_path)
        store.append([rec(1)])
        page_no, first, future = store.append([rec(2), rec(3, persistent=False), rec(4)], atomic=False)
        assert (page_no, first) == (1, 1) and future is not None
        await future
        assert ids(store, 1) == [(0, 1), (1, 2), (2, 3), (3, 4)]
        with pytest.raises(ValueError, match="atomic batch"):
            store.append([PagedRecord(5, (1,), True, b"x", 9)], atomic=False)
        await store.close()
        page = next(tmp_path.glob("**/*.page"))
        data = page.read_bytes()
        frames = read_frames(data, FILE_HEADER.size, len(data))
        assert [len(entries) for _o, _s, _f, entries in frames] == [1] * 4
        middle = data.index(bytes([3]) * 100)  # record 3's bytes
        page.write_bytes(data[:middle] + b"\xff" + data[middle + 1:])
        again = reopen(tmp_path)
        again.start(asyncio.get_running_loop())
        assert ids(again, 1) == [(0, 1), (1, 2), (3, 4)]
        await again.close()

    run(body)


def test_page_rolls_before_exceeding_page_size_and_big_record_gets_own_page(tmp_path: Path) -> None:
    async def body() -> None:
        per_page = (1000 - FILE_HEADER.size) // frame_size(rec(0))
        store = await started(tmp_path, page_size=1000)
        pages = [store.append([rec(i)])[0] for i in range(per_page + 1)]
        assert pages == [1] * per_page + [2]
        assert store.append([rec(99, size=5000)])[0] == 3
        assert store.append([rec(100)])[0] == 4
        await store.flush()
        infos = store.pages()
        assert [i.closed for i in infos] == [True, True, True, False]
        assert all(i.size <= 1000 for i in infos if i.page_no != 3)
        assert ids(store, 3) == [(0, 99)]
        await store.close()

    run(body)


def test_clean_close_writes_live_summary_so_reopen_scans_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path, page_size=1000)
        for i in range(30):
            store.append([rec(i)])
        await store.close()

    run(body)
    store = reopen(tmp_path, page_size=1000)
    assert store.stats()["pages_scanned"] == 0
    assert store.stats()["summaries_read"] == len(store.pages()) > 1
    assert sum(i.count for i in store.pages()) == 30
    assert all(i.closed for i in store.pages())


class CountingIO(FaultyFileIO):
    """Counts reads of page bodies, to prove that opening reads summaries only."""

    def __init__(self) -> None:
        super().__init__()
        self.page_reads: list[str] = []

    def read_bytes(self, path: StrPath) -> bytes:  # a plain string too (recovery's reads)
        name = Path(path).name
        if name.endswith(".page"):
            self.page_reads.append(name)
        return super().read_bytes(path)

    def read_range(self, path: Path, offset: int, length: int) -> bytes:
        if path.name.endswith(".page"):
            self.page_reads.append(path.name)
        return super().read_range(path, offset, length)


def test_open_reads_summaries_of_closed_pages_and_scans_only_the_live_page(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path, page_size=1000)
        for i in range(40):
            store.append([rec(i)])
        await store.flush()  # not closed: the last page has no summary, as after kill -9

    run(body)
    spy = CountingIO()
    store = reopen(tmp_path, spy, page_size=1000)
    last = store.pages()[-1].page_no
    assert spy.page_reads == [f"{last:09d}.page"]
    assert sum(i.count for i in store.pages()) == 40
    spy.page_reads.clear()
    reopen(tmp_path, spy, page_size=1000)
    assert spy.page_reads == []


def test_selector_summary_blob_is_stored_at_roll_and_returned_after_restart(tmp_path: Path) -> None:
    async def body() -> None:
        store = PageStore(tmp_path, "orders", page_size_bytes=1000)
        store.set_summary_builder(Builder)
        store.open()
        store.start(asyncio.get_running_loop())
        for i in range(12):
            store.append([rec(i)], summary_input=[{"color": f"c{i}"}])
        first = store.pages()[0]
        assert first.closed and first.selector_summary is not None
        assert first.selector_summary.startswith(b"c0,c1")
        store.append([rec(50)])  # no summary_input: the live page's blob becomes unknown
        await store.close()
        assert store.pages()[-1].selector_summary is None

    run(body)
    infos = reopen(tmp_path, page_size=1000).pages()
    assert infos[0].selector_summary is not None and infos[0].selector_summary.startswith(b"c0,c1")
    assert infos[-1].selector_summary is None


def test_non_persistent_records_are_not_counted_or_read_after_restart(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path)
        store.append([rec(1, queues=(1, 2))])
        store.append([rec(2, persistent=False, queues=(1, 2))])
        store.append([rec(3, queues=(2,)), rec(4, persistent=False, queues=(1,))])
        await store.close()

    run(body)
    store = reopen(tmp_path)
    (info,) = store.pages()
    assert (info.count, info.persistent_count) == (4, 2)
    assert info.queue_counts == {1: 1, 2: 2}
    assert ids(store, 1) == [(0, 1), (2, 3)]  # ordinals kept: journal positions stay valid
    assert ids(store, 1, start=1) == [(2, 3)]


def test_appends_after_restart_go_to_a_new_page_and_keep_their_non_persistent_records(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path)
        store.append([rec(1, persistent=False)])
        await store.close()
        store = await started(tmp_path)
        assert store.live_page_no() == 2
        page_no, _, _ = store.append([rec(2, persistent=False)])
        await store.flush()
        assert page_no == 2
        assert ids(store, 1) == [] and ids(store, 2) == [(0, 2)]
        assert {i.page_no: i.queue_counts for i in store.pages()} == {1: {}, 2: {1: 1}}
        await store.close()

    run(body)


def test_delete_removes_page_and_summary_and_numbers_are_never_reused(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path, page_size=600)
        for i in range(12):
            store.append([rec(i)])
        for info in store.pages():
            store.delete_page(info.page_no)  # includes the live page: rolled first
        await store.flush()
        assert store.pages() == []
        assert list(store.folder.glob("*.page")) == [] and list(store.folder.glob("*.summary")) == []
        assert (store.folder / "address.txt").read_text() == "orders"
        last = store.live_page_no()
        await store.close()
        store = await started(tmp_path, page_size=600)
        assert store.live_page_no() == last
        assert store.append([rec(99)])[0] == last
        await store.close()

    run(body)


def test_delete_with_archive_moves_page_and_summary(tmp_path: Path) -> None:
    archive = tmp_path / "archive"

    async def body() -> None:
        store = await started(tmp_path / "paging", page_size=600, archive_directory=archive)
        for i in range(8):
            store.append([rec(i)])
        first = store.pages()[0].page_no
        store.delete_page(first)
        await store.flush()
        moved = archive / store.folder.name
        assert sorted(p.name for p in moved.iterdir()) == [
            "000000001.page", "000000001.summary", "address.txt",
        ]
        assert not (store.folder / "000000001.page").exists()
        await store.close()

    run(body)


def test_discover_maps_address_names_to_folders(tmp_path: Path) -> None:
    async def body() -> None:
        for name in ("orders/eu", "orders:eu"):
            store = PageStore(tmp_path, name, page_size_bytes=4096)
            store.open()
            store.start(asyncio.get_running_loop())
            store.append([rec(1)])
            await store.close()

    run(body)
    found = PageStore.discover(tmp_path)
    assert set(found) == {"orders/eu", "orders:eu"}
    assert found["orders/eu"] != found["orders:eu"]
    assert PageStore.discover(tmp_path / "missing") == {}


def test_folder_of_another_address_is_refused(tmp_path: Path) -> None:
    store = PageStore(tmp_path, "orders", page_size_bytes=4096)
    store.folder.mkdir(parents=True)
    (store.folder / "address.txt").write_text("other")
    with pytest.raises(PageFolderConflict):
        store.open()


def test_one_fsync_per_sync_batch_and_one_future_per_batch(tmp_path: Path) -> None:
    async def body() -> None:
        fileio = FaultyFileIO()
        store = await started(tmp_path, page_size=1 << 20, fileio=fileio, sync_timeout=0.05)
        await store.append([rec(0)])[2]  # type: ignore[misc]  # creates folder and page
        before = fileio.fsyncs
        futures = {store.append([rec(i)])[2] for i in range(1, 200)}
        assert len(futures) == 1
        await futures.pop()  # type: ignore[misc]
        assert fileio.fsyncs - before == 1 and store.stats()["fsyncs"] == 2
        fileio.hold_fsync()
        held = store.append([rec(300)])[2]
        await asyncio.get_running_loop().run_in_executor(None, fileio.fsync_waiting.wait, 5)
        queued = {store.append([rec(i)])[2] for i in range(301, 400)}
        assert len(queued) == 1 and held not in queued  # the next batch fills during the sync
        fileio.release_fsync()
        await held  # type: ignore[misc]
        await queued.pop()  # type: ignore[misc]
        assert fileio.fsyncs - before == 3
        assert store.stats()["records_written"] == 300
        await store.close()

    run(body)


def test_records_are_not_readable_before_their_batch_is_synced(tmp_path: Path) -> None:
    async def body() -> None:
        fileio = FaultyFileIO()
        store = await started(tmp_path, fileio=fileio)
        await store.append([rec(1)])[2]  # type: ignore[misc]
        fileio.hold_fsync()
        future = store.append([rec(2)])[2]
        await asyncio.get_running_loop().run_in_executor(None, fileio.fsync_waiting.wait, 5)
        assert ids(store, 1) == [(0, 1)]
        fileio.release_fsync()
        await future  # type: ignore[misc]
        assert ids(store, 1) == [(0, 1), (1, 2)]
        await store.close()

    run(body)


def test_read_page_works_from_a_worker_thread(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path, page_size=1 << 20)
        for i in range(500):
            store.append([rec(i)])
        await store.flush()
        result = await asyncio.get_running_loop().run_in_executor(None, ids, store, 1, 250)
        assert result == [(i, i) for i in range(250, 500)]
        await store.close()

    run(body)


def test_resuming_mid_page_seeks_by_the_index_and_reads_the_same_records(tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path, page_size=4 << 20)
        for i in range(0, 3000, 3):
            store.append([rec(i, size=1000), rec(i + 1, size=1000), rec(i + 2, size=1000)])
        await store.close()

    run(body)
    store = reopen(tmp_path, page_size=4 << 20)
    everything = ids(store, 1)
    assert len(everything) == 3000
    for start in (0, 1, 700, 1501, 2999, 3000):
        assert ids(store, 1, start) == everything[start:]


def from_spans(store: PageStore, page_no: int, start: int, span_bytes: int) -> list[tuple[int, int]]:
    frames = store.frame_spans(page_no, start, span_bytes=span_bytes)
    assert frames is not None
    found, at = [], None
    for first, begin, end in frames.spans:
        assert at is None or begin == at, "spans follow one another"
        data = frames.read(begin, end - begin)
        frames_read = list(read_frames(data, 0, len(data), version=frames.version, ordinal=first))
        assert frames_read and frames_read[-1][0] + frames_read[-1][1] == len(data), "whole frames"
        found += [(n, r.message_id) for _a, _s, index, records in frames_read
                  for n, r in enumerate(records, index) if n >= start]
        at = end
    return found


def test_frame_spans_cut_whole_frames_from_the_one_holding_an_ordinal_to_what_is_readable(
        tmp_path: Path) -> None:
    async def body() -> None:
        store = await started(tmp_path, page_size=4 << 20)
        for i in range(0, 3000, 3):
            store.append([rec(i, size=1000), rec(i + 1, size=1000), rec(i + 2, size=1000)])
        await store.flush()
        everything = ids(store, 1)
        for start in (0, 1, 700, 1501, 2999, 3000):
            for span_bytes in (1, 300_000, 8 << 20):
                assert from_spans(store, 1, start, span_bytes) == everything[start:]
        frames = store.frame_spans(1, 0, span_bytes=300_000)
        assert frames is not None and len(frames.spans) > 5 and not frames.skip_non_persistent
        fileio = FaultyFileIO()  # a batch not yet synced is not readable: not in the spans
        await store.close()
        store = await started(tmp_path, page_size=4 << 20, fileio=fileio)
        await store.append([rec(5000)])[2]  # type: ignore[misc]
        fileio.hold_fsync()
        future = store.append([rec(5001)])[2]
        await asyncio.get_running_loop().run_in_executor(None, fileio.fsync_waiting.wait, 5)
        live = max(info.page_no for info in store.pages())
        assert from_spans(store, live, 0, 1 << 20) == [(0, 5000)]
        fileio.release_fsync()
        await future  # type: ignore[misc]
        assert from_spans(store, live, 0, 1 << 20) == [(0, 5000), (1, 5001)]
        assert store.frame_spans(1, 0) is not None and store.frame_spans(1, 0).skip_non_persistent  # type: ignore[union-attr]
        assert store.frame_spans(live + 1, 0) is None
        await store.close()

    run(body)


def test_write_failure_fails_the_batch_future_and_stores_none_of_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        fileio = FaultyFileIO()
        store = await started(tmp_path, fileio=fileio)
        await store.append([rec(1)])[2]  # type: ignore[misc]
        fileio.fail_write(1, errno.ENOSPC)
        future = store.append([rec(2)])[2]
        with pytest.raises(OSError) as raised:
            await future  # type: ignore[misc]
        assert raised.value.errno == errno.ENOSPC
        await asyncio.sleep(0.02)
        assert store.live_page_no() == 2  # moved off the failed page
        page_no, ordinal, later = store.append([rec(3)])
        await later  # type: ignore[misc]
        assert (page_no, ordinal) == (2, 0)
        await store.flush()
        assert ids(store, 1) == [(0, 1)]
        assert store.pages()[0].count == 1  # re-summarised from disk
        await store.close()

    with caplog.at_level(logging.ERROR, logger="pagemq.paging"):
        run(body)
    errors = [r.getMessage() for r in caplog.records]
    assert any("No space left" in m and "000000001.page" in m and "offset" in m for m in errors)
    store = reopen(tmp_path)
    assert [(i.page_no, i.count) for i in store.pages()] == [(1, 1), (2, 1)]
    assert store.stats()["pages_scanned"] == 0


@pytest.mark.parametrize("fresh_folder", [True, False])
def test_failure_creating_a_page_leaves_no_page_behind(tmp_path: Path, fresh_folder: bool) -> None:
    async def body() -> None:
        fileio = FaultyFileIO()
        store = await started(tmp_path, fileio=fileio)
        if not fresh_folder:
            await store.append([rec(0)])[2]  # type: ignore[misc]
            store.roll()
        failing = store.live_page_no()
        fileio.fail_write(1, errno.ENOSPC)  # address.txt in a fresh folder, else the file header
        with pytest.raises(OSError):
            await store.append([rec(1)])[2]  # type: ignore[misc]
        await asyncio.sleep(0.02)
        page_no, ordinal, future = store.append([rec(2)])
        await future  # type: ignore[misc]
        await store.flush()
        assert (page_no, ordinal) == (failing + 1, 0)
        assert [i.page_no for i in store.pages()] == [*([1] if not fresh_folder else []), failing + 1]
        assert not (store.folder / f"{failing:09d}.page").exists()
        await store.close()

    run(body)
    counts = [(i.page_no, i.count) for i in reopen(tmp_path).pages()]
    assert counts == ([] if fresh_folder else [(1, 1)]) + [(counts[-1][0], 1)]


def test_append_before_start_is_refused(tmp_path: Path) -> None:
    store = PageStore(tmp_path, "orders", page_size_bytes=4096)
    store.open()
    with pytest.raises(RuntimeError):
        store.append([rec(1)])


def test_the_last_page_is_deleted_on_a_full_disk_its_number_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Deleting the highest page first notes its number (`last-page`); on a full disk that
    small write fails, so the page's bytes are given up first (the file cut to its header,
    its name kept) and the note is written in the room that frees. A drained page never
    keeps a full disk full."""
    heard: list[OSError] = []

    async def body() -> None:
        fileio = FaultyFileIO()
        store = await started(tmp_path, fileio=fileio)
        store.on_no_space = lambda _folder, error: heard.append(error)
        await store.append([rec(1, size=2000), rec(2, size=2000)])[2]  # type: ignore[misc]
        store.roll()
        await store.flush()
        fileio.fail_write(1, errno.ENOSPC)  # the last-page note finds no space
        deleted = store.delete_page(1)
        await deleted  # type: ignore[misc]
        assert not (store.folder / "000000001.page").exists()
        assert (store.folder / "last-page").read_text() == "1\n"
        await store.close()

    with caplog.at_level(logging.WARNING, logger="pagemq.paging"):
        run(body)
    assert any("its file is emptied first" in r.getMessage() for r in caplog.records)
    assert heard == []  # a delete is not a producer's write
    store = reopen(tmp_path)
    assert store.pages() == [] and store.live_page_no() == 2  # the number is never reused

"""The two paged-queue stores behind one harness, for the contract suite.

Each harness opens its store, restarts it (`reopen`: the file store closes its page files and
journal and opens them again from disk; the memory store takes its pages as the next run
finds them and the cursor records its log kept), writes a caller's journal transaction
(`commit`), and damages a record (`damage`: bytes flipped in the page file, or the memory
pages' own `lose`). What the store writes to its journal and tells its listener is recorded.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Collection, Sequence
from pathlib import Path

from pagemq.storage.api import CursorAck, CursorComplete, PageTxCommit
from pagemq.storage.message_store import JournalMessageStore
from pagemq.storage.paging.file_queue_store import FilePagedQueueStore
from pagemq.storage.paging.memory_queue_store import MemoryCursorLog, MemoryPagedQueueStore, MemoryPages
from pagemq.storage.paging.page_format import FILE_HEADER, FRAME_HEADER, page_file_name, read_frames
from pagemq.storage.paging.page_io import QueuedPageIO
from pagemq.storage.paging.page_store import PageStore, RecordsLost
from pagemq.storage.paging.paged_queues import PagedQueues
from pagemq.storage.paging.queue_store import CursorJournal, CursorRecords, PagedRecovery

ADDRESS = "orders"
PAGE_SIZE = 4096  # a few 1000-byte records a page, in either store

CursorRecord = CursorAck | CursorComplete | PageTxCommit


class Tags:
    """A selector summary for the suite: the set of tags (the summary input) on a page."""

    def __init__(self) -> None:
        self.tags: set[str] = set()

    def fold(self, item: object) -> None:
        self.tags.add(str(item))

    def to_bytes(self) -> bytes:
        return ",".join(sorted(self.tags)).encode()

    @staticmethod
    def decode(blob: bytes) -> frozenset[str]:
        return frozenset(blob.decode().split(","))


class Recorder:
    """The store's journal, noting the records it writes and deletes."""

    def __init__(self, inner: CursorJournal) -> None:
        self.inner = inner
        self.acks: list[CursorAck] = []
        self.completes: list[CursorComplete] = []
        self.deleted: list[int] = []

    def cursor_ack(self, record: CursorAck) -> None:
        self.acks.append(record)
        self.inner.cursor_ack(record)

    def cursor_complete(self, record: CursorComplete) -> None:
        self.completes.append(record)
        self.inner.cursor_complete(record)

    def delete_record(self, record_id: int) -> None:
        self.deleted.append(record_id)
        self.inner.delete_record(record_id)

    def flush(self) -> asyncio.Future[None]:
        return self.inner.flush()


class SteppedPageIO(QueuedPageIO):
    """The page-I/O seam run by the test, on the loop, hand-backs included."""

    async def step(self) -> int:
        done = self.run()
        await asyncio.sleep(0)
        return done


class Listener:
    """What the store told its owner."""

    def __init__(self) -> None:
        self.woken: list[int] = []
        self.withdrawn_ids: list[int] = []
        self.lost: list[tuple[RecordsLost, dict[int, int]]] = []

    def wake(self, queue_id: int) -> None:
        self.woken.append(queue_id)

    def withdrawn(self, queue_ids: list[int]) -> None:
        self.withdrawn_ids += queue_ids

    def records_lost(self, lost: RecordsLost, gone: dict[int, int]) -> None:
        self.lost.append((lost, gone))


class Harness:
    """One store under test; subclasses say how it is kept and restarted."""

    store: PagedQueues
    journal: Recorder

    def __init__(self) -> None:
        self.ids = itertools.count(1_000_000)
        self.listener = Listener()

    def _attach(self, store: PagedQueues) -> None:
        self.store = store
        store.listener = self.listener

    def records(self, inner: CursorJournal) -> CursorRecords:
        self.journal = Recorder(inner)
        return CursorRecords(self.journal, lambda: next(self.ids))

    async def settle(self) -> None:
        """Let writes, journal syncs and the deletions behind them finish."""
        for _ in range(4):
            await asyncio.sleep(0.005)
            await self.store.medium.flush()
            await self.journal.flush()

    def page_numbers(self) -> list[int]:
        return [info.page_no for info in self.store.medium.pages()]

    async def start(self) -> None:
        """Open the store (on the running loop)."""

    async def reopen(self, queue_ids: Collection[int]) -> PagedRecovery:
        """Restart: the store is closed and opened again; its queues are recovered."""
        raise NotImplementedError

    def commit(self, records: Sequence[CursorRecord]) -> None:
        raise NotImplementedError

    def damage(self, page_no: int, ordinal: int) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        await self.store.close()


class FileHarness(Harness):
    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self._journal: JournalMessageStore | None = None

    async def start(self) -> None:
        await self._open()

    async def _open(self) -> tuple[list[CursorAck], list[CursorComplete], list[PageTxCommit]]:
        loop = asyncio.get_running_loop()
        journal = self._journal = JournalMessageStore(self.directory / "journal", file_size=1 << 20)
        recovered = journal.load()
        journal.start(loop)
        pages = PageStore(self.directory / "paging", ADDRESS, page_size_bytes=PAGE_SIZE, sync_timeout=0.001)
        pages.set_summary_builder(Tags)
        pages.open()
        pages.start(loop)
        self._attach(FilePagedQueueStore(pages, self.records(journal), summaries=Tags.decode))
        return recovered.cursor_acks, recovered.cursor_completes, recovered.page_tx_commits

    async def reopen(self, queue_ids: Collection[int]) -> PagedRecovery:
        await self.close()
        records = await self._open()
        recovery = self.store.recover(queue_ids, *records)
        for record_id in recovery.stale:
            self.journal.delete_record(record_id)
        return recovery

    def commit(self, records: Sequence[CursorRecord]) -> None:
        assert self._journal is not None
        self._journal.transaction(list(records), sync=True)

    def damage(self, page_no: int, ordinal: int) -> None:
        """Flip a byte in the frame holding `ordinal` (each record of the suite is a frame)."""
        assert isinstance(self.store, FilePagedQueueStore)
        path = self.store.page_store.folder / page_file_name(page_no)
        data = bytearray(path.read_bytes())
        for offset, size, first, entries in read_frames(bytes(data), FILE_HEADER.size, len(data)):
            if first <= ordinal < first + len(entries):
                data[offset + FRAME_HEADER.size + size // 2] ^= 0x20
                path.write_bytes(bytes(data))
                return
        raise AssertionError(f"no record {ordinal} in page {page_no}")

    async def close(self) -> None:
        await super().close()
        if self._journal is not None:
            await self._journal.close()


class MemoryHarness(Harness):
    def __init__(self) -> None:
        super().__init__()
        self.log = MemoryCursorLog()
        self.pages = MemoryPages(ADDRESS, page_size_bytes=PAGE_SIZE)
        self.pages.set_summary_builder(Tags)
        self._attach(MemoryPagedQueueStore(self.pages, self.records(self.log), summaries=Tags.decode))

    async def reopen(self, queue_ids: Collection[int]) -> PagedRecovery:
        self.store.write_acks()
        self.pages = self.pages.reopen()
        self._attach(MemoryPagedQueueStore(self.pages, self.records(self.log), summaries=Tags.decode))
        recovery = self.store.recover(queue_ids, *self.log.recovered())
        for record_id in recovery.stale:
            self.journal.delete_record(record_id)
        return recovery

    def commit(self, records: Sequence[CursorRecord]) -> None:
        self.log.transaction(records)

    def damage(self, page_no: int, ordinal: int) -> None:
        self.pages.lose(page_no, [ordinal])

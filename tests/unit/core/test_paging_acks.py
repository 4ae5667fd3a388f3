"""The core's paging over the real page store and journal: acknowledgements gathered per loop
turn into one cursor-acks record (written before anything that promises them, read back after
a restart), and a failed page write undone."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode, Consumer, MessageRef
from pagemq.core.selector.summary import PageSummary
from pagemq.core.settings import AddressSettings, AddressSettingsRepository
from pagemq.core.transactions import Transaction
from pagemq.storage.api import CursorAck, StoreOp
from pagemq.storage.fileio import REAL_FILE_IO, FaultyFileIO, FileIO
from pagemq.storage.message_store import JournalMessageStore
from pagemq.storage.paging.page_io import PageIO
from pagemq.storage.paging.page_store import PageStore


class RecordingStore(JournalMessageStore):
    """The real journal store, noting each cursor-acks record it is asked to write."""

    def __init__(self, directory: Path, fileio: FileIO = REAL_FILE_IO) -> None:
        super().__init__(directory, file_size=1 << 20, fileio=fileio)
        self.cursor_records: list[CursorAck] = []

    def cursor_ack(self, record: CursorAck) -> None:
        self.cursor_records.append(record)
        super().cursor_ack(record)

    def transaction(self, ops: list[StoreOp], *, sync: bool) -> asyncio.Future[None] | None:
        self.cursor_records.extend(op for op in ops if isinstance(op, CursorAck))
        return super().transaction(ops, sync=sync)


class Collector:
    def __init__(self) -> None:
        self.delivered: list[tuple[int, MessageRef]] = []

    def deliver(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        self.delivered.append((tag, ref))


async def paging_broker(
    directory: Path, fileio: FileIO | dict[str, FileIO] = REAL_FILE_IO,
    address_settings: dict[str, object] | None = None, *, journal_fileio: FileIO = REAL_FILE_IO,
    page_io: PageIO | None = None,
) -> tuple[Broker, RecordingStore, list[PageStore]]:
    """Every message of every address pages (max-size-bytes 0), unless told otherwise.
    `fileio` may differ per address (a dict: address -> its page store's file layer);
    `page_io`: where queues' in-order page reads run (None: on the loop)."""
    store = RecordingStore(directory / "journal", journal_fileio)
    settings = AddressSettingsRepository()
    settings.add("#", address_settings if address_settings is not None else {"max-size-bytes": 0})
    loop = asyncio.get_running_loop()
    opened: list[PageStore] = []

    def page_store(address: str, address_settings: AddressSettings) -> PageStore:
        pages = PageStore(directory / "paging", address, page_size_bytes=address_settings.page_size_bytes,
                          fileio=fileio[address] if isinstance(fileio, dict) else fileio,
                          page_io=page_io)
        pages.set_summary_builder(PageSummary)
        pages.open()
        pages.start(loop)
        opened.append(pages)
        return pages

    broker = Broker(settings, store=store, page_stores=page_store)
    broker.paging_directory = directory / "paging"
    broker.recover()
    store.start(loop)
    return broker, store, opened


async def close(broker: Broker, store: RecordingStore, pages: list[PageStore]) -> None:
    broker.write_acks()
    for page_store in pages:
        await page_store.close()
    await store.close()


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


class Subscribed:
    """A paging broker holding `count` paged messages, one client-individual consumer on them."""

    def __init__(self, broker: Broker, store: RecordingStore, pages: list[PageStore]) -> None:
        self.broker, self.store, self.pages = broker, store, pages
        self.queue = broker.queues["orders"]
        self.sink = Collector()
        self.consumer = broker.subscribe(self.queue, self.sink, ack_mode=AckMode.INDIVIDUAL)

    @classmethod
    async def start(cls, directory: Path, count: int) -> Subscribed:
        broker, store, pages = await paging_broker(directory)
        await fill(broker, count)
        return cls(broker, store, pages)

    def ack(self, index: int) -> None:
        tag, _ref = self.sink.delivered[index]
        self.broker.acknowledge(self.queue, [self.consumer.take(tag)])

    async def close(self) -> None:
        await close(self.broker, self.store, self.pages)


async def fill(broker: Broker, count: int) -> None:
    for i in range(count):
        future = broker.send("orders", "anycast", {"n": str(i)}, b"x" * 100, persistent=True)
        if future is not None and i == count - 1:
            await future


def test_acks_in_one_loop_turn_are_one_record_per_page(tmp_path: Path) -> None:
    async def body() -> None:
        setup = await Subscribed.start(tmp_path, 50)
        assert len(setup.sink.delivered) == 50
        for index in range(30):
            setup.ack(index)
        assert setup.store.cursor_records == []  # gathered, not yet written
        await asyncio.sleep(0)
        assert len(setup.store.cursor_records) == 1
        assert setup.store.cursor_records[0].ordinals == tuple(range(30))
        await setup.close()

    run(body)


def test_flush_writes_gathered_acks_before_resolving(tmp_path: Path) -> None:
    async def body() -> None:
        setup = await Subscribed.start(tmp_path, 10)
        setup.ack(3)
        durable = setup.broker.flush()
        assert [r.ordinals for r in setup.store.cursor_records] == [(3,)]
        await durable
        await setup.close()

    run(body)


def test_committed_paged_acks_are_written_in_the_commits_journal_transaction(tmp_path: Path) -> None:
    async def body() -> None:
        setup = await Subscribed.start(tmp_path, 5)
        tx = Transaction("tx1")
        tx.acks.extend((setup.queue, setup.consumer.take(tag)) for tag, _ref in setup.sink.delivered[:2])
        committed = setup.broker.commit(tx)
        assert [r.ordinals for r in setup.store.cursor_records] == [(0, 1)]
        assert committed is not None
        await committed
        await setup.close()

    run(body)


def test_gathered_acks_survive_a_restart(tmp_path: Path) -> None:
    async def first() -> None:
        setup = await Subscribed.start(tmp_path, 20)
        for index in range(0, 20, 2):
            setup.ack(index)
        await setup.broker.flush()
        await setup.close()

    async def second() -> None:
        broker, store, pages = await paging_broker(tmp_path)
        again = Subscribed(broker, store, pages)
        assert [ref.message.headers["n"] for _tag, ref in again.sink.delivered] == [
            str(n) for n in range(1, 20, 2)
        ]
        await again.close()

    run(first)
    run(second)


def test_a_completed_page_leaves_no_cursor_records(tmp_path: Path) -> None:
    async def body() -> None:
        setup = await Subscribed.start(tmp_path, 10)
        for index in range(10):
            setup.ack(index)
        await setup.broker.flush()
        # The page file's deletion (a directory fsync: slow on a busy disk), then its records'.
        for _ in range(250):
            await asyncio.sleep(0.02)
            await setup.broker.flush()
            if setup.store.journal.stats()["live_records"] <= 2:
                break
        assert setup.store.journal.stats()["live_records"] <= 2  # the address and the queue
        await setup.close()

    run(body)


def test_a_failed_page_write_is_undone_and_the_next_send_pages_normally(tmp_path: Path) -> None:
    async def body() -> None:
        fileio = FaultyFileIO()
        broker, store, pages = await paging_broker(tmp_path, fileio)
        await fill(broker, 3)
        queue = broker.queues["orders"]
        assert broker.queue_info("orders")["messages_paged"] == 3
        fileio.fail_write(1, errno.ENOSPC)
        failed = [broker.send("orders", "anycast", {"n": f"lost{i}"}, b"y", persistent=True)
                  for i in range(2)]
        assert failed[0] is not None and failed[0] is failed[1]  # one write batch
        with pytest.raises(OSError):
            await failed[0]
        await asyncio.sleep(0)
        assert broker.queue_info("orders")["messages_paged"] == 3
        assert queue.counters.added == 3
        await fill(broker, 1)
        sink = Collector()
        broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
        assert [ref.message.headers["n"] for _tag, ref in sink.delivered] == ["0", "1", "2", "0"]
        await close(broker, store, pages)

    run(body)


def test_a_page_drained_while_the_journal_has_no_space_is_deleted_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acks that finish a page, and the journal sync its deletion waits for, meet a
    journal out of space: the page is kept while the journal holds them, and deleted once
    the journal has written them (not only at the next start)."""
    monkeypatch.setattr("pagemq.storage.group_commit.RETRY_PERIOD", 0.05)
    monkeypatch.setattr("pagemq.storage.paging.paged_queues.NO_SPACE_RETRY", 0.05)
    journal_io = FaultyFileIO()

    async def body() -> None:
        broker, store, pages = await paging_broker(tmp_path, journal_fileio=journal_io,
                                                   address_settings={"max-size-bytes": 0,
                                                                     "page-size-bytes": 2048})
        await fill(broker, 30)
        queue = broker.queues["orders"]
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
        first = pages[0].folder / "000000001.page"
        count = pages[0].pages()[0].count
        acked: set[int] = set()
        last = None
        for _ in range(100):  # acknowledge the first page but for its last message
            await asyncio.sleep(0.02)
            for tag, ref in list(sink.delivered):
                if ref.page_pos == (1, count - 1):
                    last = tag
                elif tag not in acked and ref.page_pos is not None and ref.page_pos[0] == 1:
                    acked.add(tag)
                    broker.acknowledge(queue, [consumer.take(tag)])
            if last is not None and len(acked) == count - 1:
                break
        assert last is not None and first.exists()
        heard: list[OSError | None] = []
        store.journal.on_space = heard.append
        # The writer busy with an fsync, so the acks and the deletion's sync share the next
        # batch, whose write (and two retries) then find no space.
        broker.settings.add("other", {"max-size-bytes": -1})  # held in memory: journaled
        await broker.send("other", "anycast", {}, b"x", persistent=True)  # type: ignore[misc]
        journal_io.hold_fsync()
        busy = broker.send("other", "anycast", {}, b"x", persistent=True)
        assert await asyncio.to_thread(journal_io.fsync_waiting.wait, 5)
        broker.acknowledge(queue, [consumer.take(last)])  # the first page is done with
        broker.write_acks()
        for n in range(1, 4):
            journal_io.fail_write(n, errno.ENOSPC)
        journal_io.release_fsync()
        await busy  # type: ignore[misc]
        for _ in range(100):  # the first page's messages are all acknowledged now
            await asyncio.sleep(0.05)
            if not first.exists():
                break
        assert not first.exists()
        assert [e is None for e in heard] == [False, True]  # it did stall, and recovered
        await close(broker, store, pages)

    run(body)

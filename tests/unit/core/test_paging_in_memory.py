"""The core's page mode over the in-memory paged-queue store: delivery decisions (read limits,
selective look-ahead, browsing, transactions, deleting a queue) tested in-process, with no
page file or journal (`Broker(queue_stores=...)`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from test_paging_acks import Collector

from pagemq.core.broker import Broker
from pagemq.core.browse import QueueBrowse
from pagemq.core.consumer import AckMode
from pagemq.core.memory import MemoryAccountant
from pagemq.core.selector.summary import PageSummary
from pagemq.core.settings import AddressSettings, AddressSettingsRepository
from pagemq.core.transactions import PendingSend, Transaction
from pagemq.storage.api import MemoryStore
from pagemq.storage.paging.memory_queue_store import MemoryPagedQueueStore, MemoryPages
from pagemq.storage.paging.queue_store import CursorRecords, PagedQueueStore


def memory_broker(
    address_settings: dict[str, object] | None = None, memory: MemoryAccountant | None = None,
    store: MemoryStore | None = None,
) -> tuple[Broker, dict[str, MemoryPages]]:
    """Every message pages (max-size-bytes 0) unless told otherwise; pages stay in memory."""
    settings = AddressSettingsRepository()
    settings.add("#", {"max-size-bytes": 0, "page-size-bytes": 4096, **(address_settings or {})})
    opened: dict[str, MemoryPages] = {}

    def queue_store(name: str, settings: AddressSettings, records: CursorRecords) -> PagedQueueStore:
        pages = opened[name] = MemoryPages(name, page_size_bytes=settings.page_size_bytes)
        pages.set_summary_builder(PageSummary)
        return MemoryPagedQueueStore(pages, records, summaries=PageSummary.from_bytes)

    store = store if store is not None else MemoryStore()
    store.start(asyncio.get_running_loop())
    return Broker(settings, store=store, queue_stores=queue_store, memory=memory), opened


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


def send(broker: Broker, count: int, *, color: str = "blue", start: int = 0) -> None:
    for n in range(start, start + count):
        broker.send("q", "anycast", {"n": str(n), "color": color}, b"x" * 200, persistent=True)


def numbers(sink: Collector) -> list[int]:
    return [int(ref.message.headers["n"]) for _tag, ref in sink.delivered]


def test_a_drained_backlog_leaves_no_page_and_the_address_leaves_page_mode() -> None:
    async def body() -> None:
        broker, pages = memory_broker()
        send(broker, 50)
        queue = broker.queues["q"]
        assert broker.queue_info("q")["messages_paged"] == 50 and pages["q"].page_count() > 3
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
        while consumer.in_flight:
            broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
        await asyncio.sleep(0.01)  # page deletions wait for the journal's flush
        assert numbers(sink) == list(range(50))
        assert broker.address_info("q")["paging"] is False
        assert pages["q"].page_count() == 0 and broker.memory.used_messages == 0

    run(body)


def test_read_limits_hold_what_is_read_into_memory() -> None:
    async def body() -> None:
        broker, _pages = memory_broker({"max-read-page-messages": 5})
        send(broker, 30)
        queue = broker.queues["q"]
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        assert len(sink.delivered) == 5 and queue.cursor.unread == 25  # type: ignore[attr-defined]
        broker.acknowledge(queue, [consumer.take(sink.delivered[0][0])])
        assert len(sink.delivered) == 6

    run(body)


def test_a_selective_consumer_finds_its_match_deep_in_the_backlog_and_browsing_sees_all() -> None:
    async def body() -> None:
        broker, _pages = memory_broker()
        send(broker, 40)
        send(broker, 1, color="red", start=40)
        queue = broker.queues["q"]
        red = Collector()
        broker.subscribe(queue, red, ack_mode=AckMode.INDIVIDUAL, selector="color = 'red'")
        assert numbers(red) == [40]
        browsed = [int(ref.message.headers["n"]) for ref in QueueBrowse(queue, None)]
        assert browsed == list(range(41))  # the claimed one at its place in the pages

    run(body)


def test_a_commit_that_pages_to_two_addresses_is_read_only_once_it_took_effect() -> None:
    async def body() -> None:
        broker, _pages = memory_broker()
        tx = Transaction("tx")
        for address in ("q", "r"):
            broker.stage(tx, PendingSend(address, "anycast", {"n": "1"}, b"x", persistent=True,
                                         priority=4, expiration=0))
        committed = broker.commit(tx)
        if committed is not None:
            await committed
        for address in ("q", "r"):
            sink = Collector()
            broker.subscribe(broker.queues[address], sink)
            assert numbers(sink) == [1]

    run(body)


def test_a_deleted_queue_no_longer_holds_its_pages() -> None:
    async def body() -> None:
        broker, pages = memory_broker()
        address = broker.ensure_address("t", "multicast")
        kept = broker.ensure_queue(address, "kept", "multicast")
        gone = broker.ensure_queue(address, "gone", "multicast")
        for n in range(30):
            broker.send("t", "multicast", {"n": str(n)}, b"x" * 200, persistent=True)
        broker.delete_queue(gone)
        sink = Collector()
        consumer = broker.subscribe(kept, sink, ack_mode=AckMode.INDIVIDUAL)
        while consumer.in_flight:
            broker.acknowledge(kept, [consumer.take(tag) for tag in list(consumer.in_flight)])
        await asyncio.sleep(0.01)
        assert len(sink.delivered) == 30 and pages["t"].page_count() == 0

    run(body)


def test_a_commit_waiting_for_its_page_batches_marks_its_ids_undecided_on_each_address() -> None:
    """A stream plans its ranges below `Address.undecided_from`: the commit's ids are taken
    but its messages are in no queue until its batches are written, and a range planned past
    them would leave them behind the reader's offset for good."""
    async def body() -> None:
        broker, _pages = memory_broker({"max-size-bytes": -1})
        broker.send("r", "anycast", {"n": "0"}, b"x", persistent=True)  # r holds in memory
        broker.addresses["q"] = broker.ensure_address("q", "anycast")
        broker.addresses["q"].paging = True  # q pages
        tx = Transaction("tx")
        for address in ("q", "r"):
            broker.stage(tx, PendingSend(address, "anycast", {"n": "1"}, b"x", persistent=True,
                                         priority=4, expiration=0))
        committed = broker.commit(tx)
        assert committed is not None and not committed.done()
        first = {name: broker.addresses[name].undecided_from() for name in ("q", "r")}
        assert first["q"] is not None and first["r"] is not None
        broker.send("r", "anycast", {"n": "2"}, b"x", persistent=True)  # a later id, visible now
        assert max(ref.message.message_id for ref in broker.queues["r"]) > first["r"]
        await committed
        assert broker.addresses["q"].undecided_from() is None
        assert broker.addresses["r"].undecided_from() is None

    run(body)

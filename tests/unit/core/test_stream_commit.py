"""A streaming reader's commit over a paged backlog (core/stream.py `commit_step`), in
process over the in-memory paged-queue store: pages it was served whole are completed with
one "page complete" record each, no per-record ack; what it was not served stays."""

from __future__ import annotations

from test_paging_acks import Collector
from test_paging_in_memory import memory_broker, run, send

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode
from pagemq.core.queue import Queue
from pagemq.core.stream import commit_step, paged_range, reader_of
from pagemq.storage.api import CursorAck, CursorComplete, MemoryStore
from pagemq.storage.paging.memory_queue_store import MemoryPages


class CountingStore(MemoryStore):
    """Counts the cursor records the paged queues write."""

    def __init__(self) -> None:
        super().__init__()
        self.acked_ordinals = 0
        self.completes: list[int] = []

    def cursor_ack(self, record: CursorAck) -> None:
        self.acked_ordinals += len(record.ordinals)

    def cursor_complete(self, record: CursorComplete) -> None:
        self.completes.append(record.page_no)


def serve(queue, reader, after: int, upto: int, skip: frozenset[int] = frozenset()) -> list[int]:
    """A range read as the HTTP endpoint does it: the paged records served, noted by id and page."""
    from array import array

    reader.note_read(after, upto)
    plan = paged_range(queue.cursor)
    served = []
    for page_no, ordinal, record in plan.records(after, upto):
        if int(record.message_id) in skip:
            continue
        reader.note_served(array("q", [record.message_id]))
        reader.note_served_page(page_no, [ordinal], record.message_id)
        served.append(record.message_id)
    return served


def commit(broker, queue, reader, offset: int) -> int:
    acknowledged = 0
    while True:
        progress = commit_step(queue, broker.ledger, reader, offset, None)
        acknowledged += progress.acknowledged
        if progress.done:
            return acknowledged


def backlog(count: int) -> tuple[CountingStore, Broker, MemoryPages, Queue]:
    """A broker whose queue `q` holds `count` messages, every one paged and none read in."""
    store = CountingStore()
    broker, pages = memory_broker({"max-read-page-messages": 0}, store=store)
    send(broker, count)
    return store, broker, pages["q"], broker.queues["q"]


def test_pages_served_whole_complete_with_one_record_each_and_no_acks() -> None:
    async def body() -> None:
        store, broker, pages, queue = backlog(60)
        reader = reader_of(queue, "spark")
        served = serve(queue, reader, 0, 2**62)
        closed = [info.page_no for info in pages.pages()][:-1]
        live = pages.page_info(pages.live_page_no())
        assert len(served) == 60 and len(closed) >= 3 and live is not None
        assert commit(broker, queue, reader, served[-1]) == 60
        assert store.completes == closed  # one record per closed page
        assert store.acked_ordinals == live.count  # the live page may still grow: acked one by one
        assert broker.queue_info("q")["messages"] == 0

    run(body)


def test_a_record_not_served_stays_and_its_page_is_acknowledged_record_by_record() -> None:
    async def body() -> None:
        _store, broker, _pages, queue = backlog(60)
        reader = reader_of(queue, "spark")
        everything = serve(queue, reader_of(queue, "probe"), 0, 2**62)
        missing = everything[5]
        served = serve(queue, reader, 0, 2**62, skip=frozenset({missing}))
        assert commit(broker, queue, reader, served[-1]) == 59
        assert broker.queue_info("q")["messages"] == 1
        sink = Collector()
        broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
        assert [ref.message.message_id for _tag, ref in sink.delivered] == [missing]

    run(body)


def test_a_commit_freeing_memory_does_not_let_a_waiting_reading_take_served_records() -> None:
    """Found by review: settling the served messages in memory freed the budget, which woke
    the queue's own reading (a STOMP consumer's, stopped by the full budget) in the middle of
    the commit; it read served paged records into memory, where the commit's walk of the
    page files no longer saw them: they stayed, to be delivered a second time."""
    async def body() -> None:
        from array import array

        from pagemq.core.memory import MemoryAccountant

        memory = MemoryAccountant(max_bytes=4 * 33 * 1024)  # four messages, about
        settings = {"max-size-bytes": -1, "max-size-messages": 3, "max-read-page-bytes": -1}
        broker, _pages = memory_broker(settings, memory=memory)
        for n in range(10):  # three held in memory, seven paged
            broker.send("q", "anycast", {"n": str(n)}, b"x" * 32 * 1024, persistent=True)
        queue = broker.queues["q"]
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=1)
        assert len(sink.delivered) == 1  # it holds the first
        assert memory.reading_full()  # with the page read-ahead: the queue's reading waits
        reader = reader_of(queue, "spark")
        in_memory = [ref.message.message_id for ref in queue]
        reader.note_read(0, 2**62)
        reader.note_served(array("q", in_memory))
        served = serve(queue, reader, 0, 2**62)
        assert len(in_memory) + len(served) == 9
        assert commit(broker, queue, reader, max(in_memory + served)) == 9
        assert broker.queue_info("q")["messages"] == 1
        broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
        assert len(sink.delivered) == 1

    run(body)

"""Reading back from page files within the one memory budget (`global-max-size`): the queues
reading back share it fairly, each always gets at least one message, a queue stopped by a
full budget reads again once memory is freed, and the queues of a multicast address share
one message object per record read back."""

from __future__ import annotations

import asyncio

from test_paging_acks import Collector
from test_paging_in_memory import memory_broker, run

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode, Consumer
from pagemq.core.memory import PAGE_READ_PART, MemoryAccountant
from pagemq.core.queue import Queue

BODY = b"x" * 200


Subscribed = list[tuple[Queue, Collector, Consumer]]


def topic_with_subscribers(broker: Broker, count: int, messages: int) -> Subscribed:
    address = broker.ensure_address("t", "multicast")
    queues = [broker.ensure_queue(address, f"s{n}", "multicast") for n in range(count)]
    for n in range(messages):
        broker.send("t", "multicast", {"n": str(n)}, BODY, persistent=True)
    subscribed = []
    for queue in queues:
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        subscribed.append((queue, sink, consumer))
    return subscribed


def test_readers_share_the_budget_and_each_gets_at_least_one_message() -> None:
    async def body() -> None:
        budget = 16 * 1024
        memory = MemoryAccountant(max_bytes=budget)
        broker, _pages = memory_broker(memory=memory)
        subscribed = topic_with_subscribers(broker, 20, 300)
        one = max(ref.message.memory_size for _q, sink, _c in subscribed for _t, ref in sink.delivered)
        assert all(sink.delivered for _q, sink, _c in subscribed), "a subscriber got nothing"
        assert memory.depaged_bytes <= budget + 20 * one
        assert memory.readers == 20

    run(body)


def test_every_subscriber_gets_every_message_as_acks_free_the_budget() -> None:
    async def body() -> None:
        memory = MemoryAccountant(max_bytes=8 * 1024)
        broker, pages = memory_broker(memory=memory)
        subscribed = topic_with_subscribers(broker, 12, 200)
        peak = 0
        for _round in range(10_000):
            moved = False
            for queue, _sink, consumer in subscribed:
                if consumer.in_flight:
                    broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
                    moved = True
                peak = max(peak, memory.depaged_bytes)
            if not moved:
                break
        for _queue, sink, _consumer in subscribed:
            assert [int(ref.message.headers["n"]) for _t, ref in sink.delivered] == list(range(200))
        one = next(iter(subscribed))[1].delivered[0][1].message.memory_size
        assert peak <= 8 * 1024 + 12 * one
        await asyncio.sleep(0.01)
        assert memory.readers == 0 and memory.depaged_bytes == 0 and memory.used_bytes == 0
        assert pages["t"].page_count() == 0

    run(body)


def test_a_reader_stopped_by_a_full_budget_reads_again_when_memory_is_freed() -> None:
    async def body() -> None:
        memory = MemoryAccountant(max_bytes=4 * 1024)
        broker, _pages = memory_broker(memory=memory)
        first, second = topic_with_subscribers(broker, 2, 100)
        (first_queue, first_sink, first_consumer), (_queue, second_sink, _consumer) = first, second
        # The first queue filled the budget; the second holds its one message and waits.
        assert len(second_sink.delivered) == 1
        before = len(second_sink.delivered)
        broker.acknowledge(first_queue, [first_consumer.take(tag) for tag in list(first_consumer.in_flight)])
        assert len(second_sink.delivered) > before, "the waiting reader was not woken"
        assert len(first_sink.delivered) > 1

    run(body)


def test_global_max_messages_pages_sends_but_does_not_stop_reading_back() -> None:
    """The count decides when sends page (of messages not read back); reading back follows
    max-read-page-* and global-max-size. Stopped by the count, a client-ack
    subscriber waiting for all 100 before acknowledging waited for ever."""
    async def body() -> None:
        memory = MemoryAccountant(max_messages=10)
        broker, _pages = memory_broker({"max-read-page-bytes": -1}, memory=memory)
        subscribed = topic_with_subscribers(broker, 2, 100)
        assert [len(sink.delivered) for _queue, sink, _consumer in subscribed] == [100, 100]
        # held, but read back: a send elsewhere is not held up by them (see core/memory.py)
        assert memory.used_messages == memory.depaged_messages == 200 and not memory.messages_full()
        queue, _sink, consumer = subscribed[0]
        broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
        assert memory.used_messages == memory.depaged_messages == 100

    run(body)


def test_multicast_queues_share_one_message_object_per_record_read_back() -> None:
    async def body() -> None:
        broker, _pages = memory_broker()
        subscribed = topic_with_subscribers(broker, 3, 10)
        firsts = [sink.delivered[0][1].message for _q, sink, _c in subscribed]
        assert firsts[0] is firsts[1] is firsts[2]

    run(body)


def test_without_a_global_limit_reading_back_follows_the_read_limits_only() -> None:
    async def body() -> None:
        memory = MemoryAccountant()
        broker, _pages = memory_broker({"max-read-page-messages": 7}, memory=memory)
        subscribed = topic_with_subscribers(broker, 3, 50)
        assert [len(sink.delivered) for _q, sink, _c in subscribed] == [7, 7, 7]
        assert memory.read_share() == -1

    run(body)


def test_a_selective_consumer_holding_nothing_gets_a_match_when_the_budget_is_full_of_others() -> None:
    """The budget is full of messages the queue read back for a consumer now gone (none of
    them red); a selective consumer for red that holds nothing still gets the red ones, one
    at a time, instead of waiting for an acknowledgement nobody will send (soak seed 100453)."""

    async def body() -> None:
        memory = MemoryAccountant(max_bytes=4 * 1024)
        broker, _pages = memory_broker(memory=memory)
        for n in range(40):
            color = "red" if n >= 30 else "blue"
            broker.send("q", "anycast", {"n": str(n), "color": color}, BODY, persistent=True)
        queue = broker.queues["q"]
        first = broker.subscribe(queue, Collector(), ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        broker.close_consumer(queue, first)  # its messages go back to the queue, in memory
        assert memory.reading_full()
        sink = Collector()
        red = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=1000,
                               selector="color = 'red'")
        got: list[int] = []
        for _round in range(50):
            if not red.in_flight:
                break
            got += [int(ref.message.headers["n"]) for ref in red.in_flight.values()]
            broker.acknowledge(queue, [red.take(tag) for tag in list(red.in_flight)])
        assert got == list(range(30, 40))

    run(body)


def test_a_consumer_holding_nothing_is_not_starved_by_one_holding_the_budget() -> None:
    async def body() -> None:
        memory = MemoryAccountant(max_bytes=4 * 1024)
        broker, _pages = memory_broker(memory=memory)
        for n in range(40):
            broker.send("q", "anycast", {"n": str(n)}, BODY, persistent=True)
        queue = broker.queues["q"]
        slow = broker.subscribe(queue, Collector(), ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        assert slow.in_flight and memory.reading_full()
        sink = Collector()
        broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        assert len(sink.delivered) == 1  # its one message, although the budget is spent

    run(body)


def _read_ahead(memory: MemoryAccountant) -> int:
    return memory.parts[PAGE_READ_PART]


def test_a_subscriber_with_records_left_stays_a_reader_between_its_windows() -> None:
    """A subscriber that acknowledged all it held still has a page reader holding chunks: it
    stays a reader (its chunks charged) until nothing is left on disk for it. Counted only
    while holding messages, 200 acknowledging subscribers came and went as readers hundreds
    of times a second, and the chunks they kept were charged to nobody."""

    async def body() -> None:
        memory = MemoryAccountant(max_bytes=64 * 1024)
        broker, _pages = memory_broker(memory=memory)
        address = broker.ensure_address("t", "multicast")
        queues = [broker.ensure_queue(address, f"s{n}", "multicast") for n in range(3)]
        for n in range(300):
            broker.send("t", "multicast", {"n": str(n)}, BODY, persistent=True)
        consumers = [broker.subscribe(queue, Collector(), ack_mode=AckMode.INDIVIDUAL, prefetch=5)
                     for queue in queues]
        assert memory.readers == 3
        charged = _read_ahead(memory)
        assert charged > 0
        queue, consumer = queues[0], consumers[0]
        broker.close_consumer(queue, consumer)  # its messages go back to the queue, in memory
        assert memory.readers == 3, "a queue holding messages read back is a reader"
        for queue, consumer in zip(queues[1:], consumers[1:], strict=True):
            readers = memory.readers
            while consumer.in_flight:
                broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
                assert queue.cursor is not None
                if queue.cursor.unread:  # acknowledged all it held, records left on disk
                    assert memory.readers == readers
            assert memory.readers == readers - 1, "a queue with nothing left is no reader"
        broker.delete_queue(queues[0])
        assert memory.readers == 0
        assert _read_ahead(memory) == 0
        assert memory.used_bytes == 0

    run(body)


def test_the_read_ahead_charge_follows_the_share_as_readers_come_and_go() -> None:
    async def body() -> None:
        memory = MemoryAccountant(max_bytes=4 * 1024 * 1024)
        broker, _pages = memory_broker(memory=memory)
        address = broker.ensure_address("t", "multicast")
        queues = [broker.ensure_queue(address, f"s{n}", "multicast") for n in range(8)]
        for n in range(200):
            broker.send("t", "multicast", {"n": str(n)}, BODY, persistent=True)
        first = broker.subscribe(queues[0], Collector(), ack_mode=AckMode.INDIVIDUAL, prefetch=10)
        alone = _read_ahead(memory)
        others = [broker.subscribe(queue, Collector(), ack_mode=AckMode.INDIVIDUAL, prefetch=10)
                  for queue in queues[1:]]
        for queue, consumer in zip(queues, [first, *others], strict=True):
            broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
        assert memory.readers == 8
        # Each reader's chunks: a quarter of its share (4 MiB / 8), not what one reader had alone.
        assert _read_ahead(memory) <= 4 * 1024 * 1024 // 4 + 8 * 3 * 16 * 1024
        assert _read_ahead(memory) < 8 * alone
        for queue in queues:
            broker.delete_queue(queue)
        assert memory.readers == 0 and _read_ahead(memory) == 0

    run(body)

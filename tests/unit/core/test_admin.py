"""Management actions in-process over the in-memory paged-queue store (`core/admin.py`):
purge, move and retry keep order and counts with a selective consumer's claims, held
messages and in-flight deliveries about; actions on one queue run one at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from test_paging_acks import Collector
from test_paging_in_memory import memory_broker, numbers, run, send

from pagemq.core.address import ANYCAST
from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode


def test_purge_takes_pending_and_paged_messages_and_leaves_deliveries() -> None:
    async def body() -> None:
        broker, pages = memory_broker()
        send(broker, 60)
        queue = broker.queues["q"]
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=3)
        assert numbers(sink) == [0, 1, 2]

        purged = await broker.admin.purge("q")

        assert purged == 57
        info = broker.queue_info("q")
        assert (info["messages"], info["messages_delivering"], info["messages_paged"]) == (3, 3, 0)
        broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
        await asyncio.sleep(0.01)
        assert pages["q"].page_count() == 0 and broker.memory.used_messages == 0
        assert broker.address_info("q")["paging"] is False
        send(broker, 2, start=100)  # the queue goes on
        assert numbers(sink)[3:] == [100, 101]

    run(body)


def test_a_selective_consumers_claims_survive_a_purge_of_the_rest() -> None:
    async def body() -> None:
        broker, _pages = memory_broker()
        send(broker, 30)
        send(broker, 1, color="red", start=30)
        send(broker, 10, start=31)
        queue = broker.queues["q"]
        red = Collector()
        broker.subscribe(queue, red, ack_mode=AckMode.INDIVIDUAL, selector="color = 'red'")
        assert numbers(red) == [30]  # claimed deep in the pages, being delivered

        assert await broker.admin.purge("q") == 40
        assert broker.queue_info("q")["messages"] == 1

    run(body)


def test_move_keeps_queue_order_across_memory_and_pages_and_honours_the_selector() -> None:
    async def body() -> None:
        broker, _pages = memory_broker({"max-size-bytes": 2000})  # a few in memory, the rest paged
        for n in range(40):
            broker.send("q", ANYCAST, {"n": str(n), "color": "red" if n % 3 == 0 else "blue"},
                        b"x" * 200, persistent=True)
        assert broker.queue_info("q")["messages_in_memory"] > 0
        assert broker.queue_info("q")["messages_paged"] > 0

        moved = await broker.admin.move("q", "reds", "color = 'red'")

        assert moved == 14
        reds, rest = Collector(), Collector()
        broker.subscribe(broker.queues["reds"], reds, ack_mode=AckMode.AUTO, prefetch=1000)
        broker.subscribe(broker.queues["q"], rest, ack_mode=AckMode.AUTO, prefetch=1000)
        await asyncio.sleep(0.01)
        assert numbers(reds) == [n for n in range(40) if n % 3 == 0]
        assert numbers(rest) == [n for n in range(40) if n % 3 != 0]

    run(body)


def test_retry_sends_dead_letters_home_and_leaves_the_others() -> None:
    async def body() -> None:
        broker, _pages = memory_broker({"max-size-bytes": -1})
        for headers in ({"n": "1", "original-destination": "/queue/orders"}, {"n": "2"},
                        {"n": "3", "original-destination": "orders"}):
            broker.send("DLQ", ANYCAST, headers, b"x", persistent=True)

        assert await broker.admin.retry("DLQ") == 2

        home = Collector()
        broker.subscribe(broker.queues["orders"], home, ack_mode=AckMode.AUTO)
        assert numbers(home) == [1, 3]
        assert all("original-destination" not in ref.message.headers for _t, ref in home.delivered)
        assert broker.queue_info("DLQ")["messages"] == 1

    run(body)


def test_a_delete_waits_for_a_move_of_the_same_queue() -> None:
    async def body() -> None:
        broker, _pages = memory_broker()
        send(broker, 1200)  # three batches: the move awaits durability between them
        move = asyncio.ensure_future(broker.admin.move("q", "elsewhere"))
        await asyncio.sleep(0)
        assert broker.admin.busy(broker.queues["q"])
        delete = asyncio.ensure_future(broker.admin.delete_queue("q"))
        assert await move == 1200
        await delete
        assert "q" not in broker.queues
        assert broker.queue_info("elsewhere")["messages"] == 1200

    run(body)


def test_retry_leaves_the_messages_it_cannot_send_in_their_order() -> None:
    async def body() -> None:
        broker, _pages = memory_broker({"max-size-bytes": -1})
        for n, home in enumerate(["", "orders", "", "orders", ""]):
            headers = {"n": str(n)} | ({"original-destination": home} if home else {})
            broker.send("DLQ", ANYCAST, headers, b"x", persistent=True)

        assert await broker.admin.retry("DLQ") == 2

        left = Collector()
        broker.subscribe(broker.queues["DLQ"], left, ack_mode=AckMode.AUTO)
        assert numbers(left) == [0, 2, 4]

    run(body)


def test_a_move_that_cannot_copy_stops_and_keeps_the_rest_in_order() -> None:
    async def body() -> None:
        broker, _pages = memory_broker({"max-size-bytes": -1})
        send(broker, 6)
        real_send = broker.router.send
        calls = []

        def failing_send(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(args)
            if len(calls) == 3:
                raise OSError("disk gone")
            return real_send(*args, **kwargs)

        broker.router.send = failing_send  # type: ignore[method-assign]
        assert await broker.admin.move("q", "elsewhere") == 2
        kept, moved = Collector(), Collector()
        broker.subscribe(broker.queues["q"], kept, ack_mode=AckMode.AUTO)
        broker.subscribe(broker.queues["elsewhere"], moved, ack_mode=AckMode.AUTO)
        assert numbers(moved) == [0, 1] and numbers(kept) == [2, 3, 4, 5]

    run(body)


def test_paged_messages_a_failed_move_gives_back_reach_a_consumer_that_came_meanwhile() -> None:
    """The move claims paged records without reading them; a consumer subscribing while it
    runs reads past them to a message sent meanwhile. Records given back after a failed copy
    were unclaimed behind the queue's read position and never read again: they come back in
    memory instead (after the one delivered meanwhile)."""
    async def body() -> None:
        broker, _pages = memory_broker()
        send(broker, 6)
        queue = broker.queues["q"]
        kept = Collector()

        def meanwhile() -> None:
            send(broker, 1, start=6)
            broker.subscribe(queue, kept, ack_mode=AckMode.AUTO)  # reads past the claimed

        _fail_copy(broker, at_call=3, meanwhile=meanwhile)
        assert await broker.admin.move("q", "elsewhere") == 2
        await asyncio.sleep(0.01)
        assert numbers(kept) == [6, 2, 3, 4, 5]
        assert broker.queue_info("q")["messages"] == 0

    run(body)


def test_a_selective_consumer_gets_a_paged_message_a_failed_move_gave_back_behind_its_scan() -> None:
    """Found by review: blue0 red1 red2 blue3 paged; a move of the reds copies red1 and fails
    on red2, while a consumer selecting red subscribes and looks past the claimed reds. red2,
    unclaimed behind where it looked, waited until something rewound its look-ahead (and a
    later red overtook it)."""
    async def body() -> None:
        broker, _pages = memory_broker({"prefetch-page-messages": 1})
        send(broker, 1)
        send(broker, 2, color="red", start=1)
        send(broker, 1, start=3)
        queue = broker.queues["q"]
        reds = Collector()
        _fail_copy(broker, at_call=2, meanwhile=lambda: broker.subscribe(
            queue, reds, ack_mode=AckMode.INDIVIDUAL, selector="color = 'red'"))
        assert await broker.admin.move("q", "elsewhere", "color = 'red'") == 1
        await asyncio.sleep(0.01)
        send(broker, 1, color="red", start=4)
        await asyncio.sleep(0.01)
        assert numbers(reds) == [2, 4]

    run(body)


def _fail_copy(broker: Broker, *, at_call: int, meanwhile: Callable[[], object]) -> None:
    """The move's `at_call`-th copy fails (disk gone), after `meanwhile` ran."""
    real_send = broker.router.send
    calls = 0

    def failing_send(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == at_call:
            meanwhile()
            raise OSError("disk gone")
        return real_send(*args, **kwargs)

    broker.router.send = failing_send  # type: ignore[method-assign]

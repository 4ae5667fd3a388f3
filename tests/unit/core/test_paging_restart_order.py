"""A queue delivers in message order across a restart, though after it part of its messages
come back from the journal (in memory) and part from page files (model-based test, seed 675).

Every test starts from one history, with max-size-messages 3 on the address: a, b, c are held
in memory and d pages; a consumer gets all four and acknowledges a, b and c (d, read back into
memory, leaves the address out of page mode); e and f are held in memory (journal), g and h
page again (the consumer left before e was sent). After the restart the queue holds d (page), e, f (journal),
g, h (page), and whoever consumes or browses it sees d, e, f, g, h.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from test_paging_acks import Collector, close, paging_broker, run

from pagemq.core.broker import Broker
from pagemq.core.browse import QueueBrowse
from pagemq.core.consumer import AckMode

SETTINGS: dict[str, object] = {"max-size-bytes": -1, "max-size-messages": 3, "page-size-bytes": 4096}
COLORS = {"a": "blue", "b": "red", "c": "blue", "d": "red", "e": "blue", "f": "red",
          "g": "blue", "h": "red", "x": "blue", "y": "blue"}


async def send(broker: Broker, labels: str, expires: dict[str, int] | None = None) -> None:
    futures = []
    for label in labels:
        headers = {"n": label, "color": COLORS.get(label, "red")}
        expiration = (expires or {}).get(label, 0)
        futures.append(broker.send("q", "anycast", headers, b"x" * 40, persistent=True,
                                   expiration=expiration))
    await asyncio.gather(*[f for f in futures if f is not None])


def got(sink: Collector) -> str:
    return "".join(ref.message.headers["n"] for _tag, ref in sink.delivered)


async def settle_down() -> None:
    await asyncio.sleep(0.05)  # page writes become readable, cursors read them in


def history(directory: Path, settings: dict[str, object] | None = None,
            expires: dict[str, int] | None = None, *, held: str = "abc", paged: str = "d") -> None:
    """The history of the module docstring (`held`, `paged`: a, b, c and d), then a clean stop."""
    async def body() -> None:
        broker, store, pages = await paging_broker(directory, address_settings=settings or SETTINGS)
        await send(broker, held + paged)
        queue = broker.queues["q"]
        assert queue.cursor is not None and queue.cursor.unread == len(paged)
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
        await settle_down()
        assert got(sink) == held + paged
        for tag, _ref in sink.delivered[:len(held)]:
            broker.acknowledge(queue, [consumer.take(tag)])
        await broker.flush()
        broker.close_consumer(queue, consumer)
        assert not broker.addresses[queue.address_name].paging
        await send(broker, "ef", expires)
        assert queue.cursor.unread == 0  # e, f in memory
        await send(broker, "gh")
        assert queue.cursor.unread == 2  # g, h paged again
        await close(broker, store, pages)

    run(body)


async def restarted(directory: Path, settings: dict[str, object] | None = None) -> Broker:
    broker, _store, _pages = await paging_broker(directory, address_settings=settings or SETTINGS)
    return broker


def test_a_plain_consumer_gets_page_and_journal_messages_in_order(tmp_path: Path) -> None:
    history(tmp_path)

    async def body() -> None:
        broker = await restarted(tmp_path)
        info = broker.queue_info("q")
        assert (info["messages"], info["messages_paged"], info["messages_in_memory"]) == (5, 3, 2)
        sink = Collector()
        broker.subscribe(broker.queues["q"], sink)
        await settle_down()
        assert got(sink) == "defgh"
        assert broker.queue_info("q")["messages"] == 0
        assert broker.memory.used_messages == 0

    run(body)


def test_read_limits_do_not_hold_journal_messages_behind_an_unacknowledged_paged_one(
    tmp_path: Path,
) -> None:
    """One paged message may be in memory (max-read-page-messages 1): d is, delivered and not
    acknowledged. e and f are in memory already, so they are delivered too (before the
    restart they would have been); g waits for d's ack."""
    settings = {**SETTINGS, "max-read-page-messages": 1}
    history(tmp_path, settings)

    async def body() -> None:
        broker = await restarted(tmp_path, settings)
        queue = broker.queues["q"]
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
        await settle_down()
        assert got(sink) == "def"
        broker.acknowledge(queue, [consumer.take(sink.delivered[0][0])])
        await settle_down()
        assert got(sink) == "defg"

    run(body)


def test_a_selective_consumer_gets_journal_messages_at_their_place_among_paged_ones(
    tmp_path: Path,
) -> None:
    history(tmp_path)

    async def body() -> None:
        broker = await restarted(tmp_path)
        queue = broker.queues["q"]
        reds, blues = Collector(), Collector()
        broker.subscribe(queue, reds, selector="color = 'red'")
        await settle_down()
        assert got(reds) == "dfh"
        broker.subscribe(queue, blues, selector="color = 'blue'")
        await settle_down()
        assert got(blues) == "eg"
        assert broker.queue_info("q")["messages"] == 0

    run(body)


def test_a_journal_message_a_selective_consumer_returns_goes_back_to_its_place(tmp_path: Path) -> None:
    """Two blue messages x, y paged before e (blue) and f (red); one paged message may be in
    memory. A red consumer gets f and h from beyond the queue's read position (x read in, y
    next), in that order, and leaves without acknowledging: f goes back behind y, as h goes
    back to its page. A plain consumer then gets x, y, e, f, g, h."""
    settings = {**SETTINGS, "max-size-messages": 4}
    history(tmp_path, settings, held="abcd", paged="xy")
    settings["max-read-page-messages"] = 1

    async def body() -> None:
        broker = await restarted(tmp_path, settings)
        queue = broker.queues["q"]
        reds = Collector()
        selective = broker.subscribe(queue, reds, ack_mode=AckMode.INDIVIDUAL, selector="color = 'red'")
        await settle_down()
        assert got(reds) == "fh"
        broker.close_consumer(queue, selective)
        assert [ref.message.headers["n"] for ref in queue.held] == ["e", "f"]
        plain = Collector()
        broker.subscribe(queue, plain)
        await settle_down()
        assert got(plain) == "xyefgh"

    run(body)


def test_a_browser_sees_the_queue_in_order_and_takes_nothing(tmp_path: Path) -> None:
    history(tmp_path)

    async def body() -> None:
        broker = await restarted(tmp_path)
        queue = broker.queues["q"]
        assert "".join(ref.message.headers["n"] for ref in QueueBrowse(queue, None)) == "defgh"
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=1)
        await settle_down()
        assert got(sink) == "d"
        # d delivering; e, f let in behind it; g, h still paged
        assert "".join(ref.message.headers["n"] for ref in QueueBrowse(queue, None)) == "defgh"
        assert broker.queue_info("q")["messages"] == 5
        broker.acknowledge(queue, [consumer.take(sink.delivered[0][0])])
        await settle_down()
        assert got(sink) == "de"

    run(body)


def test_held_back_messages_expire_and_go_with_a_deleted_queue(tmp_path: Path) -> None:
    soon = int(time.time() * 1000) + 300
    history(tmp_path, expires={"e": soon})

    async def body() -> None:
        broker = await restarted(tmp_path)
        queue = broker.queues["q"]
        assert len(queue.held) == 2  # e, f wait behind d
        await asyncio.sleep(0.35)
        assert broker.expire_due() == 1
        await settle_down()  # the copy to ExpiryQueue is durable: the original goes
        info = broker.queue_info("q")
        assert (info["messages"], info["messages_expired"], len(queue.held)) == (4, 1, 1)
        assert broker.queue_info("ExpiryQueue")["messages"] == 1
        broker.delete_queue(queue)
        assert broker.addresses[queue.address_name].messages_in_memory == 0
        assert broker.memory.used_messages == 1  # the copy in ExpiryQueue

    run(body)


def test_a_second_restart_keeps_the_order(tmp_path: Path) -> None:
    """After the first restart only d is consumed (e was delivered and given back) and i is
    sent (paged: the address still pages); after the second, the rest comes in order."""
    history(tmp_path)

    limited = {**SETTINGS, "max-read-page-messages": 1}

    async def first() -> None:
        broker, store, pages = await paging_broker(tmp_path, address_settings=limited)
        queue = broker.queues["q"]
        sink = Collector()
        consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=1)
        await settle_down()
        broker.acknowledge(queue, [consumer.take(sink.delivered[0][0])])
        await settle_down()
        assert got(sink) == "de"
        broker.close_consumer(queue, consumer)
        assert broker.addresses[queue.address_name].paging  # g read in (one may be), h not
        await send(broker, "i")
        await broker.flush()
        await close(broker, store, pages)

    async def second() -> None:
        broker = await restarted(tmp_path)
        assert broker.queue_info("q")["messages"] == 5
        sink = Collector()
        broker.subscribe(broker.queues["q"], sink)
        await settle_down()
        assert got(sink) == "efghi"

    run(first)
    run(second)


def test_new_messages_after_the_restart_come_after_the_recovered_ones(tmp_path: Path) -> None:
    """Sent after the restart (paged: the address still pages), i comes last; once everything
    is read the address leaves page mode and j stays in memory, after i."""
    history(tmp_path)

    async def body() -> None:
        broker = await restarted(tmp_path)
        queue = broker.queues["q"]
        await send(broker, "i")
        assert queue.cursor is not None and queue.cursor.unread == 4
        sink = Collector()
        broker.subscribe(queue, sink)
        await settle_down()
        assert got(sink) == "defghi"
        assert not broker.addresses[queue.address_name].paging
        await send(broker, "j")
        assert queue.cursor.unread == 0
        assert got(sink) == "defghij"

    run(body)

"""Damage found while a queue reads its page files: what the damage took stops counting at
once (HTTP counts, `PageCursor.unread`, page completion), and only that. A record a queue
had read before its bytes were damaged is still that queue's to acknowledge; one a
selective consumer took ahead and gave back after its bytes were damaged is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_paging_acks import Collector, close, paging_broker, run

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode, Consumer
from pagemq.core.queue import Queue
from pagemq.storage.paging.page_format import FILE_HEADER, FRAME_HEADER, page_file_name, read_frames
from pagemq.storage.paging.page_store import PageStore


def _flip_record(store: PageStore, page_no: int, message_id: int) -> None:
    """Flip a byte inside the frame body holding `message_id` (on disk, as bit rot does)."""
    path = store.folder / page_file_name(page_no)
    data = bytearray(path.read_bytes())
    for offset, size, _first, entries in read_frames(bytes(data), FILE_HEADER.size, len(data)):
        if any(entry.message_id == message_id for entry in entries):
            data[offset + FRAME_HEADER.size + size // 2] ^= 0x20
            path.write_bytes(bytes(data))
            return
    raise AssertionError(f"message {message_id} is not in page {page_no}")


async def _drain(broker: Broker, queue: Queue, consumer: Consumer, sink: Collector) -> list[str]:
    """Acknowledge whatever comes until nothing more does; the `n` headers received."""
    idle = 0
    while idle < 5:
        await asyncio.sleep(0.02)
        if consumer.in_flight:
            broker.acknowledge(queue, [consumer.take(tag) for tag in list(consumer.in_flight)])
            idle = 0
        else:
            idle += 1
    return [ref.message.headers["n"] for _tag, ref in sink.delivered]


def test_a_record_read_before_its_bytes_were_damaged_stays_its_readers_and_others_stop_counting_it(
    tmp_path: Path,
) -> None:
    """Two queues share a closed page. Queue a holds records 0-9 unacknowledged (its read
    limit); then a byte of record 5 flips; queue b reads the page, meets the damage, and the
    record stops counting for b only: a read it before the damage and acknowledges it like
    any other. Both get everything they can, both count down to 0, the page is set aside."""

    async def body() -> None:
        broker, store, pages = await paging_broker(tmp_path, address_settings={
            "max-size-bytes": 0, "page-size-bytes": 4096, "max-read-page-messages": 10,
        })
        address = broker.ensure_address("t", "multicast")
        queue_a = broker.ensure_queue(address, "a", "multicast")
        queue_b = broker.ensure_queue(address, "b", "multicast")
        futures = [broker.send("t", "multicast", {"n": str(i)}, b"x" * 100, persistent=True)
                   for i in range(40)]
        await asyncio.gather(*[f for f in futures if f is not None])
        (page_store,) = pages
        first_page = page_store.pages()[0]
        assert first_page.closed and first_page.count > 10

        sink_a = Collector()
        consumer_a = broker.subscribe(queue_a, sink_a, ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        await asyncio.sleep(0.05)
        assert len(sink_a.delivered) == 10
        damaged = sink_a.delivered[5][1]
        assert damaged.page_pos is not None and damaged.page_pos[0] == first_page.page_no
        _flip_record(page_store, first_page.page_no, damaged.message.message_id)

        sink_b = Collector()
        consumer_b = broker.subscribe(queue_b, sink_b, ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        assert await _drain(broker, queue_b, consumer_b, sink_b) == [str(i) for i in range(40) if i != 5]
        assert broker.queue_info("b")["messages"] == 0
        assert broker.queue_info("a")["messages"] == 40  # 10 in memory, 30 paged: none lost for a

        assert await _drain(broker, queue_a, consumer_a, sink_a) == [str(i) for i in range(40)]
        assert broker.queue_info("a")["messages"] == 0
        assert queue_a.cursor.unread == 0 and queue_b.cursor.unread == 0  # type: ignore[attr-defined]
        assert broker.address_info("t")["paging"] is False
        await page_store.flush()
        folder = page_store.folder
        assert (folder / (page_file_name(first_page.page_no) + ".damaged")).exists()
        assert not (folder / page_file_name(first_page.page_no)).exists()
        await close(broker, store, pages)

    run(body)


def test_a_record_taken_ahead_and_given_back_after_its_bytes_were_damaged_is_gone(tmp_path: Path) -> None:
    """A selective consumer takes the only red record ahead of the queue's position (in the
    live page); its bytes are then damaged; a browser reads past them (the page is closed
    and re-counted); the selective consumer leaves without acknowledging. The record goes
    back to its place in the page files, which nobody can read: it must stop counting, not
    come back as unread (the queue would count it for ever and never finish the page)."""

    async def body() -> None:
        broker, store, pages = await paging_broker(tmp_path, address_settings={
            "max-size-bytes": 0, "page-size-bytes": 8192, "max-read-page-messages": 3,
        })
        colors = ["red" if i == 12 else "blue" for i in range(20)]
        futures = [broker.send("q", "anycast", {"n": str(i), "color": color}, b"x" * 100, persistent=True)
                   for i, color in enumerate(colors)]
        await asyncio.gather(*[f for f in futures if f is not None])
        queue = broker.queues["q"]
        (page_store,) = pages
        assert len(page_store.pages()) == 1 and not page_store.pages()[0].closed

        red = Collector()
        selective = broker.subscribe(queue, red, ack_mode=AckMode.INDIVIDUAL, prefetch=1000,
                                     selector="color = 'red'")
        await asyncio.sleep(0.05)
        assert [ref.message.headers["n"] for _tag, ref in red.delivered] == ["12"]
        _flip_record(page_store, 1, red.delivered[0][1].message.message_id)

        browsed = [ref.message.headers["n"] for ref in queue.cursor.browse(None)]  # type: ignore[attr-defined]
        assert browsed == [str(i) for i in range(3, 20) if i != 12]  # 0-2 are in memory
        await asyncio.sleep(0.05)
        assert page_store.live_page_no() > 1  # the damaged live page was closed
        assert broker.queue_info("q")["messages"] == 20  # the red one is in memory, not lost for q

        broker.close_consumer(queue, selective)  # back to its place in the page files, which is damaged
        assert broker.queue_info("q")["messages"] == 19
        blue = Collector()
        plain = broker.subscribe(queue, blue, ack_mode=AckMode.INDIVIDUAL, prefetch=1000)
        assert await _drain(broker, queue, plain, blue) == [str(i) for i in range(20) if i != 12]
        assert broker.queue_info("q")["messages"] == 0
        assert queue.cursor.unread == 0  # type: ignore[attr-defined]
        await page_store.flush()
        assert (page_store.folder / (page_file_name(1) + ".damaged")).exists()
        await close(broker, store, pages)

    run(body)

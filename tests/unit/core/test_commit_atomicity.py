"""A COMMIT is durable all together or not at all, across the journal and page files.

A commit that pages to two addresses, or pages and also writes the journal, writes its page
batches marked with a transaction id, then one journal transaction with a commit record for
each: these tests cut the power (`FaultyFileIO.crash`) on either side of that record, fail a
page write, and restart on the same files with the real page store and journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from pathlib import Path

import pytest
from test_paging_acks import Collector, close, paging_broker, run

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode
from pagemq.core.transactions import PendingSend, Transaction
from pagemq.storage.fileio import FaultyFileIO

QUEUES = ("left", "right")


def _send(address: str, label: str) -> PendingSend:
    return PendingSend(address, "anycast", {"label": label}, b"x" * 50, True, 4, 0)


def _labels(broker: Broker, queue: str) -> list[str]:
    sink = Collector()
    broker.subscribe(broker.queues[queue], sink, ack_mode=AckMode.INDIVIDUAL)
    return [ref.message.headers["label"] for _tag, ref in sink.delivered]


async def _prepare(broker: Broker) -> None:
    """Both queues exist, each holding one paged message sent before the transaction."""
    for queue in QUEUES:
        future = broker.send(queue, "anycast", {"label": f"{queue}-before"}, b"x", persistent=True)
        assert future is not None
        await future


def _acking_left_before(broker: Broker) -> Transaction:
    """A transaction that has acknowledged "left-before", delivered to a new consumer."""
    sink = Collector()
    queue = broker.queues["left"]
    consumer = broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL)
    ((tag, _ref),) = sink.delivered
    tx = Transaction("tx")
    tx.acks.append((queue, consumer.take(tag)))
    broker.hold_for_transaction(queue, [tx.acks[0][1]])
    return tx


async def _counts(tmp_path: Path) -> dict[str, list[str]]:
    broker, store, pages = await paging_broker(tmp_path)
    try:
        return {queue: _labels(broker, queue) for queue in QUEUES}
    finally:
        await close(broker, store, pages)


async def _crashed(broker: Broker, fileios: list[FaultyFileIO], stores: list[object]) -> None:
    """Power cut: what was not fsynced is gone; the broker's threads are let go."""
    for fileio in fileios:
        fileio.crash()
    for closing in stores:
        with contextlib.suppress(Exception):
            await closing.close()  # type: ignore[attr-defined]


def test_a_commit_to_two_paging_addresses_cut_before_its_journal_record_leaves_neither(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        pages_io, journal_io = FaultyFileIO(), FaultyFileIO()
        broker, store, pages = await paging_broker(tmp_path, pages_io, journal_fileio=journal_io)
        await _prepare(broker)
        tx = Transaction("tx")
        for queue in QUEUES:
            tx.sends.append(_send(queue, f"{queue}-tx"))
        journal_io.hold_fsync()
        committed = broker.commit(tx)
        assert committed is not None and tx.applied is not None
        await asyncio.wait_for(tx.applied, 5)  # both page batches fsynced, journal record not
        assert not committed.done()
        await _crashed(broker, [pages_io, journal_io], [*pages, store])
        assert await _counts(tmp_path) == {q: [f"{q}-before"] for q in QUEUES}

    run(body)


def test_a_commit_to_two_paging_addresses_is_whole_once_its_receipt_is_due(tmp_path: Path) -> None:
    async def body() -> None:
        pages_io, journal_io = FaultyFileIO(), FaultyFileIO()
        broker, store, pages = await paging_broker(tmp_path, pages_io, journal_fileio=journal_io)
        await _prepare(broker)
        tx = Transaction("tx")
        for queue in QUEUES:
            tx.sends.append(_send(queue, f"{queue}-tx"))
        committed = broker.commit(tx)
        assert committed is not None
        await committed
        await _crashed(broker, [pages_io, journal_io], [*pages, store])
        assert await _counts(tmp_path) == {q: [f"{q}-before", f"{q}-tx"] for q in QUEUES}

    run(body)


def test_paged_acks_and_sends_of_one_commit_cut_before_its_record_all_come_back_undone(
    tmp_path: Path,
) -> None:
    """The acked paged message is delivered again and the sends never appear."""
    async def body() -> None:
        pages_io, journal_io = FaultyFileIO(), FaultyFileIO()
        broker, store, pages = await paging_broker(tmp_path, pages_io, journal_fileio=journal_io)
        await _prepare(broker)
        tx = _acking_left_before(broker)
        tx.sends.append(_send("right", "right-tx"))
        journal_io.hold_fsync()
        committed = broker.commit(tx)
        assert committed is not None and tx.applied is not None
        await asyncio.wait_for(tx.applied, 5)
        await _crashed(broker, [pages_io, journal_io], [*pages, store])
        assert await _counts(tmp_path) == {"left": ["left-before"], "right": ["right-before"]}

    run(body)


def test_a_failed_page_write_fails_the_commit_and_leaves_nothing_of_it(tmp_path: Path) -> None:
    """The batch already written to the other address is voided at once, not delivered, not
    counted, and still voided after a restart; the transaction's ack is undone."""
    async def body() -> None:
        pages_io = FaultyFileIO()
        broker, store, pages = await paging_broker(tmp_path, pages_io)
        await _prepare(broker)
        tx = _acking_left_before(broker)
        tx.sends += [_send("left", "left-tx"), _send("right", "right-tx")]
        pages_io.fail_write(2, errno.ENOSPC)  # the second address's batch
        committed = broker.commit(tx)
        assert committed is not None
        with pytest.raises(OSError):
            await committed
        await asyncio.sleep(0.05)
        for queue in QUEUES:
            info = broker.queue_info(queue)
            assert (info["messages"], info["messages_added"]) == (1, 1), queue
        assert _labels(broker, "right") == ["right-before"]
        await broker.flush()
        await close(broker, store, pages)
        assert await _counts(tmp_path) == {q: [f"{q}-before"] for q in QUEUES}

    run(body)


def test_cursors_wait_behind_a_transaction_until_it_commits(tmp_path: Path) -> None:
    """The commit's batch on "left" is written while the one on "right" is still held: it is
    not delivered, nor is a message paged after it, until the whole commit is."""
    async def body() -> None:
        left_io, right_io = FaultyFileIO(), FaultyFileIO()
        broker, store, pages = await paging_broker(tmp_path, {"left": left_io, "right": right_io})
        await _prepare(broker)
        sink = Collector()
        consumer = broker.subscribe(broker.queues["left"], sink, ack_mode=AckMode.INDIVIDUAL)
        ((tag, _ref),) = sink.delivered
        broker.acknowledge(broker.queues["left"], [consumer.take(tag)])
        tx = Transaction("tx")
        tx.sends += [_send("left", "left-tx"), _send("right", "right-tx")]
        right_io.hold_fsync()
        committed = broker.commit(tx)
        after = broker.send("left", "anycast", {"label": "left-after"}, b"x", persistent=True)
        assert after is not None
        await after  # "left" is written and fsynced, the commit's batch too
        await asyncio.sleep(0.05)
        assert [ref.message.headers["label"] for _t, ref in sink.delivered] == ["left-before"]
        cursor = broker.queues["left"].cursor
        assert [ref.message.headers["label"] for ref in cursor.browse(None)] == ["left-after"]  # type: ignore[union-attr]
        right_io.release_fsync()
        assert committed is not None
        await committed
        await asyncio.sleep(0.05)
        assert [ref.message.headers["label"] for _t, ref in sink.delivered] == [
            "left-before", "left-tx", "left-after"]
        await close(broker, store, pages)

    run(body)


def test_a_commit_held_partly_in_memory_and_partly_paged_is_delivered_in_send_order(
    tmp_path: Path,
) -> None:
    """Two sends fit in memory, the rest page; the consumer is there as the commit takes
    effect: the paged share comes only after the in-memory one reached the queue."""
    async def body() -> None:
        broker, store, pages = await paging_broker(tmp_path, address_settings={"max-size-messages": 2})
        broker.ensure_queue(broker.ensure_address("left", "anycast"), "left", "anycast")
        broker.ensure_queue(broker.ensure_address("right", "anycast"), "right", "anycast")
        sink = Collector()
        broker.subscribe(broker.queues["left"], sink, ack_mode=AckMode.INDIVIDUAL)
        tx = Transaction("tx")
        for n in range(5):
            tx.sends += [_send("left", f"m{n}"), _send("right", f"m{n}")]
        committed = broker.commit(tx)
        assert committed is not None
        await committed
        await asyncio.sleep(0.05)
        assert [ref.message.headers["label"] for _t, ref in sink.delivered] == [f"m{n}" for n in range(5)]
        await close(broker, store, pages)

    run(body)

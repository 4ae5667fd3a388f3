"""One contract suite over both paged-queue stores (the file one and the memory one), as NATS
runs one suite over its memory and file stream stores: what a queue reads, acknowledges and
completes, when a page goes, transactions, dropped queues, damage, and what a restart keeps.

Every test runs once per store (`each_store`); the harness (paged_queue_harness.py) is
the only place that knows which one it is.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from paged_queue_harness import PAGE_SIZE, FileHarness, Harness, MemoryHarness, SteppedPageIO

from pagemq.storage.paging.page_format import PagedRecord, read_frames
from pagemq.storage.paging.queue_store import Appended, Entry, PagedQueue, PagedQueueStore

A, B = 11, 12  # queue ids
BODY = b"m" * 1000

Body = Callable[[Harness], Awaitable[None]]


def each_store(body: Body) -> Callable[[str, Path], None]:
    """The test `body`, run once against a fresh store of each kind."""

    @pytest.mark.parametrize("kind", ["file", "memory"])
    def test(kind: str, tmp_path: Path) -> None:
        async def main() -> None:
            harness = FileHarness(tmp_path) if kind == "file" else MemoryHarness()
            await harness.start()
            try:
                await body(harness)
            finally:
                await harness.close()

        asyncio.run(main())

    test.__name__, test.__doc__ = body.__name__, body.__doc__
    return test


def append(store: PagedQueueStore, message_id: int, *queues: int, persistent: bool = True,
           txid: int = 0, tag: str = "x") -> Appended:
    return store.append([PagedRecord(message_id, queues, persistent, BODY, txid)], summary_input=[tag])


async def fill(h: Harness, count: int, *queues: int) -> None:
    """Messages 1 to `count` for `queues`, one append each, written."""
    for n in range(1, count + 1):
        append(h.store, n, *queues)
    await h.settle()


def append_batch(store: PagedQueueStore, ids: range, *queues: int, txid: int = 0) -> Appended:
    records = [PagedRecord(i, queues, True, BODY, txid) for i in ids]
    return store.append(records, summary_input=["x"] * len(records))


def take_all(queue: PagedQueue) -> list[Entry]:
    taken = []
    while (entry := queue.take()) is not None:
        taken.append(entry)
    return taken


def ids(entries: list[Entry]) -> list[int]:
    return [record.message_id for _page, _ordinal, record in entries]


def ack(queue: PagedQueue, entries: list[Entry], *, journal: bool = True) -> None:
    for page_no, ordinal, _record in entries:
        queue.acknowledge(page_no, ordinal, journal=journal)


# -- appending and reading -----------------------------------------------------------------


async def fill_alternating(h: Harness, count: int) -> None:
    """Messages 1 to `count`: odd ones for A and B, even ones for A only, written."""
    for n in range(1, count + 1):
        append(h.store, n, A, B) if n % 2 else append(h.store, n, A)
    await h.settle()


@each_store
async def test_each_queue_reads_its_own_records_in_order(h: Harness) -> None:
    await fill_alternating(h, 10)
    a, b = h.store.queue(A), h.store.queue(B)
    assert (a.unread, b.unread, h.store.messages_paged()) == (10, 5, 15)
    assert ids(take_all(a)) == list(range(1, 11))
    assert ids(take_all(b)) == [1, 3, 5, 7, 9]
    assert (a.unread, b.unread) == (0, 0)
    assert len(h.page_numbers()) >= 3  # records rolled over several pages


@each_store
async def test_peek_leaves_the_position_where_it_is(h: Harness) -> None:
    for n in (1, 2):
        append(h.store, n, A)
    await h.settle()
    a = h.store.queue(A)
    first = a.peek()
    assert first is not None and a.peek() == first and a.unread == 2
    assert a.position() == first[:2]
    assert a.take() == first and a.unread == 1
    assert ids([a.peek()]) == [2]  # type: ignore[list-item]


@each_store
async def test_positions_are_pages_and_ordinals_and_page_numbers_grow(h: Harness) -> None:
    appended = [append(h.store, n, A) for n in range(1, 9)]
    await h.settle()
    positions = [(x.page_no, x.first) for x in appended]
    assert positions == sorted(positions)
    assert [p[:2] for p in take_all(h.store.queue(A))] == positions
    assert h.store.last_message_id() == 8


@each_store
async def test_a_batch_is_one_append_with_consecutive_ordinals(h: Harness) -> None:
    appended = append_batch(h.store, range(1, 4), A)
    await h.settle()
    taken = take_all(h.store.queue(A))
    assert [(p, o) for p, o, _r in taken] == [(appended.page_no, appended.first + i) for i in range(3)]


@each_store
async def test_claimed_records_are_skipped_and_come_back_when_unclaimed(h: Harness) -> None:
    await fill(h, 4, A)
    a = h.store.queue(A)
    page_no = a.position()[0]
    records = list(a.read(page_no))
    third = records[2][0]
    a.claim(page_no, third)
    assert a.unread == 3
    ordinals = [o for o, _r in records]
    assert [o for o, _r in a.read(page_no)] == [o for o in ordinals if o != third]
    assert [o for o, _r in a.read(page_no, claimed=True)] == ordinals
    first = a.take()
    assert first is not None and first[2].message_id == 1
    assert a.unclaim(page_no, third)  # back before the position reached it
    assert ids(take_all(a)) == [2, 3, 4]


@each_store
async def test_acknowledged_claims_leave_nothing_behind_on_pages_a_selector_half_reads(h: Harness) -> None:
    """A selective consumer claims every other record of each page, in windows, and
    acknowledges them; the other half stays, so no page completes. What the claims took must
    go with them: a 10M selector run grew ~16 bytes an acknowledgement (issue 16), each
    half-read page keeping the table of its emptied claim set."""
    for first in range(1, 4001, 50):
        store_records = [PagedRecord(n, (A,), True, b"m", 0) for n in range(first, first + 50)]
        h.store.append(store_records, summary_input=["x"] * len(store_records))
    await h.settle()
    a = h.store.queue(A)
    pages = h.page_numbers()
    assert len(pages) >= 8
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        acks = 0
        for page_no in pages:
            window = [ordinal for ordinal, _record in a.read(page_no)][::2]
            for ordinal in window:
                a.claim(page_no, ordinal)
            for ordinal in window:
                a.acknowledge(page_no, ordinal, journal=False)
            acks += len(window)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert acks >= 1000 and a.unread == 4000 - acks
    assert kept / acks < 4, f"{kept} bytes kept for {acks} acknowledged claims on {len(pages)} pages"


@each_store
async def test_page_views_give_each_page_its_id_range_and_each_queue_its_share(h: Harness) -> None:
    for n in range(1, 13):
        append(h.store, n, A, B) if n % 3 else append(h.store, n, A)
    await h.settle()
    pages = h.store.page_views()
    assert [v.page_no for v in pages] == h.page_numbers() and len(pages) >= 3
    assert pages[0].first_id == 1 and pages[-1].last_id == 12
    for before, after in itertools.pairwise(pages):
        assert before.first_id <= before.last_id < after.first_id
    assert sum(v.records for v in pages) == 12
    assert [v.live for v in pages] == [False] * (len(pages) - 1) + [True]
    assert all(v.queue_records is None and v.queues_holding == 2 for v in pages[:-1])
    a_pages = h.store.page_views(A)
    assert sum(v.queue_records or 0 for v in a_pages) == 12
    assert sum(v.queue_records or 0 for v in h.store.page_views(B)) == 8
    assert h.store.page_views(99) == []  # a queue with nothing paged here
    # a queue done with a page no longer lists it; the page stays while the other holds it
    a = h.store.queue(A)
    first_page = pages[0].page_no
    ack(a, [e for e in take_all(a) if e[0] == first_page])
    await h.settle()
    assert first_page not in [v.page_no for v in h.store.page_views(A)]
    assert h.store.page_views()[0].page_no == first_page and h.store.page_views()[0].queues_holding == 1


# -- acknowledgements, completion, deletion ----------------------------------------------


@each_store
async def test_acks_of_one_loop_turn_are_one_cursor_record_per_page(h: Harness) -> None:
    await fill(h, 3, A)
    a = h.store.queue(A)
    taken = take_all(a)
    ack(a, taken[:2])
    assert h.journal.acks == []  # gathered, not yet written
    await asyncio.sleep(0)
    acked = tuple(o for _p, o, _r in taken[:2])
    assert [(r.queue_id, r.ordinals) for r in h.journal.acks] == [(A, acked)]


@each_store
async def test_a_page_goes_once_every_queue_acknowledged_it(h: Harness) -> None:
    await fill(h, 12, A, B)
    a, b = h.store.queue(A), h.store.queue(B)
    first_page = h.page_numbers()[0]
    on_first = [e for e in take_all(a) if e[0] == first_page]
    ack(a, on_first)
    await h.settle()
    assert first_page in h.page_numbers()  # b still holds it
    assert [(c.queue_id, c.page_no) for c in h.journal.completes] == [(A, first_page)]
    records, size = h.store.records_on_disk, h.store.bytes_on_disk
    pages = h.store.page_files()
    ack(b, [e for e in take_all(b) if e[0] == first_page])
    assert h.store.page_files() == pages  # its file is there until the acks are synced
    assert h.store.records_on_disk == records - len(on_first)
    assert h.store.bytes_on_disk == size - len(on_first) * len(BODY)
    await h.settle()
    assert first_page not in h.page_numbers()
    assert h.store.page_files() == pages - 1
    # Its cursor records (a's acks and complete record, b's acks) went after the page.
    written = {r.record_id for r in h.journal.acks} | {c.record_id for c in h.journal.completes}
    assert written <= set(h.journal.deleted)


@each_store
async def test_the_live_page_acknowledged_by_all_is_closed_and_goes(h: Harness) -> None:
    append(h.store, 1, A)
    append(h.store, 2, A, B)
    await h.settle()
    a, b = h.store.queue(A), h.store.queue(B)
    (page_no,) = h.page_numbers()
    ack(a, take_all(a))
    await h.settle()
    assert h.page_numbers() == [page_no]  # b has not caught up
    ack(b, take_all(b))
    await h.settle()
    assert h.page_numbers() == [] and h.store.page_files() == 0
    assert append(h.store, 3, A).page_no > page_no  # page numbers are never reused


@each_store
async def test_acks_for_a_callers_transaction_are_not_gathered(h: Harness) -> None:
    await fill(h, 3, A)
    a = h.store.queue(A)
    taken = take_all(a)
    records = a.ack_records([(p, o) for p, o, _r in taken[:2]])
    assert [r.ordinals for r in records] == [tuple(o for _p, o, _r in taken[:2])]
    h.commit(records)
    ack(a, taken[:2], journal=False)
    await asyncio.sleep(0)
    assert h.journal.acks == []
    recovery = await h.reopen([A])
    assert recovery.queues[A].paged == 1
    assert ids(take_all(h.store.queue(A))) == [3]


# -- what page limits count -----------------------------------------------------------------


@each_store
async def test_page_limits_count_a_fan_out_record_until_every_queue_acknowledged_it(h: Harness) -> None:
    append_batch(h.store, range(1, 5), A, B)  # one page, every record for both queues
    await h.settle()
    assert (h.store.records_held, h.store.bytes_held) == (4, h.store.bytes_on_disk)
    a, b = h.store.queue(A), h.store.queue(B)
    of_a, of_b = take_all(a), take_all(b)
    ack(a, of_a[:2])
    assert h.store.records_held == 4  # B holds them all still
    ack(b, of_b[1:3])
    assert h.store.records_held == 3  # only message 2 is acknowledged by both
    ack(b, of_b[:1])
    assert (h.store.records_held, h.store.bytes_held) == (2, h.store.bytes_on_disk // 2)
    await h.settle()
    await h.reopen([A, B])
    assert h.store.records_held == 2
    h.store.drop_queue(B)  # B's unacknowledged record (message 4) is nobody's now
    assert h.store.records_held == 2  # A has not acknowledged 3 and 4
    a = h.store.queue(A)
    ack(a, take_all(a)[:1])
    assert h.store.records_held == 1


@each_store
async def test_page_limits_count_runs_of_differently_routed_records(h: Harness) -> None:
    """A subscription coming or going mid-page starts a run of records routed otherwise: each
    run is counted from its own queues' acks. After a restart only per-queue counts are
    left, and a page routed neither one way nor all the same way counts whole."""
    h.store.append([PagedRecord(1, (A, B), True, BODY, 0), PagedRecord(2, (A,), True, BODY, 0)],
                   summary_input=["x", "x"])
    await h.settle()
    a, b = h.store.queue(A), h.store.queue(B)
    ack(a, take_all(a))
    ack(b, take_all(b))
    assert h.store.records_held == 0  # every queue is done with the page: it goes
    h.store.append([PagedRecord(3, (A, B), True, BODY, 0), PagedRecord(4, (A,), True, BODY, 0),
                    PagedRecord(5, (B, A), True, BODY, 0)], summary_input=["x"] * 3)
    await h.settle()
    assert h.store.records_held == 3
    ack(a, take_all(a))
    assert h.store.records_held == 2  # B holds 3 and 5
    of_b = take_all(b)
    ack(b, of_b[1:])
    assert h.store.records_held == 1
    await h.reopen([A, B])
    assert h.store.records_held == 3  # whole: A had 3 records of it, B 2


@each_store
async def test_page_limits_stop_counting_a_transaction_that_never_committed(h: Harness) -> None:
    append(h.store, 1, A)
    append_batch(h.store, range(2, 4), A, txid=9)
    append_batch(h.store, range(4, 6), A, B)
    append_batch(h.store, range(6, 8), A, B, txid=10)
    await h.settle()
    assert h.store.records_held == 7
    h.store.abandon_tx(9, written=True)
    h.store.abandon_tx(10, written=True)
    assert h.store.records_held == 3


# -- transactions ------------------------------------------------------------------------


@each_store
async def test_a_queue_waits_at_an_undecided_transaction_then_reads_on(h: Harness) -> None:
    append(h.store, 1, A)
    append_batch(h.store, range(2, 4), A, txid=77)
    append(h.store, 4, A)
    await h.settle()
    a = h.store.queue(A)
    assert ids([a.take()]) == [1]  # type: ignore[list-item]
    assert a.peek() is None and h.store.is_pending(77) and a.unread == 3
    commit = h.store.commit_tx(77)
    h.commit([commit])
    h.store.release_tx(77)
    assert h.listener.woken == [A] and not h.store.is_pending(77)
    assert ids(take_all(a)) == [2, 3, 4]
    recovery = await h.reopen([A])
    assert recovery.queues[A].paged == 4  # the commit record kept the batch


@each_store
async def test_an_abandoned_transaction_is_nobodys(h: Harness) -> None:
    append_batch(h.store, range(1, 3), A, B, txid=5)
    append(h.store, 3, A)
    await h.settle()
    h.store.abandon_tx(5, written=True)
    assert sorted(h.listener.withdrawn_ids) == [A, A, B, B]
    a, b = h.store.queue(A), h.store.queue(B)
    assert (a.unread, b.unread) == (1, 0)
    assert ids(take_all(a)) == [3] and take_all(b) == []


@each_store
async def test_a_transaction_never_committed_is_dropped_at_restart(h: Harness) -> None:
    append_batch(h.store, range(1, 3), A, txid=9)
    append(h.store, 3, A)
    await h.settle()
    recovery = await h.reopen([A])
    assert recovery.queues[A].paged == 1
    assert ids(take_all(h.store.queue(A))) == [3]


# -- queues going away, damage -----------------------------------------------------------


@each_store
async def test_a_dropped_queue_holds_no_page(h: Harness) -> None:
    await fill(h, 9, A, B)
    closed = h.page_numbers()[:-1]
    h.store.drop_queue(A)
    assert h.store.messages_paged() == 9
    b = h.store.queue(B)
    ack(b, [e for e in take_all(b) if e[0] in closed])
    await h.settle()
    assert not set(closed) & set(h.page_numbers())


@each_store
async def test_dropping_the_last_queue_behind_on_the_live_page_lets_the_page_go(h: Harness) -> None:
    appended = append_batch(h.store, range(1, 3), A, B)
    await h.settle()
    a = h.store.queue(A)
    ack(a, take_all(a))  # A caught up on the live page; B holds it
    await h.settle()
    assert appended.page_no in h.page_numbers()
    h.store.drop_queue(B)
    await h.settle()
    assert appended.page_no not in h.page_numbers()
    assert (h.store.records_held, h.store.page_files()) == (0, 0)


@each_store
async def test_damage_takes_only_what_a_queue_had_not_read(h: Harness) -> None:
    await fill(h, 4, A, B)
    a, b = h.store.queue(A), h.store.queue(B)
    read_by_a = take_all(a)  # in memory, not acknowledged
    page_no, ordinal, _record = read_by_a[1]
    h.damage(page_no, ordinal)
    got = ids(take_all(b))
    await h.settle()
    assert got == [1, 3, 4]
    ((lost, gone),) = h.listener.lost
    assert lost.page_no == page_no and ordinal in lost.ordinals
    assert gone == {B: 1}
    assert (a.unread, b.unread) == (0, 0)
    ack(a, read_by_a)
    ack(b, [e for e in read_by_a if e[2].message_id != 2])
    await h.settle()
    assert h.store.messages_paged() == 0


# -- summaries, restarts ----------------------------------------------------------------


@each_store
async def test_a_closed_page_has_its_summary_the_live_one_none(h: Harness) -> None:
    first = append(h.store, 1, A, tag="red").page_no
    n = 2
    while append(h.store, n, A, tag="blue").page_no == first:
        n += 1
    await h.settle()
    live = h.page_numbers()[-1]
    assert h.store.summary(first) == frozenset({"red", "blue"})
    assert h.store.summary(live) is None


@each_store
async def test_a_restart_keeps_acks_and_loses_nothing(h: Harness) -> None:
    for n in range(1, 10):
        append(h.store, n, A, B)
    append(h.store, 10, A, persistent=False)
    await h.settle()
    a, b = h.store.queue(A), h.store.queue(B)
    taken = take_all(a)
    ack(a, taken[:4])
    page_no = taken[6][0]
    a.claim(page_no, taken[6][1])  # only in memory: comes back
    take_all(b)  # read, never acknowledged: comes back
    # a's first page still held is the page of its first unacknowledged record
    a_first = min(r.message_id for p, _o, r in taken if p == taken[4][0])
    recovery = await h.reopen([A, B])
    assert {q: (r.paged, r.first_id) for q, r in recovery.queues.items()} == {A: (5, a_first), B: (9, 1)}
    assert ids(take_all(h.store.queue(A))) == [5, 6, 7, 8, 9]  # the non-persistent one is gone
    assert ids(take_all(h.store.queue(B))) == list(range(1, 10))
    assert h.store.last_message_id() == 10


@each_store
async def test_a_restart_matches_only_the_queues_it_is_given(h: Harness) -> None:
    await fill(h, 3, A, B)
    recovery = await h.reopen([B])
    assert set(recovery.queues) == {B}
    assert h.store.messages_paged() == 3


@each_store
async def test_a_page_finished_before_a_restart_stays_gone(h: Harness) -> None:
    await fill(h, 9, A)
    a = h.store.queue(A)
    first_page = h.page_numbers()[0]
    ack(a, [e for e in take_all(a) if e[0] == first_page])
    await h.settle()
    recovery = await h.reopen([A])
    assert first_page not in h.page_numbers()
    assert recovery.stale == []  # its cursor records went with it
    assert recovery.queues[A].paged == h.store.queue(A).unread > 0


# -- management: purge and claims of unread records ------------------------------------------


@each_store
async def test_purge_completes_whole_pages_and_leaves_other_queues_their_share(h: Harness) -> None:
    await fill(h, 12, A, B)
    a, b = h.store.queue(A), h.store.queue(B)
    pages = h.page_numbers()
    assert len(pages) > 2

    purged, later = a.purge()

    assert (purged, later, a.unread) == (12, None, 0)
    assert a.take() is None
    assert b.unread == 12
    b_entries = take_all(b)
    assert ids(b_entries) == list(range(1, 13))  # b's share untouched
    await h.settle()
    assert {c.page_no for c in h.journal.completes if c.queue_id == A} == set(pages)
    ack(b, b_entries)
    await h.settle()
    assert h.page_numbers() == [] and h.store.page_files() == 0


@each_store
async def test_purge_keeps_records_in_memory_and_takes_the_rest_of_their_page(h: Harness) -> None:
    await fill(h, 9, A)
    a = h.store.queue(A)
    held = [a.take(), a.take()]  # read into memory, not acknowledged (being delivered)
    assert all(e is not None for e in held)

    purged, _later = a.purge()

    assert purged == 7 and a.unread == 0 and a.take() is None
    ack(a, [e for e in held if e is not None])
    await h.settle()
    assert h.page_numbers() == []
    recovery = await h.reopen([A])
    assert A not in recovery.queues  # nothing comes back after a restart


@each_store
async def test_a_purge_survives_a_restart(h: Harness) -> None:
    await fill(h, 9, A, B)
    h.store.queue(A).purge()
    await h.settle()
    recovery = await h.reopen([A, B])
    assert A not in recovery.queues and recovery.queues[B].paged == 9
    append(h.store, 10, A, B)  # a purged queue receives again
    await h.settle()
    assert ids(take_all(h.store.queue(A))) == [10]


@each_store
async def test_claim_unread_takes_only_what_is_on_disk_only(h: Harness) -> None:
    await fill(h, 3, A)
    a = h.store.queue(A)
    first = a.take()
    assert first is not None
    page_no, ordinal, _record = first
    assert not a.claim_unread(page_no, ordinal)  # read into memory already
    assert a.claim_unread(page_no, ordinal + 1)
    assert not a.claim_unread(page_no, ordinal + 1)  # claimed already
    assert a.unread == 1
    a.acknowledge(page_no, ordinal + 1, journal=True)
    assert ids(take_all(a)) == [3]


# -- reads in the page-I/O worker ------------------------------------------------------------


def read_in_worker(h: Harness) -> SteppedPageIO:
    """The store's page reads go through a seam the test runs (see storage/paging/page_io)."""
    io = SteppedPageIO()
    h.store.medium.page_io = io
    return io


@each_store
async def test_a_read_in_the_worker_answers_nothing_now_then_wakes_the_queue(h: Harness) -> None:
    await fill(h, 10, A, B)
    io = read_in_worker(h)
    a = h.store.queue(A)
    taken: list[Entry] = []
    waits = 0
    while len(taken) < 10:
        entry = a.take()
        if entry is not None:
            taken.append(entry)
            continue
        assert a.reading and a.unread == 10 - len(taken)
        woken = len(h.listener.woken)
        assert await io.step() >= 1
        assert h.listener.woken[woken:] == [A] and not a.reading
        waits += 1
    assert ids(taken) == list(range(1, 11))
    assert waits >= len(h.page_numbers()) >= 3  # a read for each page at least
    assert a.take() is None and not a.reading  # read out: nothing is read for it
    assert ids(take_all(h.store.queue(B))) == [] and h.store.queue(B).reading


@each_store
async def test_a_peek_waiting_for_a_read_moves_nothing(h: Harness) -> None:
    await fill(h, 2, A)
    io = read_in_worker(h)
    a = h.store.queue(A)
    position = a.position()
    assert a.peek() is None and a.reading
    assert (a.unread, a.position()) == (2, position)
    await io.step()
    assert ids([a.peek(), a.take(), a.take()]) == [1, 1, 2]  # type: ignore[list-item]


@each_store
async def test_a_read_cut_short_by_its_page_completing_still_wakes_the_queue(h: Harness) -> None:
    """The queue was told "nothing now, woken later" while its page was read in the worker;
    every record of that page is then claimed and acknowledged (a selective consumer took
    them ahead), which completes the page and ends the read. The wake still comes, and the
    queue reads on in the next page (model-based test, seed 92034)."""
    await fill(h, 4, A)
    first, second = h.page_numbers()[:2]
    io = read_in_worker(h)
    a = h.store.queue(A)
    assert a.peek() is None and a.reading
    for ordinal, _record in list(a.read(first)):
        a.claim(first, ordinal)
        a.acknowledge(first, ordinal, journal=True)
    assert a.pages_from(0) == [second]  # done with the first page
    await asyncio.sleep(0)
    assert h.listener.woken == [A] and not a.reading and a.unread == 1
    while (entry := a.take()) is None:
        assert a.reading
        await io.step()
    assert entry[0] == second and entry[2].message_id == 4


@each_store
async def test_a_read_landing_for_a_dropped_queue_wakes_nobody(h: Harness) -> None:
    await fill(h, 2, A)
    io = read_in_worker(h)
    assert h.store.queue(A).take() is None
    h.store.drop_queue(A)
    await io.step()
    assert h.listener.woken == []


@each_store
async def test_last_id_names_the_highest_message_id_of_a_page(h: Harness) -> None:
    await fill(h, 9, A)
    pages = h.page_numbers()
    assert [h.store.last_id(p) for p in pages] == sorted(h.store.last_id(p) for p in pages)
    assert h.store.last_id(pages[-1]) == 9 and 0 < h.store.last_id(pages[0]) < 9
    assert h.store.last_id(max(pages) + 5) == 0


# -- streaming readers: pages counted and completed whole --------------------------------------


def ordinals_of(queue: PagedQueue, page_no: int) -> list[int]:
    return [ordinal for ordinal, _record in queue.read(page_no)]


@each_store
async def test_span_counts_a_queues_records_on_disk_without_reading_the_page(h: Harness) -> None:
    await fill_alternating(h, 12)
    a, b = h.store.queue(A), h.store.queue(B)
    pages = h.page_numbers()
    spans = [a.span(p) for p in pages]
    assert all(s is not None for s in spans)  # every append is written: even the live page counts
    assert sum(s.records for s in spans if s is not None) == 12
    assert sum(s.records for p in pages if (s := b.span(p)) is not None) == 6
    for page_no, span in zip(pages, spans, strict=True):
        assert span is not None and (span.first_id, span.last_id) == (
            h.store.page_views()[pages.index(page_no)].first_id, h.store.last_id(page_no))
    first = pages[0]
    on_first = len(ordinals_of(a, first))
    taken = a.take()  # in memory now: not on disk only
    assert taken is not None and taken[0] == first
    ack(a, [taken])
    second = a.take()
    assert second is not None and second[0] == first
    span = a.span(first)
    assert span is not None and span.records == on_first - 2
    assert b.span(first) is not None and b.span(first).records == len(ordinals_of(b, first))  # type: ignore[union-attr]
    append(h.store, 13, A)  # appended, not yet written: only a read can tell
    if h.store.medium.fully_readable(pages[-1]) is False:
        assert a.span(pages[-1]) is None


@each_store
async def test_a_page_served_whole_completes_with_one_record_and_no_acks(h: Harness) -> None:
    await fill(h, 12, A)
    a = h.store.queue(A)
    first, live = h.page_numbers()[0], h.page_numbers()[-1]
    served = ordinals_of(a, first)
    unread = a.unread

    assert a.complete_served(first, served) == len(served)

    assert a.unread == unread - len(served)
    assert ids(take_all(a))[0] == 12 - unread + len(served) + 1  # reading starts after it
    await h.settle()
    assert [(c.queue_id, c.page_no) for c in h.journal.completes] == [(A, first)]
    assert h.journal.acks == [] and first not in h.page_numbers()
    assert a.complete_served(live, ordinals_of(a, live)) == 0  # the live page may still grow
    recovery = await h.reopen([A])
    assert recovery.queues[A].paged == unread - len(served)


@each_store
async def test_a_page_not_served_whole_or_partly_in_memory_is_left_to_record_acks(h: Harness) -> None:
    await fill(h, 12, A, B)
    a = h.store.queue(A)
    first = h.page_numbers()[0]
    served = ordinals_of(a, first)
    assert len(served) >= 2
    assert a.complete_served(first, served[1:]) == 0  # one the reader was not served
    entry = a.take()  # the first one, read into memory (a STOMP consumer has it)
    assert entry is not None and entry[1] == served[0]
    assert a.complete_served(first, served) == 0
    ack(a, [entry])  # acknowledged: the rest was served, the page completes
    assert a.complete_served(first, served[1:]) == len(served) - 1
    await h.settle()
    assert (A, first) in [(c.queue_id, c.page_no) for c in h.journal.completes]
    assert first in h.page_numbers()  # B still holds it
    assert ids(take_all(h.store.queue(B)))[:len(served)] == list(range(1, len(served) + 1))


def from_frames(queue: PagedQueue, page_no: int, ordinal: int = 0,
                pending: Callable[[int], bool] = lambda _txid: False) -> list[tuple[int, int]] | None:
    """(ordinal, message id) of what the queue's frames of a page hold for it, decoded the way
    a bulk reader does (PagedQueue.frames); None when the store offers none."""
    frames = queue.frames(page_no, ordinal)
    if frames is None:
        return None
    assert frames.queue_id == queue.queue_id and frames.shown is not None
    found = []
    for first, start, end in frames.spans:
        data = frames.read(start, end - start)
        for _at, _size, index, records in read_frames(data, 0, len(data), version=frames.version,
                                                      ordinal=first):
            for n, record in enumerate(records, index):
                if (n >= ordinal and queue.queue_id in record.queue_ids and frames.shown(n)
                        and not (record.txid and pending(record.txid))
                        and (record.persistent or not frames.skip_non_persistent)):
                    found.append((n, record.message_id))
    return found


def from_records(queue: PagedQueue, page_no: int, ordinal: int = 0) -> list[tuple[int, int]]:
    return [(n, record.message_id) for n, record in queue.read(page_no, ordinal)]


@each_store
async def test_frames_of_a_page_hold_what_its_records_read_gives_the_queue(h: Harness) -> None:
    for n in range(1, 31):  # fan-out, one queue's, non-persistent, batches: every kind of frame
        if n % 7 == 0:
            append_batch(h.store, range(1000 + 3 * n, 1003 + 3 * n), A)
        else:
            append(h.store, n, *((A, B) if n % 3 else (B,)), persistent=n % 5 != 0)
    await h.settle()
    a, b = h.store.queue(A), h.store.queue(B)
    taken = take_all(a)[:5]
    ack(a, taken[:3])  # acknowledged, and read into memory: neither is on disk only for A
    entry = b.peek()
    assert entry is not None
    b.claim_unread(entry[0], entry[1] + 1)  # claimed ahead (a selective consumer's)

    def check() -> None:
        offered = 0
        for queue in (a, b):
            for page_no in h.page_numbers():
                for start in (0, 2):
                    found = from_frames(queue, page_no, start)
                    if found is not None:
                        offered += 1
                        assert found == from_records(queue, page_no, start), (queue.queue_id, page_no, start)
        assert offered if isinstance(h, FileHarness) else not offered  # pages in memory: none

    check()
    await h.reopen([A, B])  # non-persistent records are skipped on an earlier run's pages
    a, b = h.store.queue(A), h.store.queue(B)
    check()
    h.damage(h.page_numbers()[0], 0)
    assert from_frames(a, h.page_numbers()[0]) in (None, from_records(a, h.page_numbers()[0]))
    list(a.read(h.page_numbers()[0]))  # a read finds the damage (and reports it)
    assert from_frames(a, h.page_numbers()[0]) is None  # damaged: records only


@each_store
async def test_room_is_what_the_live_page_has_left_or_a_whole_page(h: Harness) -> None:
    """What the broker asks before it groups a read's SENDs into one append, so that the
    append keeps the page within page-size-bytes."""
    whole = h.store.room(100)  # a page without records: all but its file header
    assert PAGE_SIZE - 100 < whole < PAGE_SIZE
    first = append(h.store, 1, A)
    left = h.store.room(100)
    assert 0 < left < whole - len(BODY)
    assert h.store.room(left) == left
    assert h.store.room(left + 1) == whole  # would not fit: the append rolls the page first
    batch = [PagedRecord(n, (A,), True, BODY) for n in (2, 3)]
    assert 2 * (len(BODY) + 100) <= left  # two more records fit in what is left
    assert h.store.append(batch, summary_input=["x", "x"]).page_no == first.page_no
    await h.settle()

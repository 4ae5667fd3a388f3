"""The range reads' bulk path (`spark/paged_rows.py`) against the record path it replaces:
for pages of every kind of frame (fan-out, batches, transactions pending and committed,
non-persistent records, an earlier run's pages) and a queue's bookkeeping of every kind
(acknowledged, read into memory, claimed, lost to damage), every `(ordinal, after, upto)` gives the rows
`PagedRange.page_records` gives, in the same order, with the same columns."""

from __future__ import annotations

import asyncio
import io
import itertools
import random
from pathlib import Path

import pyarrow as pa
import pytest

from pagemq.core.message import Message
from pagemq.core.stream import PagedRange
from pagemq.spark.encoded_rows import EncodedRows
from pagemq.spark.paged_rows import Fallback, PagedBlock, page_blocks
from pagemq.spark.range_parts import CONTENT_TYPE, Span, SpanDamaged, read_parts, span_batches
from pagemq.spark.schema import ARROW_SCHEMA
from pagemq.storage.message_codec import encode_message
from pagemq.storage.paging.file_queue_store import FilePagedQueueStore
from pagemq.storage.paging.memory_queue_store import MemoryCursorLog
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.page_store import PageStore
from pagemq.storage.paging.queue_store import CursorRecords

ADDRESS = "orders"
A, B = 11, 12


class Pages:
    """A file store whose pages a test fills at random; reopened as a restart would."""

    def __init__(self, directory: Path, rnd: random.Random, page_size: int | None = None) -> None:
        self.directory, self.rnd, self.page_size = directory, rnd, page_size
        self.ids = itertools.count(1)
        self.tx = itertools.count(1)
        self.open()

    def open(self) -> None:
        size = self.page_size or self.rnd.choice((3000, 20_000, 1 << 20))
        self.pages = PageStore(self.directory, ADDRESS, page_size_bytes=size, sync_timeout=0.001)
        self.pages.open()
        self.pages.start(asyncio.get_running_loop())
        records = CursorRecords(MemoryCursorLog(), itertools.count(1).__next__)
        self.store = FilePagedQueueStore(self.pages, records)

    def record(self, queues: tuple[int, ...], txid: int = 0) -> PagedRecord:
        message_id = next(self.ids)
        headers = {f"h{n}": str(message_id * n) for n in range(self.rnd.randrange(3))}
        message = Message(message_id, ADDRESS, headers, b"b" * self.rnd.randrange(0, 700),
                          persistent=self.rnd.random() < 0.8, priority=self.rnd.randrange(10),
                          timestamp=1_700_000_000_000 + message_id)
        return PagedRecord(message_id, queues, message.persistent, encode_message(message), txid)

    def fill(self, count: int, routes: tuple[tuple[int, ...], ...] = ((A,), (B,), (A, B))) -> None:
        rnd = self.rnd
        while count > 0:
            queues = rnd.choice(routes)
            kind = rnd.random()
            if kind < 0.15:  # a COMMIT's sends to one address: one BATCH frame
                size = rnd.randrange(2, 6)
                self.store.append([self.record(queues) for _ in range(size)], summary_input=[None] * size)
            elif kind < 0.25:  # a paged transaction, decided later (or never)
                txid = next(self.tx)
                size = rnd.randrange(1, 4)
                records = [self.record(queues, txid) for _ in range(size)]
                self.store.append(records, summary_input=[None] * size)
                if rnd.random() < 0.7:
                    self.store.commit_tx(txid)
                    self.store.release_tx(txid)
            else:
                size = 1
                self.store.append([self.record(queues)], summary_input=[None])
            count -= size


def rows_of_records(paged: PagedRange, page_no: int, ordinal: int, after: int, upto: int | None
                    ) -> list[dict[str, object]]:
    rows = EncodedRows(ADDRESS, "q")
    for found in paged.page_records(page_no, ordinal, after, upto):
        if found is None:
            break
        _index, record = found
        rows.add(record.message_id, record.message, record.persistent)
    return rows.batch().to_pylist() if rows.count else []


def rows_of_blocks(paged: PagedRange, page_no: int, ordinal: int, after: int, upto: int | None
                   ) -> list[dict[str, object]] | None:
    frames = paged.frames(page_no, ordinal) if paged.frames is not None else None
    assert frames is not None, "a file store's intact page has frames"
    found: list[dict[str, object]] = []
    blocks = list(page_blocks(frames, ordinal, after, upto, paged.pending_tx))
    for shipped_as_is in (lambda _first, _last: True, lambda first, last: (first + last) % 2 == 0):
        # a caller shipping whole spans as they are: the spans walked without their CRCs
        # (this page is intact) give the same blocks
        walked = list(page_blocks(paged.frames(page_no, ordinal), ordinal, after, upto,  # type: ignore[misc]
                                  paged.pending_tx, shipped_as_is=shipped_as_is))
        assert list(map(block_fields, walked)) == list(map(block_fields, blocks))
    for block in blocks:
        if isinstance(block, Fallback):
            return None
        assert isinstance(block, PagedBlock)
        if block.ids:
            batch = block.batch(ADDRESS, "q", True)
            assert batch is not None
            assert batch.column("seq").to_pylist() == block.ids
            found += batch.to_pylist()
            if block.whole:  # shipped as it is (`pages=raw`), the reader decodes the same rows
                assert rows_of_span(block) == batch.to_pylist()
                WHOLE_SPANS.append((len(block.ids), len(block.txids)))
    return found


WHOLE_SPANS: list[tuple[int, int]] = []  # (rows, transactions) of each whole span met


def block_fields(block: PagedBlock | Fallback) -> object:
    if isinstance(block, Fallback):
        return block
    return (block.page_no, block.ordinal, block.located.rows, block.located.ends.tolist(), block.ids,
            block.ordinals, block.ends_range, block.whole, block.txids)


def rows_of_span(block: PagedBlock) -> list[dict[str, object]]:
    """A whole block's rows as the reader of a `pages=raw` answer decodes its span."""
    span = Span(block.page_no, block.version, block.ordinal, len(block.ids), block.first_id, block.last_id,
                block.txids)
    return [row for batch in span_batches(block.data, span, ADDRESS, "q", True) for row in batch.to_pylist()]


@pytest.mark.parametrize("seed", range(18))
def test_bulk_rows_of_a_page_equal_its_records_rows(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)

    async def main() -> None:
        pages = Pages(tmp_path, rnd)
        # every record A's on some seeds: whole spans of one queue's records (taken at once)
        pages.fill(rnd.randrange(20, 120), ((A,),) if seed % 3 == 0 else ((A,), (B,), (A, B)))
        await pages.pages.flush()
        if rnd.random() < 0.4:  # an earlier run's pages: its non-persistent records are gone
            await pages.pages.close()
            pages.open()
            pages.store.recover([A, B], [], [], [])
        for queue_id in (A, B):
            queue = pages.store.queue(queue_id)
            taken = []
            for _ in range(rnd.randrange(0, 15)):
                entry = queue.take()
                if entry is None:
                    break
                taken.append(entry)
            for page_no, ordinal, _record in taken:
                if rnd.random() < 0.6:
                    queue.acknowledge(page_no, ordinal, journal=False)
            if (entry := queue.peek()) is not None and rnd.random() < 0.5:
                queue.claim_unread(entry[0], entry[1] + rnd.randrange(1, 3))
            if rnd.random() < 0.5 and (numbers := list(queue.pages_from(queue.position()[0]))):
                # damage found later took a record of some page
                queue.records_lost(rnd.choice(numbers), 1, frozenset({rnd.randrange(0, 60)}))
            paged = PagedRange(*queue_plan(pages.store, queue_id))
            last = next(pages.ids)
            for page_no, first in paged.pages:
                for _ in range(4):
                    ordinal = first + rnd.choice((0, 0, 1, 3))
                    after = rnd.choice((0, rnd.randrange(last)))
                    upto = rnd.choice((None, rnd.randrange(after, last + 1)))
                    expected = rows_of_records(paged, page_no, ordinal, after, upto)
                    assert rows_of_blocks(paged, page_no, ordinal, after, upto) == expected, (
                        queue_id, page_no, ordinal, after, upto)
        await pages.pages.close()

    asyncio.run(main())


@pytest.mark.parametrize("routes", [((A,),), ((A, B),), ((A,), (A, B))])
def test_a_backlog_of_one_queue_is_shipped_as_whole_spans_decoded_to_the_same_rows(
        tmp_path: Path, routes: tuple[tuple[int, ...], ...]) -> None:
    """Records routed to one queue (alone, or with another queue of a multicast address),
    transactions decided and not among them: the spans a `pages=raw` answer ships as they
    are, decoded by its reader to the records' rows."""
    rnd = random.Random(7)

    async def main() -> None:
        pages = Pages(tmp_path, rnd)
        pages.fill(300, routes)
        await pages.pages.flush()
        WHOLE_SPANS.clear()
        for queue_id in {queue for route in routes for queue in route}:
            paged = PagedRange(*queue_plan(pages.store, queue_id))
            for page_no, first in paged.pages:
                expected = rows_of_records(paged, page_no, first, 0, None)
                assert rows_of_blocks(paged, page_no, first, 0, None) == expected
        assert sum(rows for rows, _txs in WHOLE_SPANS) >= 200, WHOLE_SPANS
        assert any(txs for _rows, txs in WHOLE_SPANS), "spans holding a transaction's records"
        await pages.pages.close()

    asyncio.run(main())


def queue_plan(store: FilePagedQueueStore, queue_id: int) -> tuple[object, ...]:
    """What `AddressPager.stream_plan` hands a range read, for one queue of the store."""
    book = store.queue(queue_id)
    page_no, ordinal = book.position()
    pages = tuple((number, ordinal if number == page_no else 0) for number in book.pages_from(page_no))
    return pages, book.read, store.is_pending, tuple(book.span(n) for n, _first in pages), book.frames


class _Queue:
    """What a range read asks of a queue besides its messages: its names."""

    address_name = ADDRESS
    name = "q"


def test_a_range_merges_messages_in_memory_among_a_pages_ids_in_id_order(tmp_path: Path) -> None:
    from pagemq.integrations.stream_api import _ArrowAnswer, _PartsAnswer, _RangeRows

    rnd = random.Random(5)

    async def main() -> None:
        pages = Pages(tmp_path, rnd)
        memory: list[Message] = []
        for n in range(60):  # every fifth id is a message held in memory, the rest paged
            if n % 5 == 4:
                message_id = next(pages.ids)
                memory.append(Message(message_id, ADDRESS, {"n": str(message_id)}, b"mem", persistent=True))
            else:
                pages.store.append([pages.record((A,))], summary_input=[None])
        await pages.pages.flush()
        paged = PagedRange(*queue_plan(pages.store, A))
        for held in (memory, [m for m in memory if m.message_id < 3], []):
            answers = []
            for answer in (_ArrowAnswer(), _PartsAnswer(ADDRESS, "q")):
                rows = _RangeRows(_Queue(), held, paged, 0, 1000, 0, None, True, answer)  # type: ignore[arg-type]
                parts = [answer.start()]
                served: list[int] = []
                while (chunk := rows.chunk()) is not None:
                    batches, got = chunk
                    parts += [bytes(data) for data in batches]
                    served += list(got.ids)
                parts.append(answer.end())
                table = answer_table(b"".join(parts), answer.content_type)
                expected = sorted([m.message_id for m in held]
                                  + [r.message_id for _p, _n, r in paged.records(0, None)])
                assert table.column("seq").to_pylist() == expected == served
                answers.append(table)
            assert answers[0].equals(answers[1])
        await pages.pages.close()

    asyncio.run(main())


def answer_table(data: bytes, content_type: str) -> pa.Table:
    """A whole range answer as a table: an Arrow IPC stream, or parts (spans decoded)."""
    if content_type == CONTENT_TYPE:
        return pa.Table.from_batches(list(read_parts(io.BytesIO(data), True)), ARROW_SCHEMA)
    return pa.ipc.open_stream(data).read_all()


def test_a_span_shipped_as_it_is_is_walked_unverified_and_its_reader_finds_the_damage(tmp_path: Path) -> None:
    """Damage inside a frame (its CRC no longer matches, its structure intact): a caller that
    ships whole spans gets the span as whole (the broker computes no CRC for it) and the
    reader of the span finds the damage (`SpanDamaged`: it asks for Arrow instead); a caller
    that would decode the span itself gets a `Fallback`, as before."""
    rnd = random.Random(3)

    async def main() -> None:
        pages = Pages(tmp_path, rnd, page_size=1 << 20)
        for _ in range(40):
            pages.store.append([pages.record((A,))], summary_input=[None])
        await pages.pages.flush()
        paged = PagedRange(*queue_plan(pages.store, A))
        (page_no, first), = paged.pages
        page = next(tmp_path.rglob("*.page"))
        data = bytearray(page.read_bytes())
        data[len(data) // 2] ^= 0xFF  # inside some record's bytes
        page.write_bytes(bytes(data))
        assert isinstance(next(page_blocks(paged.frames(page_no, first), first, 0, None,  # type: ignore[misc]
                                           paged.pending_tx)), Fallback)
        refused = page_blocks(paged.frames(page_no, first), first, 0, None, paged.pending_tx,  # type: ignore[misc]
                              shipped_as_is=lambda _first, _last: False)
        assert isinstance(next(refused), Fallback)
        block = next(page_blocks(paged.frames(page_no, first), first, 0, None, paged.pending_tx,  # type: ignore[misc]
                                 shipped_as_is=lambda _first, _last: True))
        assert isinstance(block, PagedBlock) and block.whole and len(block.ids) == 40
        with pytest.raises(SpanDamaged, match=f"span of page {page_no} from ordinal 0: damaged, frame CRC"):
            rows_of_span(block)
        await pages.pages.close()

    asyncio.run(main())

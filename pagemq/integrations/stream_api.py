"""HTTP endpoints of streaming readers (core/stream.py): offsets, range reads as Arrow IPC,
commits, durable subscriptions for a stream. What the Spark streaming source calls
(pagemq/spark/stream.py); docs/spark.md has the user's side and the wire ("What the source calls").

- `GET  /api/streams/{queue}/offsets?reader=R&after=S&max=N[&size=K]`: earliest, latest,
  and with `after` the end of the next range of at most N messages (and how many it holds;
  with `size` and `max`, also its slices, as `splits` would answer).
- `GET  /api/streams/{queue}/splits?after=S&upto=E&size=K`: the range cut into slices of
  about K messages: `[after, upto, from_page]` each.
- `GET  /api/streams/{queue}/read?reader=R&after=S&upto=E[&from_page=P][&selector=..]
  [&headers=false][&pages=raw]`: the range's messages, as an Arrow IPC stream of the read
  schema; with `pages=raw`, as parts (`spark/range_parts.py`) where the spans of page
  files that are all the queue's go as they are, for the reader to decode.
- `POST /api/streams/{queue}/commit` `{"reader": R, "offset": E, "selector": ..}`:
  acknowledge the reader's messages up to E (idempotent; an older offset is a no-op).
- `POST /api/streams/subscriptions` `{"address", "subscription", "client_id", "selector"}`:
  the durable subscription queue `CLIENT_ID.SUBSCRIPTION` of a multicast address, made on
  demand as a durable STOMP SUBSCRIBE makes it.

Slow work stays off the event loop: page files are read, messages decoded and Arrow batches
encoded in a worker thread, one chunk (`CHUNK_ROWS` rows or `CHUNK_BYTES` of bodies; of page
files, a span of whole frames decoded in bulk, `spark/paged_rows.py`) at a time, each
written to the response before the next is made, so a range of any size costs a chunk of
memory. The loop only takes the snapshot (which pages, which messages in memory)
and the commits, a bounded number of acknowledgements per turn.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import json
import logging
import time
from array import array
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pagemq.core.address import MULTICAST
from pagemq.core.errors import BrokerError, InvalidSelector
from pagemq.core.message import Message
from pagemq.core.message_codec import CodecError
from pagemq.core.selector import compile_filter
from pagemq.core.selector.properties import message_view
from pagemq.core.stream import PagedRange, commit_step, memory_messages, paged_range, reader_of
from pagemq.core.stream_ranges import plan_range, plan_splits
from pagemq.integrations.http_params import BadRequest, int_param

if TYPE_CHECKING:
    import pyarrow as pa

    from pagemq.core.broker import Broker
    from pagemq.core.queue import Queue
    from pagemq.core.selector import Selector
    from pagemq.core.stream_reader import StreamReader
    from pagemq.spark.paged_rows import PagedBlock

__all__ = ["DEFAULT_READER", "StreamCollector", "add_stream_routes"]

log = logging.getLogger("pagemq.http")

CHUNK_ROWS = 8192
CHUNK_BYTES = 8 << 20
COMMIT_TIMEOUT = 30.0
MAX_OFFSET = (1 << 63) - 1  # offsets are message ids, signed 64-bit as Spark's longs
ARROW_STREAM = "application/vnd.apache.arrow.stream"
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
DEFAULT_READER = "spark"

_BROKER_KEY: web.AppKey[Broker] = web.AppKey("stream_broker")
_LOCKS_KEY: web.AppKey[dict[str, asyncio.Lock]] = web.AppKey("stream_commit_locks")
_BUILDERS_KEY: web.AppKey[asyncio.Semaphore] = web.AppKey("stream_range_builders")
RANGE_BUILDERS = 2  # chunks of range reads built at once (see `_built`)


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _queue(request: web.Request) -> Queue:
    name = request.match_info["queue"]
    queue = request.app[_BROKER_KEY].queues.get(name)
    if queue is None or queue.deleted:
        raise web.HTTPNotFound(text=json.dumps({"error": f"no queue named {name!r}"}),
                               content_type="application/json")
    return queue


def _selector(text: str | None) -> Selector | None:
    try:
        return compile_filter(text or None)
    except InvalidSelector as exc:
        raise BadRequest(f"selector: {exc.message}") from None


def _ids(messages: list[Message]) -> Iterator[int]:
    return (message.message_id for message in messages)


def _paged_ids(paged: PagedRange | None, after: int, upto: int | None) -> Iterator[tuple[int, int]]:
    """(id, page) of the paged records in the range; runs in the worker thread."""
    if paged is None:
        return
    for page_no, _ordinal, record in paged.records(after, upto):
        yield record.message_id, page_no


# ----- offsets ---------------------------------------------------------------------------------


def _offsets(memory: list[int], paged: PagedRange | None, after: int | None, limit: int | None,
             size: int | None, undecided: int | None = None) -> dict[str, Any]:
    """Worker thread: earliest, latest, and the next range's end and size (and with `size`,
    its slices, as `splits` answers), from the pages' counts where they can be counted
    (core/stream_ranges.py). `undecided`: the lowest id of a commit not decided yet
    (`Address.undecided_from`): the range, and latest, end before it, or the reader's offset
    would pass its messages, which then could never be read."""
    first_paged = next(_paged_ids(paged, 0, None), None)
    candidates = [memory[0]] if memory else []
    if first_paged is not None:
        candidates.append(first_paged[0])
    earliest = min(candidates) if candidates else 0
    latest = max(memory[-1] if memory else 0, paged.last_id() if paged is not None else 0)
    if undecided is not None:
        latest = min(latest, undecided - 1)
    answer: dict[str, Any] = {"earliest": earliest, "latest": latest}
    if after is None:
        return answer
    if limit is None:
        answer.update(end=max(after, latest), messages=-1)  # not counted: a whole backlog
        return answer
    plan = plan_range(memory, paged, after, limit, size)
    if undecided is not None and plan.end >= undecided:  # a few milliseconds' wait: not counted
        answer.update(end=max(after, undecided - 1), messages=-1)
        return answer
    if plan.slices is not None:
        answer["splits"] = plan.slices
    answer.update(end=plan.end, messages=plan.messages)
    return answer


async def offsets(request: web.Request) -> web.Response:
    queue = _queue(request)
    try:
        after = int_param(request, "after", maximum=MAX_OFFSET)
        limit = int_param(request, "max")
        size = int_param(request, "size")
    except BadRequest as exc:
        return _json_error(400, str(exc))
    reader = reader_of(queue, request.query.get("reader") or DEFAULT_READER)
    memory = [m.message_id for m in memory_messages(queue, 0, None)]
    paged = paged_range(queue.cursor)
    address = request.app[_BROKER_KEY].addresses.get(queue.address_name)
    undecided = address.undecided_from() if address is not None else None
    figures = await asyncio.get_running_loop().run_in_executor(
        None, _offsets, memory, paged, after, limit, max(1, size) if size is not None else None, undecided)
    paged_count = queue.cursor.unread if queue.cursor is not None else 0
    return web.json_response({
        "queue": queue.name, "address": queue.address_name, "filter": queue.filter_text or None,
        "reader": reader.name, "committed": reader.committed,
        "queue_messages": queue.pending + queue.delivering + paged_count,
        **figures,
    })


# ----- splits ----------------------------------------------------------------------------------


async def splits(request: web.Request) -> web.Response:
    queue = _queue(request)
    try:
        after = int_param(request, "after", 0, maximum=MAX_OFFSET)
        upto = int_param(request, "upto", maximum=MAX_OFFSET)
        size = int_param(request, "size", 100_000)
    except BadRequest as exc:
        return _json_error(400, str(exc))
    assert after is not None and size is not None
    if upto is None or upto < after:
        return _json_error(400, "upto: required, and not below after")
    memory = [m.message_id for m in memory_messages(queue, after, upto)]
    paged = paged_range(queue.cursor)
    slices, count = await asyncio.get_running_loop().run_in_executor(
        None, plan_splits, memory, paged, after, upto, max(1, size))
    return web.json_response({"queue": queue.name, "splits": slices, "messages": count})


# ----- range reads -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Served:
    """What one chunk of a range read served: ids (ascending), and per page the ordinals and
    the highest id of its paged records (`StreamReader.note_served_page`)."""

    ids: array[int] = field(default_factory=lambda: array("q"))
    pages: dict[int, tuple[array[int], int]] = field(default_factory=dict)

    def paged(self, page_no: int, ordinal: int, message_id: int) -> None:
        self.ids.append(message_id)
        held = self.pages.get(page_no)
        if held is None:
            self.pages[page_no] = (array("q", (ordinal,)), message_id)
        else:
            held[0].append(ordinal)
            if message_id > held[1]:
                self.pages[page_no] = (held[0], message_id)

    def block(self, block: PagedBlock) -> None:
        self.ids.extend(block.ids)
        held = self.pages.get(block.page_no)
        if held is None:
            self.pages[block.page_no] = (array("q", block.ordinals), block.last_id)
        else:
            held[0].extend(block.ordinals)
            self.pages[block.page_no] = (held[0], max(held[1], block.last_id))

    def note(self, reader: StreamReader) -> None:
        reader.note_served(self.ids)
        for page_no, (ordinals, last_id) in self.pages.items():
            reader.note_served_page(page_no, ordinals, last_id)


_BLOCK = -1  # the ordinal slot of a merged item that is a block of paged rows, built
_SPAN = -2  # ... or a whole span of a page, to ship as it is (`pages=raw`)
_Item = tuple[int, int, int, "Message | bytes | tuple[PagedBlock, pa.RecordBatch] | PagedBlock", bool]


class _ArrowAnswer:
    """A range read's answer as one Arrow IPC stream (the default)."""

    content_type = ARROW_STREAM
    ships_spans = False

    def start(self) -> bytes:
        return _schema_bytes()

    def batch(self, batch: pa.RecordBatch) -> list[memoryview]:
        return [memoryview(batch.serialize())]  # (a view of Arrow's buffer: no copy)

    def span(self, block: PagedBlock) -> list[memoryview]:
        raise AssertionError("an Arrow answer ships no spans")

    def end(self) -> bytes:
        return _EOS

    def failure(self, problem: str) -> bytes | None:
        """What ends an answer that cannot go on; None: cut it (an Arrow stream cannot say)."""
        return None


class _PartsAnswer(_ArrowAnswer):
    """A range read's answer as parts, whole page spans shipped as they are (`pages=raw`)."""

    ships_spans = True

    def __init__(self, address: str, queue: str) -> None:
        from pagemq.spark import range_parts

        self.parts = range_parts
        self.content_type = range_parts.CONTENT_TYPE
        self.address, self.queue = address, queue

    def start(self) -> bytes:
        return self.parts.hello_part(self.address, self.queue)

    def batch(self, batch: pa.RecordBatch) -> list[memoryview]:
        payload = batch.serialize()
        return [memoryview(self.parts.batch_head(payload.size)), memoryview(payload)]

    def span(self, block: PagedBlock) -> list[memoryview]:
        span = self.parts.Span(block.page_no, block.version, block.ordinal, len(block.ids), block.first_id,
                               block.last_id, block.txids)
        return [memoryview(self.parts.span_head(span, len(block.data))), memoryview(block.data)]

    def end(self) -> bytes:
        return self.parts.end_part()

    def failure(self, problem: str) -> bytes | None:
        return self.parts.failure_part(problem)


class _RangeRows:
    """A range's rows in id order (memory and page files merged), encoded a chunk at a time
    in the worker thread.

    Paged records come in bulk, a page span at a time (`spark/paged_rows.py`), unless a
    selector is to look at each one, or a message in memory falls among a block's ids (its
    rows are then merged one by one); what the bulk path hands back (damage, a message that
    does not decode) is read record by record."""

    def __init__(self, queue: Queue, memory: list[Message], paged: PagedRange | None, after: int,
                 upto: int, from_page: int, selector: Selector | None, include_headers: bool,
                 answer: _ArrowAnswer) -> None:
        from pagemq.core.message_codec import decode_message
        from pagemq.spark.encoded_rows import EncodedRows

        self._decode = decode_message
        self.answer = answer
        self.address = queue.address_name
        self.queue_name = queue.name
        self.selector = selector
        self.include_headers = include_headers
        self.rows = EncodedRows(queue.address_name, queue.name, include_headers=include_headers)
        self._memory_ids = [m.message_id for m in memory]
        in_memory: Iterator[_Item] = ((m.message_id, 0, 0, m, True) for m in memory)
        on_disk = self._paged(paged, after, upto, from_page)
        self._merged = heapq.merge(in_memory, on_disk, key=lambda item: item[0])

    def _paged(self, paged: PagedRange | None, after: int, upto: int, from_page: int) -> Iterator[_Item]:
        from pagemq.spark.paged_rows import Fallback, page_blocks

        if paged is None:
            return
        bulk = paged.frames if self.selector is None else None
        # a whole span goes as it is unless a message in memory falls among its ids (below)
        shipped_as_is = self._apart if self.answer.ships_spans else None
        for page_no, first in paged.pages_from(from_page):
            frames = bulk(page_no, first) if bulk is not None else None
            if frames is None:
                if not (yield from self._records(paged, page_no, first, after, upto)):
                    return
                continue
            for block in page_blocks(frames, first, after, upto, paged.pending_tx,
                                     shipped_as_is=shipped_as_is):
                if isinstance(block, Fallback):
                    if not (yield from self._records(paged, page_no, block.ordinal, after, upto)):
                        return
                    break
                if block.ids and not self._apart(block.first_id, block.last_id):  # (merged in id order)
                    for message_id, ordinal, message, persistent in block.messages():
                        yield message_id, page_no, ordinal, bytes(message), persistent
                elif block.ids and block.whole and self.answer.ships_spans:
                    yield block.first_id, page_no, _SPAN, block, True
                elif block.ids:
                    batch = block.batch(self.address, self.queue_name, self.include_headers)
                    if batch is None:  # a message does not decode: as the record path has it
                        if not (yield from self._records(paged, page_no, block.ordinal, after, upto)):
                            return
                        break
                    yield block.first_id, page_no, _BLOCK, (block, batch), True
                    del batch  # (a suspended generator keeps its locals: not while the next is built)
                if block.ends_range:
                    return
                del block

    def _apart(self, first_id: int, last_id: int) -> bool:
        """Whether no message in memory falls among a block's ids (first to last)."""
        at = bisect.bisect_right(self._memory_ids, first_id)
        return at == len(self._memory_ids) or self._memory_ids[at] >= last_id

    @staticmethod
    def _records(paged: PagedRange, page_no: int, ordinal: int, after: int, upto: int
                 ) -> Generator[_Item, None, bool]:
        """One page's records one by one from `ordinal`; False once the range ended."""
        for found in paged.page_records(page_no, ordinal, after, upto):
            if found is None:
                return False
            index, record = found
            yield record.message_id, page_no, index, record.message, record.persistent
        return True

    def chunk(self) -> tuple[list[memoryview], _Served] | None:
        """The answer's next parts (record batches as IPC messages, or a span of a page as
        it is) and what they served; None at the end. Rows are built from the stored bytes
        in bulk (`EncodedRows`, or a page span's `PagedBlock`); a message in memory is
        encoded first, and a record is decoded only for a selector to look at."""
        from pagemq.storage.message_codec import encode_message

        rows = self.rows
        served = _Served()
        selector = self.selector
        answer = self.answer
        out: list[memoryview] = []
        for message_id, page_no, ordinal, item, persistent in self._merged:
            if ordinal in (_BLOCK, _SPAN):
                if rows.count:
                    out += answer.batch(rows.batch())
                if ordinal == _SPAN:
                    block = cast("PagedBlock", item)
                    out += answer.span(block)
                else:
                    block, batch = cast("tuple[PagedBlock, pa.RecordBatch]", item)
                    out += answer.batch(batch)
                served.block(block)
                return out, served
            if isinstance(item, Message):
                if selector is not None and not selector.matches_headers(message_view(item)):
                    continue
                rows.add(message_id, encode_message(item), item.persistent)
                served.ids.append(message_id)
            else:
                assert isinstance(item, bytes | memoryview)
                try:
                    if selector is not None and not selector.matches_headers(
                            message_view(self._decode(item, self.address))):
                        continue
                    rows.add(message_id, item, persistent)
                except CodecError as exc:
                    raise CodecError(f"message {message_id} on page {page_no} does not decode: "
                                     f"{exc}") from exc
                served.paged(page_no, ordinal, message_id)
            if rows.count >= CHUNK_ROWS or rows.bytes >= CHUNK_BYTES:
                break
        if rows.count:
            out += answer.batch(rows.batch())
        return (out, served) if out else None


def _schema_bytes() -> bytes:
    from pagemq.spark.schema import ARROW_SCHEMA

    return bytes(ARROW_SCHEMA.serialize().to_pybytes())


async def read_range(request: web.Request) -> web.StreamResponse:
    queue = _queue(request)
    try:
        import numpy  # noqa: F401  (pagemq[spark]: a broker without them serves no ranges)
        import pyarrow  # noqa: F401
    except ImportError:
        return _json_error(501, "range reads need pyarrow and numpy on the broker "
                                "(pip install 'pagemq[spark]')")
    try:
        after = int_param(request, "after", 0, maximum=MAX_OFFSET)
        upto = int_param(request, "upto", maximum=MAX_OFFSET)
        from_page = int_param(request, "from_page", 0)
        selector = _selector(request.query.get("selector"))
    except BadRequest as exc:
        return _json_error(400, str(exc))
    assert after is not None and from_page is not None
    if upto is None or upto < after:
        return _json_error(400, "upto: required, and not below after")
    include_headers = request.query.get("headers", "true").lower() != "false"
    pages = request.query.get("pages", "arrow").lower()
    if pages not in ("arrow", "raw"):
        return _json_error(400, f"pages: arrow or raw, not {pages!r}")
    answer = _PartsAnswer(queue.address_name, queue.name) if pages == "raw" else _ArrowAnswer()
    reader = reader_of(queue, request.query.get("reader") or DEFAULT_READER)
    reader.note_read(after, upto)
    rows = _RangeRows(queue, memory_messages(queue, after, upto), paged_range(queue.cursor), after, upto,
                      from_page, selector, include_headers, answer)
    response = web.StreamResponse(headers={"Content-Type": answer.content_type})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    try:
        await response.write(answer.start())
        while (chunk := await _built(request.app[_BUILDERS_KEY], loop, rows)) is not None:
            batches, served = chunk
            del chunk
            while batches:
                await response.write(batches.pop(0))  # (each let go once written)
            served.note(reader)  # written out (not necessarily read: a commit says so)
            del batches, served
        await response.write(answer.end())
        await response.write_eof()
    except ConnectionResetError:
        log.debug("range read of %r (%d, %d] ended by the client", queue.name, after, upto)
    except CodecError as exc:  # a stored message that does not decode: no read of it can go on
        log.error("range read of %r (%d, %d] failed: %s", queue.name, after, upto, exc)
        ending = answer.failure(str(exc))
        if ending is None:
            raise
        await response.write(ending)
        await response.write_eof()
    return response


async def _built(builders: asyncio.Semaphore, loop: asyncio.AbstractEventLoop, rows: _RangeRows
                 ) -> tuple[list[memoryview], _Served] | None:
    """The range's next chunk, built in a worker thread once one of the few builder turns is
    free: however many range reads run at once (a query's partitions, several queries), the
    broker holds the makings of `RANGE_BUILDERS` chunks, plus one built chunk per read on
    its way to the client. (Building is GIL-bound: more at once would not be faster.)"""
    async with builders:
        return await loop.run_in_executor(None, rows.chunk)


# ----- commits ---------------------------------------------------------------------------------


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


async def commit(request: web.Request) -> web.Response:
    queue = _queue(request)
    try:
        body = await _body(request)
        offset = body.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= MAX_OFFSET:
            raise BadRequest(f"offset: an integer from 0 to {MAX_OFFSET}, not {offset!r}")
        selector = _selector(body.get("selector"))
    except BadRequest as exc:
        return _json_error(400, str(exc))
    broker = request.app[_BROKER_KEY]
    reader = reader_of(queue, str(body.get("reader") or DEFAULT_READER))
    lock = request.app[_LOCKS_KEY].setdefault(queue.name, asyncio.Lock())
    acknowledged = kept = 0
    async with lock:
        deadline = time.monotonic() + COMMIT_TIMEOUT
        while not queue.deleted:
            progress = commit_step(queue, broker.ledger, reader, offset, selector)
            acknowledged += progress.acknowledged
            kept += progress.kept
            if progress.done:
                break
            if time.monotonic() > deadline:
                await broker.flush()
                return _json_error(503, f"commit to {offset} not finished in {COMMIT_TIMEOUT:g}s "
                                        f"({acknowledged} acknowledged so far): try again")
            await asyncio.sleep(0.001 if progress.waiting else 0)
        await broker.flush()
    return web.json_response({"queue": queue.name, "reader": reader.name, "committed": reader.committed,
                              "acknowledged": acknowledged, "kept": kept})


# ----- durable subscriptions -------------------------------------------------------------------


async def subscription(request: web.Request) -> web.Response:
    broker = request.app[_BROKER_KEY]
    try:
        body = await _body(request)
        address_name, name = body.get("address"), body.get("subscription")
        client_id = body.get("client_id") or DEFAULT_READER
        selector_text = body.get("selector") or None
        for key, value in (("address", address_name), ("subscription", name), ("client_id", client_id)):
            if not isinstance(value, str) or not value:
                raise BadRequest(f"{key}: a non-empty string, not {value!r}")
        _selector(selector_text)
    except BadRequest as exc:
        return _json_error(400, str(exc))
    queue_name = f"{client_id}.{name}"
    try:
        address = broker.ensure_address(str(address_name), MULTICAST)
        if address.routing_type != MULTICAST:
            return _json_error(409, f"address {address_name!r} is {address.routing_type}, not multicast")
        existing = broker.queues.get(queue_name)
        if existing is not None and (existing.filter_text or None) != selector_text:
            return _json_error(409, f"subscription {queue_name!r} exists with selector "
                                    f"{existing.filter_text!r}, not {selector_text!r}")
        queue = broker.ensure_queue(address, queue_name, MULTICAST, filter_text=selector_text)
    except BrokerError as exc:
        return _json_error(exc.http_status, exc.message)
    await broker.flush()
    return web.json_response({"queue": queue.name, "address": queue.address_name,
                              "filter": queue.filter_text})


# ----- wiring ----------------------------------------------------------------------------------


def _guarded(handler: Any) -> Any:
    async def run(request: web.Request) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except BadRequest as exc:
            return _json_error(400, str(exc))

    return run


def add_stream_routes(app: web.Application, broker: Broker) -> None:
    """Register the stream endpoints (before the catch-all 404 route)."""
    app[_BROKER_KEY] = broker
    app[_LOCKS_KEY] = {}
    app[_BUILDERS_KEY] = asyncio.Semaphore(RANGE_BUILDERS)
    app.router.add_post("/api/streams/subscriptions", _guarded(subscription))
    app.router.add_get("/api/streams/{queue}/offsets", _guarded(offsets))
    app.router.add_get("/api/streams/{queue}/splits", _guarded(splits))
    app.router.add_get("/api/streams/{queue}/read", _guarded(read_range))
    app.router.add_post("/api/streams/{queue}/commit", _guarded(commit))


class StreamCollector(Collector):
    """`/metrics`: each streaming reader's committed offset and lag, labelled by queue and
    reader (read from the queue views at each scrape, on the loop)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        labels = ["queue", "reader"]
        committed = GaugeMetricFamily("pagemq_stream_committed_offset",
                                      "Highest offset a streaming reader committed since the broker started",
                                      labels=labels)
        behind = GaugeMetricFamily("pagemq_stream_offsets_behind_latest",
                                   "Messages of the queue waiting above the streaming reader's "
                                   "committed offset",
                                   labels=labels)
        broker = self.broker
        for name in sorted(broker.queues):
            readers = broker.queues[name].stream_readers
            if not readers:
                continue
            for reader in broker.queue_info(name)["stream_readers"]:  # type: ignore[attr-defined]
                committed.add_metric([name, reader["name"]], reader["committed_offset"])
                behind.add_metric([name, reader["name"]], reader["offsets_behind_latest"])
        yield committed
        yield behind

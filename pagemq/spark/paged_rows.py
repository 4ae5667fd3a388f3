"""A streaming range read's paged records, decoded from page-file bytes in bulk: what the
broker's range reads serve from page files (integrations/stream_api.py).

Reading record by record (`PagedQueue.read`: a `PagedRecord` per record, then its row) costs
the broker most of its time per served message, and the broker is one process: its serving
rate bounds the whole stream. Here a page's frames come as byte spans
(`PagedQueue.frames`), are walked with `page_decode.locate` (one `struct` call and one CRC
per usual frame; no CRC for a span shipped as it is to a reader that verifies it), the
queue's rows picked from the located tuples, and the record batch built column-wise by
`page_decode.build_batch`, the bytes copied once, in C.

Which rows a block holds is what `PagedRange.page_records` would yield, in the same order:
the queue's records (`queue_id`; a record routed to several queues counts for each) still on
disk for it (`shown`), not of an undecided transaction, persistent ones only on a page of an
earlier run, with `after < id`, up to the first id above `upto`, where the range ends.
Anything the bulk path does not take exactly as the record path would (damage in a span, a
message whose codec fields do not add up) is handed back as `Fallback`: the caller reads
that span's records one by one instead, which reports damage and fails on a bad message as
every other reader does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import itemgetter

import pyarrow as pa

from pagemq.spark.page_decode import FLAGS, MESSAGE_ID, ORDINAL, QUEUE, Located, build_batch, locate
from pagemq.storage.paging.page_format import PERSISTENT, FrameDamage
from pagemq.storage.paging.page_store import PageFrames

__all__ = ["Fallback", "PagedBlock", "page_blocks"]


@dataclass(frozen=True, slots=True)
class Fallback:
    """Read the page's records one by one from `ordinal` on (the bulk path stopped there)."""

    ordinal: int


@dataclass(slots=True)
class PagedBlock:
    """Rows of one span of one page for a range read: located rows (`page_decode.Located`
    tuples and where each message ends in `data`), their ids and ordinals; `ends_range`:
    an id above the range's end came after them (nothing further is to be read);
    `ordinal`: the span's first, where a `Fallback` for it would read from. `whole`: every
    record `locate` finds in `data` (with the page's frame format `version`, from `ordinal`,
    keeping the transactions `txids`) is a row: a reader may ship the span as it is
    (`spark/range_parts.py`)."""

    page_no: int
    ordinal: int
    data: bytes
    rows: list[tuple]  # type: ignore[type-arg]
    ends: list[int]
    ids: list[int]
    ordinals: list[int]
    ends_range: bool
    whole: bool = False
    version: int = 0
    txids: tuple[int, ...] = ()

    @property
    def first_id(self) -> int:
        return self.ids[0]

    @property
    def last_id(self) -> int:
        return self.ids[-1]

    def batch(self, address: str, queue: str, include_headers: bool) -> pa.RecordBatch | None:
        """The rows as one record batch of the read schema (`seq` the message id); None if
        some message does not decode (read those records one by one instead)."""
        batch, problems = build_batch(self.data, self.rows, self.ends, address=address, seq_base=0,
                                      queue_name=lambda _queue: queue, include_headers=include_headers,
                                      seq_from_id=True)
        return None if problems else batch

    def messages(self) -> Iterator[tuple[int, int, memoryview, bool]]:
        """(id, ordinal, encoded message, persistent) of each row, for a caller merging them
        one by one with other messages."""
        located = Located(self.data, self.rows, self.ends)
        for i, row in enumerate(self.rows):
            yield row[MESSAGE_ID], row[ORDINAL], located.message(i), bool(row[FLAGS] & PERSISTENT)


class _Decided:
    """The transactions `locate` keeps: every one not undecided now."""

    __slots__ = ("pending",)

    def __init__(self, pending: Callable[[int], bool]) -> None:
        self.pending = pending

    def __contains__(self, txid: object) -> bool:
        return not self.pending(txid)  # type: ignore[arg-type]


_message_id, _ordinal, _queue = itemgetter(MESSAGE_ID), itemgetter(ORDINAL), itemgetter(QUEUE)


def _routed_to(queue: object, queue_id: int) -> bool:
    """Whether a row's `QUEUE` (an id, or the ids of a record routed to several queues of a
    multicast address) names the queue."""
    return queue == queue_id or (type(queue) is tuple and queue_id in queue)


def _all_served(rows: list[tuple], frames: PageFrames, ordinal: int, after: int,  # type: ignore[type-arg]
                upto: int | None) -> list[int] | None:
    """The ids of a span's rows when they are all the queue's to serve, as the row-by-row
    test in `page_blocks` would find one by one (the usual span of a backlog: records routed
    to the queue, alone or with other queues of a multicast address, none acknowledged,
    claimed or lost, all in the range), checked column-wise: a few calls instead of several
    per row. None when some row is not."""
    if not rows or frames.shown_from is None:
        return None
    if rows[0][ORDINAL] < ordinal or not frames.shown_from(rows[0][ORDINAL]):
        return None  # (ordinals only grow along a span)
    queue_id = frames.queue_id
    queues = set(map(_queue, rows))  # (a few distinct values: the span's routes)
    if queues != {queue_id} and not all(_routed_to(queue, queue_id) for queue in queues):
        return None
    ids = list(map(_message_id, rows))
    if min(ids) <= after or (upto is not None and max(ids) > upto):
        return None
    if frames.skip_non_persistent and not all(row[FLAGS] & PERSISTENT for row in rows):
        return None
    return ids


def page_blocks(frames: PageFrames, ordinal: int, after: int, upto: int | None,
                pending_tx: Callable[[int], bool], *,
                shipped_as_is: Callable[[int, int], bool] | None = None) -> Iterator[PagedBlock | Fallback]:
    """The queue's rows of one page from `ordinal` (see the module doc), a block per span
    (spans without rows give none); a `Fallback` ends the iteration when a span cannot be
    taken in bulk. Runs in a worker thread: it reads the page file.

    `shipped_as_is(first_id, last_id)`, when given, says whether the caller would ship a
    span whose records are all rows (`PagedBlock.whole`) as it is, to a reader that
    verifies every frame (`range_parts.span_batches`): such a span is walked without its
    CRCs (`locate(verify=False)`), which halves what the broker spends on it; a span that
    is not whole, or that the caller would decode itself, is walked again, verified, before
    any of its bytes are decoded here."""
    queue_id, shown = frames.queue_id, frames.shown
    assert shown is not None, "a queue's frames (PagedQueue.frames)"
    rows: list[tuple]  # type: ignore[type-arg]
    persistent_only = frames.skip_non_persistent
    decided = _Decided(pending_tx)
    hopeful = True  # the last span was whole: walk the next unverified first
    for first, start, end in frames.spans:
        data = frames.read(start, end - start)
        if not data:
            return  # the page was deleted meanwhile: every queue is done with it
        if len(data) != end - start:
            yield Fallback(first)
            return
        damage: list[FrameDamage] = []
        located = whole = None
        if shipped_as_is is not None and hopeful:  # (the reader verifies a span shipped)
            located = locate(data, 0, len(data), version=frames.version, ordinal=first,
                             committed=decided, damage=damage, verify=False)
            whole = None if damage else _all_served(located.rows, frames, ordinal, after, upto)
            if whole is None or not shipped_as_is(whole[0], whole[-1]):
                located, whole, damage = None, None, []
        if located is None:
            located = locate(data, 0, len(data), version=frames.version, ordinal=first,
                             committed=decided, damage=damage)
            if damage:
                yield Fallback(first)
                return
            whole = _all_served(located.rows, frames, ordinal, after, upto)
        # A page whose spans are not whole (records of other queues, acknowledged ones) is
        # walked once per span, verified, not twice: unverified first again once one is.
        hopeful = whole is not None
        if whole is not None:
            rows = located.rows
            yield PagedBlock(frames.page_no, first, data, rows, located.ends, whole,
                             list(map(_ordinal, rows)), False, True, frames.version,
                             tuple(sorted(set(located.txids.values()))))
            del data, located, rows, whole
            continue
        rows = []
        ends: list[int] = []
        ids: list[int] = []
        ordinals: list[int] = []
        ends_range = False
        for row, stop in zip(located.rows, located.ends, strict=True):
            index = row[ORDINAL]
            queue = row[QUEUE]
            if (index < ordinal or (queue != queue_id and not (type(queue) is tuple and queue_id in queue))
                    or not shown(index) or (persistent_only and not row[FLAGS] & PERSISTENT)):
                continue
            message_id = row[MESSAGE_ID]
            if message_id <= after:
                continue
            if upto is not None and message_id > upto:
                ends_range = True
                break
            rows.append(row)
            ends.append(stop)
            ids.append(message_id)
            ordinals.append(index)
        if rows or ends_range:
            yield PagedBlock(frames.page_no, first, data, rows, ends, ids, ordinals, ends_range)
        if ends_range:
            return
        # A suspended generator keeps its locals: let this span go before the next is read.
        del data, located, rows, ends, ids, ordinals

"""A streaming range read's paged records, decoded from page-file bytes in bulk: what the
broker's range reads serve from page files (integrations/stream_api.py).

Reading record by record (`PagedQueue.read`: a `PagedRecord` per record, then its row) costs
the broker most of its time per served message, and the broker is one process: its serving
rate bounds the whole stream. Here a page's frames come as byte spans
(`PagedQueue.frames`), are walked with `page_decode.locate` (column-wise; no CRC for a span
shipped as it is to a reader that verifies it), the queue's rows picked from the located
columns, and the record batch built column-wise by `page_decode.build_batch`, the bytes
copied once, in C.

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
from typing import Any

import numpy as np
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
    """Rows of one span of one page for a range read: the located rows (`page_decode.Located`,
    over the span's bytes `data`), their ids and ordinals; `ends_range`: an id above the
    range's end came after them (nothing further is to be read); `ordinal`: the span's
    first, where a `Fallback` for it would read from. `whole`: every record `locate` finds
    in `data` (with the page's frame format `version`, from `ordinal`, keeping the
    transactions `txids`) is a row: a reader may ship the span as it is
    (`spark/range_parts.py`)."""

    page_no: int
    ordinal: int
    located: Located
    ids: list[int]
    ordinals: list[int]
    ends_range: bool
    whole: bool = False
    version: int = 0
    txids: tuple[int, ...] = ()

    @property
    def data(self) -> bytes | memoryview:
        """The span's bytes (a shipped span goes as they are)."""
        return self.located.data

    @property
    def first_id(self) -> int:
        return self.ids[0]

    @property
    def last_id(self) -> int:
        return self.ids[-1]

    def batch(self, address: str, queue: str, include_headers: bool) -> pa.RecordBatch | None:
        """The rows as one record batch of the read schema (`seq` the message id); None if
        some message does not decode (read those records one by one instead)."""
        batch, problems = build_batch(self.located, address=address, seq_base=0,
                                      queue_name=lambda _queue: queue, include_headers=include_headers,
                                      seq_from_id=True)
        return None if problems else batch

    def messages(self) -> Iterator[tuple[int, int, memoryview, bool]]:
        """(id, ordinal, encoded message, persistent) of each row, for a caller merging them
        one by one with other messages."""
        flags = self.located.columns[FLAGS].tolist()
        for i, (message_id, ordinal) in enumerate(zip(self.ids, self.ordinals, strict=True)):
            yield message_id, ordinal, self.located.message(i), bool(flags[i] & PERSISTENT)


class _Decided:
    """The transactions `locate` keeps: every one not undecided now."""

    __slots__ = ("pending",)

    def __init__(self, pending: Callable[[int], bool]) -> None:
        self.pending = pending

    def __contains__(self, txid: object) -> bool:
        return not self.pending(txid)  # type: ignore[arg-type]


def _routed_to(queues: np.ndarray[Any, Any], queue_id: int) -> np.ndarray[Any, Any]:
    """Whether each row's `QUEUE` (an id, or the ids of a record routed to several queues of
    a multicast address) names the queue."""
    if queues.dtype != object:
        routed: np.ndarray[Any, Any] = queues == queue_id
        return routed
    values = queues.tolist()
    routes = {queue: queue == queue_id or (type(queue) is tuple and queue_id in queue)
              for queue in set(values)}  # (a few distinct values: the span's routes)
    return np.fromiter(map(routes.__getitem__, values), bool, len(values))


def _all_served(located: Located, frames: PageFrames, ordinal: int, after: int,
                upto: int | None) -> list[int] | None:
    """The ids of a span's rows when they are all the queue's to serve, as the row-by-row
    test in `page_blocks` would find (the usual span of a backlog: records routed to the
    queue, alone or with other queues of a multicast address, none acknowledged, claimed or
    lost, all in the range), checked column-wise. None when some row is not."""
    if not len(located) or frames.shown_from is None:
        return None
    columns = located.columns
    first = int(columns[ORDINAL][0])
    if first < ordinal or not frames.shown_from(first):
        return None  # (ordinals only grow along a span)
    if not _routed_to(columns[QUEUE], frames.queue_id).all():
        return None
    ids = columns[MESSAGE_ID]
    if int(ids.min()) <= after or (upto is not None and int(ids.max()) > upto):
        return None
    if frames.skip_non_persistent and not (columns[FLAGS] & PERSISTENT).all():
        return None
    return ids.tolist()  # type: ignore[no-any-return]


def _served(located: Located, frames: PageFrames, ordinal: int, after: int, upto: int | None
            ) -> tuple[np.ndarray[Any, Any], bool]:
    """The positions of a span's rows the queue is to serve, in order, and whether an id
    above the range's end came after them: what a record-by-record walk keeps (records
    routed to the queue, still shown to it, persistent ones only on a page of an earlier
    run, with `after < id`, up to the first such record whose id is above `upto`)."""
    columns = located.columns
    ids = columns[MESSAGE_ID]
    candidate = (columns[ORDINAL] >= ordinal) & _routed_to(columns[QUEUE], frames.queue_id)
    if frames.skip_non_persistent:
        candidate &= (columns[FLAGS] & PERSISTENT) != 0
    at = np.flatnonzero(candidate)
    shown = frames.shown
    assert shown is not None, "a queue's frames (PagedQueue.frames)"
    at = at[np.fromiter(map(shown, columns[ORDINAL][at].tolist()), bool, len(at))]
    later = ids[at] > after
    ends_range = False
    if upto is not None:
        beyond = np.flatnonzero(later & (ids[at] > upto))
        if len(beyond):
            at, later, ends_range = at[:beyond[0]], later[:beyond[0]], True
    return at[later], ends_range


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
    assert frames.shown is not None, "a queue's frames (PagedQueue.frames)"
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
            whole = None if damage else _all_served(located, frames, ordinal, after, upto)
            if whole is None or not shipped_as_is(whole[0], whole[-1]):
                located, whole, damage = None, None, []
        if located is None:
            located = locate(data, 0, len(data), version=frames.version, ordinal=first,
                             committed=decided, damage=damage)
            if damage:
                yield Fallback(first)
                return
            whole = _all_served(located, frames, ordinal, after, upto)
        # A page whose spans are not whole (records of other queues, acknowledged ones) is
        # walked once per span, verified, not twice: unverified first again once one is.
        hopeful = whole is not None
        if whole is not None:
            yield PagedBlock(frames.page_no, first, located, whole, located.columns[ORDINAL].tolist(),
                             False, True, frames.version, tuple(sorted(set(located.txids.values()))))
            del data, located, whole
            continue
        at, ends_range = _served(located, frames, ordinal, after, upto)
        if len(at) or ends_range:
            rows = located.take(at)
            yield PagedBlock(frames.page_no, first, rows, rows.columns[MESSAGE_ID].tolist(),
                             rows.columns[ORDINAL].tolist(), ends_range)
            del rows
        if ends_range:
            return
        # A suspended generator keeps its locals: let this span go before the next is read.
        del data, located, at

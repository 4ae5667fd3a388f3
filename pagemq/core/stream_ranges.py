"""Where a streaming reader's next range ends, and how a range is cut into slices (one Spark
task each), found from the queue's per-page counts instead of reading its records.

A range is `(after, upto]` of message ids (core/stream.py). Ids grow along the pages, so a
page whose bookkeeping can be counted (`PagedRange.spans`: its first and last id and how
many of its records are the queue's and on disk only) is taken as a whole: the range may
end at its last id, holding exactly those records, without one record of it read. Only the
pages that cannot be counted (records not yet readable, an undecided transaction) and the
page a range starts or ends inside are read, record by record, as before. Messages in
memory (ids in a sorted list) are merged in by id.

So `latestOffset` on a paged backlog costs a look at a few page counts however large its
batches, and at most one page read: with `maxMessagesPerTrigger` N, a batch of a backlog of
N messages or more holds exactly N (as Kafka's `maxOffsetsPerTrigger`), the page that
crosses N read to find the N-th; slices end at page boundaries, about `size` messages each
(a page holding more than `size` is read and cut exactly).

Runs in a worker thread (it may read page files); the plan it reads was taken on the loop.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pagemq.core.stream import PagedRange
    from pagemq.storage.paging.queue_store import PageSpan

__all__ = ["RangePlan", "Slicer", "plan_range", "plan_splits", "segments"]

Segment = tuple[int, int, int]
"""(last id, messages, page): one message (1; page 0 for one in memory), or a whole page
counted from its bookkeeping (its records for the queue, ending at the page's last id)."""


def segments(memory: Sequence[int], paged: PagedRange | None, after: int, upto: int | None,
             split: Callable[[PageSpan, int], bool]) -> Iterator[Segment]:
    """The range `(after, upto]` (upto None: no end) as segments in id order. `split(span,
    ahead)`: read that countable page record by record instead (asked just before it is
    yielded, so the caller can decide from what it has taken so far; `ahead` messages in
    memory come before it)."""
    at = bisect.bisect_right(memory, after)
    bound = upto if upto is not None else float("inf")

    def memory_to(limit: float) -> Iterator[Segment]:
        nonlocal at
        while at < len(memory) and memory[at] <= limit and memory[at] <= bound:
            yield memory[at], 1, 0
            at += 1

    if paged is not None:
        spans = paged.spans or (None,) * len(paged.pages)
        for (page_no, _first), span in zip(paged.pages, spans, strict=True):
            if span is not None:
                if span.last_id <= after:
                    continue
                if span.first_id > bound:
                    break
                if span.first_id > after and span.last_id <= bound:
                    if not span.records:
                        continue
                    if not split(span, bisect.bisect_right(memory, span.last_id, at) - at):
                        yield from memory_to(span.last_id)
                        yield span.last_id, span.records, page_no
                        continue
            # (Reading stops at an id above `upto`: so do the later pages, ids growing.)
            for _page, _ordinal, record in paged.records(after, upto, page_no, page_no):
                message_id = record.message_id
                yield from memory_to(message_id)
                yield message_id, 1, page_no
    yield from memory_to(bound)


class Slicer:
    """Cuts a range into `[after, upto, from_page]` slices (one Spark task each) of about
    `size` messages (None: no slicing), as even as whole pages allow: the segments are kept
    as they go by (three integers each: a whole page is one), then cut into as many slices
    as `size` asks for, each at the segment boundary nearest its share (what is left after
    the cut before it, shared evenly between the slices to come). Even slices keep
    both of Spark's cores busy to a batch's end: slices of `size` leave a short last one."""

    def __init__(self, after: int, size: int | None) -> None:
        self.after, self.size = after, size
        self.last_ids, self.counts, self.pages = array("q"), array("q"), array("q")
        self.total = 0

    def add(self, last_id: int, messages: int, page_no: int) -> None:
        if self.size is None:
            return
        self.last_ids.append(last_id)
        self.counts.append(messages)
        self.pages.append(page_no)
        self.total += messages

    def slices(self, upto: int) -> list[list[int]]:
        """The slices covering the range up to `upto`."""
        size = self.size or 1
        parts = max(1, -(-self.total // size))
        slices: list[list[int]] = []
        low, from_page, taken, in_slice, previous = self.after, 0, 0, 0, self.after
        cut_at = 0  # messages before the slice being filled

        def share() -> float:  # where it should end: what is left, shared evenly
            return cut_at + (self.total - cut_at) / (parts - len(slices))

        for last_id, messages, page_no in zip(self.last_ids, self.counts, self.pages, strict=True):
            end = share()
            if (in_slice and len(slices) + 1 < parts and taken + messages > end
                    and end - taken < taken + messages - end):
                slices.append([low, previous, from_page])  # nearer its share before this page
                low, in_slice, cut_at = previous, 0, taken
            if in_slice == 0:
                from_page = page_no
            taken += messages
            in_slice += messages
            previous = last_id
            if taken >= share() and len(slices) + 1 < parts:
                slices.append([low, last_id, from_page])
                low, in_slice, cut_at = last_id, 0, taken
        if in_slice or not slices:
            slices.append([low, upto, from_page])
        else:
            slices[-1][1] = upto
        return slices


@dataclass(slots=True)
class RangePlan:
    """The next range of at most `limit` messages: its end, how many it holds, its slices."""

    end: int
    messages: int
    slices: list[list[int]] | None


def plan_range(memory: Sequence[int], paged: PagedRange | None, after: int, limit: int,
               size: int | None) -> RangePlan:
    """Up to `limit` messages after `after` (see the module docstring for where it ends)."""
    slicer = Slicer(after, size)
    count, end = 0, after

    def split(span: PageSpan, ahead: int) -> bool:
        if size is not None and span.records > size:
            return True  # read it to cut it into slices of `size`
        before = count + ahead
        return before < limit < before + span.records  # read it to find the limit-th message

    for last_id, messages, page_no in segments(memory, paged, after, None, split):
        if count >= limit or count + messages > limit:
            break
        count += messages
        end = last_id
        slicer.add(last_id, messages, page_no)
    return RangePlan(end, count, slicer.slices(end) if size is not None else None)


def plan_splits(memory: Sequence[int], paged: PagedRange | None, after: int, upto: int, size: int
                ) -> tuple[list[list[int]], int]:
    """`(after, upto]` cut into slices of about `size` messages, and how many it holds."""
    slicer = Slicer(after, size)
    count = 0
    for last_id, messages, page_no in segments(memory, paged, after, upto,
                                               lambda span, _ahead: span.records > size):
        count += messages
        slicer.add(last_id, messages, page_no)
    return slicer.slices(upto), count

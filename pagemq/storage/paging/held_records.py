"""What page limits count: records in page files not yet acknowledged by every queue they
went to (`page-limit-messages`, and `page-limit-bytes` over their share of the page's bytes).

A page written in this run is counted by runs: stretches of consecutive records that went to
the same queues (one run per page for an anycast address or a topic whose subscriptions do
not change; a new run where a subscription comes or goes). A record is free once it is in
the acknowledged bitmap of every queue of its run, so a run counts its records outside the
AND of those bitmaps. A page with more than `MAX_RUNS` runs (subscriptions whose filters
take different records) is counted the simple way if each of its records went to one queue
(each queue's records on it less its acks), else whole until its file goes: which queues
hold a record would then take a count per record and queue.

After a restart the page's per-queue counts say how it was routed: one queue per record
(counted the simple way), every record to the same queues (one run), or else whole.

All of it is computed from the queues' cursor pages, which are the truth, and only for pages
something happened to since the count was last asked for: an acknowledgement costs a set
insertion, and the count is asked for by each send only while a page limit is set.

Artemis counts a page limit per subscription (a queue's messages in paging); when queues
acknowledge in order the two agree, and this count is never lower.

Loop-only, owned by `PagedQueues`, which keeps the page sizes, the queues holding each page
and the cursors this reads.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from pagemq.storage.paging.ordinal_set import OrdinalSet
from pagemq.storage.paging.page_format import PagedRecord

__all__ = ["HeldRecords"]


class _Page(Protocol):
    count: int
    acked: OrdinalSet


class _Cursor(Protocol):
    @property
    def pages(self) -> Mapping[int, _Page]: ...


MAX_RUNS = 32  # runs of differently routed records kept per page before counting it simply


class HeldRecords:
    """Records (and their bytes) held in page files, per page, summed for the address."""

    def __init__(self, sizes: Mapping[int, tuple[int, int]], cursors: Mapping[int, _Cursor],
                 holders: Mapping[int, Collection[int]]) -> None:
        self._sizes = sizes  # page -> (records, bytes) on disk
        self._cursors = cursors
        self._holders = holders  # page -> queues with records in it not done with it
        # Pages counted by runs: page -> [(first ordinal, its queues)], the ordinal after
        # the last record (pages written in this run), the route of the last record.
        self._runs: dict[int, list[tuple[int, frozenset[int]]]] = {}
        self._ends: dict[int, int] = {}
        self._last: dict[int, tuple[int, ...]] = {}
        # Pages of one-queue records counted as each queue's records less its acks.
        self._simple: set[int] = set()
        # Those two kinds: page -> (records, bytes) when last counted; `_stale` pages are
        # counted again when the total is next asked for.
        self._counted: dict[int, tuple[int, int]] = {}
        self._counted_records = 0
        self._counted_bytes = 0
        self._stale: set[int] = set()
        # Pages counted whole until they go.
        self._whole: set[int] = set()
        self._whole_records = 0
        self._whole_bytes = 0

    @property
    def records(self) -> int:
        if self._stale:
            self._refresh()
        return self._counted_records + self._whole_records

    @property
    def bytes(self) -> int:
        if self._stale:
            self._refresh()
        return self._counted_bytes + self._whole_bytes

    # -- how a page is counted ----------------------------------------------------------------

    def routed(self, page_no: int, first: int, records: Sequence[PagedRecord], *, fanout: bool) -> None:
        """`records` are about to be added to the page from ordinal `first` on; `fanout`: one
        of them went to several queues (the caller knows it cheaply)."""
        if page_no in self._whole:
            return
        runs = self._runs.get(page_no)
        if runs is None:
            if page_no in self._simple:
                if fanout:
                    self.count_whole(page_no)
                return
            runs = self._runs[page_no] = []  # a page of this run (appends never go to older ones)
        last = self._last.get(page_no)
        for index, record in enumerate(records):
            route = record.queue_ids
            if route == last:
                continue
            last = route
            if runs and len(route) == len(runs[-1][1]) and runs[-1][1].issuperset(route):
                continue
            runs.append((first + index, frozenset(route)))
            if len(runs) > MAX_RUNS:
                self._forget_runs(page_no)
                if fanout or any(len(queues) > 1 for _first, queues in runs):
                    self.count_whole(page_no)
                else:
                    self._simple.add(page_no)
                    self._stale.add(page_no)
                return
        if last is not None:
            self._last[page_no] = last
        self._ends[page_no] = first + len(records)
        self._stale.add(page_no)

    def recovered(self, page_no: int, queue_counts: Mapping[int, int], records: int) -> None:
        """A page of an earlier run: how it was routed, from its per-queue counts of its
        `records` (queues with none left out)."""
        if sum(queue_counts.values()) <= records:
            self._simple.add(page_no)  # each record went to one queue
        elif all(count == records for count in queue_counts.values()):
            self._runs[page_no] = [(0, frozenset(queue_counts))]  # each to all of them
        else:
            self.count_whole(page_no)
            return
        self._stale.add(page_no)

    def count_whole(self, page_no: int) -> None:
        if page_no in self._whole:
            return
        self._drop_counted(page_no)
        self._whole.add(page_no)
        records, size = self._sizes.get(page_no, (0, 0))
        self._whole_records += records
        self._whole_bytes += size

    # -- changes ------------------------------------------------------------------------------

    def resized(self, page_no: int, records: int, size: int) -> None:
        """The page's records on disk changed by `records` (`size` bytes); sizes are updated."""
        if page_no in self._whole:
            self._whole_records += records
            self._whole_bytes += size
        else:
            self._stale.add(page_no)

    def touched(self, page_no: int) -> None:
        """A queue's hold on records of the page changed (an ack, a completion, damage)."""
        self._stale.add(page_no)

    def forget(self, page_no: int) -> None:
        """The page is gone (sizes still hold it when this is called)."""
        if page_no in self._whole:
            self._whole.discard(page_no)
            records, size = self._sizes.get(page_no, (0, 0))
            self._whole_records -= records
            self._whole_bytes -= size
            return
        self._drop_counted(page_no)

    def _forget_runs(self, page_no: int) -> None:
        self._runs.pop(page_no, None)
        self._ends.pop(page_no, None)
        self._last.pop(page_no, None)

    def _drop_counted(self, page_no: int) -> None:
        self._forget_runs(page_no)
        self._simple.discard(page_no)
        self._stale.discard(page_no)
        counted = self._counted.pop(page_no, None)
        if counted is not None:
            self._counted_records -= counted[0]
            self._counted_bytes -= counted[1]

    # -- counting from the cursors ------------------------------------------------------------

    def _refresh(self) -> None:
        for page_no in self._stale:
            if page_no in self._whole:
                continue
            if page_no not in self._sizes:  # gone meanwhile
                counted = self._counted.pop(page_no, (0, 0))
                self._counted_records -= counted[0]
                self._counted_bytes -= counted[1]
                continue
            records, size = self._sizes[page_no]
            held = min(records, self._count(page_no, records))
            share = size * held // records if records > 0 else 0
            before = self._counted.get(page_no, (0, 0))
            self._counted_records += held - before[0]
            self._counted_bytes += share - before[1]
            self._counted[page_no] = (held, share)
        self._stale.clear()

    def _acked(self, queue_id: int, page_no: int) -> int | None:
        """The queue's acknowledged bitmap of the page; None once it is done with the page
        (completed, purged, deleted): every record of it acknowledged, as far as it goes."""
        cursor = self._cursors.get(queue_id)
        page = cursor.pages.get(page_no) if cursor is not None else None
        return page.acked.as_int() if page is not None else None

    def _count(self, page_no: int, records: int) -> int:
        """Records of the page that some queue they went to has not acknowledged."""
        runs = self._runs.get(page_no)
        if runs is None:  # one queue a record: each holder's records less its acks
            cursors = self._cursors
            return sum(max(0, page.count - page.acked.count)
                       for queue_id in self._holders.get(page_no, ())
                       if (cursor := cursors.get(queue_id)) is not None
                       and (page := cursor.pages.get(page_no)) is not None)
        end = self._ends.get(page_no)
        held = 0
        bitmaps: dict[int, int | None] = {}
        for index, (first, queues) in enumerate(runs):
            acked_by_all = -1  # every bit set
            for queue_id in queues:
                if queue_id not in bitmaps:
                    bitmaps[queue_id] = self._acked(queue_id, page_no)
                acked = bitmaps[queue_id]
                if acked is not None:
                    acked_by_all &= acked
                    if not acked_by_all:
                        break
            if acked_by_all == -1:
                continue  # every queue of the run is done with the page
            if end is None:  # a page of an earlier run: one run, persistent records only
                return max(0, records - acked_by_all.bit_count())
            stop = runs[index + 1][0] if index + 1 < len(runs) else end
            mask = ((1 << (stop - first)) - 1) << first
            held += stop - first - (acked_by_all & mask).bit_count()
        return held

"""What page limits count: records in page files not yet acknowledged by every queue they
went to (`page-limit-messages`, and `page-limit-bytes` over their share of the page's bytes).

A page is counted one of three ways, by how its records were routed:
- each record to one queue (an anycast address; a topic with one subscription): a count per
  page of records still held, moved by each acknowledgement;
- every record to the same queues (a topic's subscriptions without filters, the common case
  of fan-out): a record is free once it is in every one of those queues' acknowledged
  bitmaps, so the count is recomputed from them (an AND of a few bitmaps) when it is next
  asked for, never stored per record;
- anything else (subscriptions with filters taking different records): the whole page
  counts until its file goes, since which queues still hold a record would take a count per
  record and queue.

Artemis counts a page limit per subscription (a queue's messages in paging); for the cases
above both agree when queues acknowledge in order, and this count is never lower.

Loop-only, owned by `PagedQueues`, which keeps the page sizes and the cursors it reads.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from pagemq.storage.paging.ordinal_set import OrdinalSet

__all__ = ["HeldRecords"]


class _Page(Protocol):
    acked: OrdinalSet


class _Cursor(Protocol):
    @property
    def pages(self) -> Mapping[int, _Page]: ...


class HeldRecords:
    """Records (and their bytes) held in page files, per page, summed for the address."""

    def __init__(self, sizes: Mapping[int, tuple[int, int]], cursors: Mapping[int, _Cursor]) -> None:
        self._sizes = sizes  # page -> (records, bytes) on disk, kept by the owner
        self._cursors = cursors
        # Pages of one-queue records: page -> [records held, their share of the page's bytes].
        self._single: dict[int, list[int]] = {}
        self._single_records = 0
        self._single_bytes = 0
        # Pages whose every record went to the same queues: page -> those queues, and the
        # count last computed; `_stale` pages are computed again when the total is asked for.
        self._uniform: dict[int, frozenset[int]] = {}
        self._uniform_held: dict[int, tuple[int, int]] = {}
        self._uniform_records = 0
        self._uniform_bytes = 0
        self._stale: set[int] = set()
        # Pages counted whole until they go.
        self._whole: set[int] = set()
        self._whole_records = 0
        self._whole_bytes = 0

    @property
    def records(self) -> int:
        if self._stale:
            self._refresh()
        return self._single_records + self._uniform_records + self._whole_records

    @property
    def bytes(self) -> int:
        if self._stale:
            self._refresh()
        return self._single_bytes + self._uniform_bytes + self._whole_bytes

    # -- how a page is counted ----------------------------------------------------------------

    def routed(self, page_no: int, routes: Sequence[Collection[int]], *, fanout: bool) -> None:
        """Records routed to `routes` (each record's queues) are about to be added to the
        page; `fanout`: one of them went to several queues (the caller knows it cheaply)."""
        if page_no in self._whole:
            return
        key = self._uniform.get(page_no)
        if not fanout:
            if key is not None:
                self.count_whole(page_no)  # a one-queue record on a fan-out page
            return
        if key is None:
            if self._sizes.get(page_no, (0, 0))[0] > 0:
                self.count_whole(page_no)  # a fan-out record on a page of one-queue records
                return
            key = frozenset(routes[0])
            self.uniform(page_no, key)
        for route in routes:
            if len(route) != len(key) or not key.issuperset(route):
                self.count_whole(page_no)
                return

    def uniform(self, page_no: int, queue_ids: Collection[int]) -> None:
        """At start-up: every record of the page went to each of `queue_ids` (two or more)."""
        self._uniform[page_no] = frozenset(queue_ids)
        self._uniform_held[page_no] = (0, 0)
        self._stale.add(page_no)

    def count_whole(self, page_no: int) -> None:
        if page_no in self._whole:
            return
        self._drop_partial(page_no)
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
        elif page_no in self._uniform:
            self._stale.add(page_no)

    def changed(self, page_no: int, delta: int) -> None:
        """`delta` more (fewer) of the page's records are held by a queue they went to."""
        if page_no in self._uniform:
            self._stale.add(page_no)
            return
        if page_no in self._whole:
            return
        entry = self._single.get(page_no)
        if entry is None:
            if page_no not in self._sizes:
                return  # gone already
            entry = self._single[page_no] = [0, 0]
        records, size = self._sizes[page_no]
        held = max(0, min(records, entry[0] + delta))
        share = size * held // records if records > 0 else 0
        self._single_records += held - entry[0]
        self._single_bytes += share - entry[1]
        entry[0], entry[1] = held, share

    def forget(self, page_no: int) -> None:
        """The page is gone (sizes still hold it when this is called)."""
        if page_no in self._whole:
            self._whole.discard(page_no)
            records, size = self._sizes.get(page_no, (0, 0))
            self._whole_records -= records
            self._whole_bytes -= size
            return
        self._drop_partial(page_no)

    def _drop_partial(self, page_no: int) -> None:
        entry = self._single.pop(page_no, None)
        if entry is not None:
            self._single_records -= entry[0]
            self._single_bytes -= entry[1]
        if self._uniform.pop(page_no, None) is not None:
            records, size = self._uniform_held.pop(page_no)
            self._uniform_records -= records
            self._uniform_bytes -= size
            self._stale.discard(page_no)

    # -- the fan-out pages' counts ------------------------------------------------------------

    def _refresh(self) -> None:
        for page_no in self._stale:
            held = self._count(page_no)
            records, size = self._sizes.get(page_no, (0, 0))
            share = size * held // records if records > 0 else 0
            before = self._uniform_held[page_no]
            self._uniform_records += held - before[0]
            self._uniform_bytes += share - before[1]
            self._uniform_held[page_no] = (held, share)
        self._stale.clear()

    def _count(self, page_no: int) -> int:
        """Records of the page some queue it went to has not acknowledged: a queue done with
        the page (completed, purged, deleted) has no cursor page for it any more."""
        records = self._sizes.get(page_no, (0, 0))[0]
        acked_by_all: int | None = None
        for queue_id in self._uniform[page_no]:
            cursor = self._cursors.get(queue_id)
            page = cursor.pages.get(page_no) if cursor is not None else None
            if page is None:
                continue
            bits = page.acked.as_int()
            acked_by_all = bits if acked_by_all is None else acked_by_all & bits
            if not acked_by_all:
                return records
        if acked_by_all is None:
            return 0
        return max(0, records - acked_by_all.bit_count())

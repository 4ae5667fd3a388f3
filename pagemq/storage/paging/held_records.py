"""What page limits count: records in page files not yet acknowledged by every queue they
went to (`page-limit-messages`, and `page-limit-bytes` over their share of the page's bytes).

A page is counted one of three ways, by how its records were routed:
- each record to one queue (an anycast address; a topic with one subscription): the records
  its queues have not acknowledged (each queue's count on the page less its acks);
- every record to the same queues (a topic's subscriptions without filters, the common case
  of fan-out): a record is free once it is in every one of those queues' acknowledged
  bitmaps (an AND of a few bitmaps), so none is counted per record;
- anything else (subscriptions with filters taking different records): the whole page
  counts until its file goes, since which queues still hold a record would take a count per
  record and queue.

The first two are computed from the queues' cursor pages, which are the truth, and only for
pages something happened to since the count was last asked for: an acknowledgement costs a
set insertion, and the count is asked for by each send only while a page limit is set.

Artemis counts a page limit per subscription (a queue's messages in paging); for the cases
above both agree when queues acknowledge in order, and this count is never lower.

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


class HeldRecords:
    """Records (and their bytes) held in page files, per page, summed for the address."""

    def __init__(self, sizes: Mapping[int, tuple[int, int]], cursors: Mapping[int, _Cursor],
                 holders: Mapping[int, Collection[int]]) -> None:
        self._sizes = sizes  # page -> (records, bytes) on disk
        self._cursors = cursors
        self._holders = holders  # page -> queues with records in it not done with it
        # Pages whose every record went to the same queues (two or more): page -> those queues.
        self._uniform: dict[int, frozenset[int]] = {}
        # Pages counted from their queues' acks: page -> (records, bytes) when last counted;
        # `_stale` pages are counted again when the total is next asked for.
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

    def routed(self, page_no: int, records: Sequence[PagedRecord], *, fanout: bool) -> None:
        """`records` are about to be added to the page; `fanout`: one of them went to
        several queues (the caller knows it cheaply)."""
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
            key = frozenset(records[0].queue_ids)
            self.uniform(page_no, key)
        for record in records:
            route = record.queue_ids
            if len(route) != len(key) or not key.issuperset(route):
                self.count_whole(page_no)
                return

    def uniform(self, page_no: int, queue_ids: Collection[int]) -> None:
        """Every record of the page went to each of `queue_ids` (two or more)."""
        self._uniform[page_no] = frozenset(queue_ids)
        self._stale.add(page_no)

    def count_whole(self, page_no: int) -> None:
        if page_no in self._whole:
            return
        self._drop_counted(page_no)
        self._uniform.pop(page_no, None)
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
        self._uniform.pop(page_no, None)

    def _drop_counted(self, page_no: int) -> None:
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
            held = min(records, self._count(page_no))
            share = size * held // records if records > 0 else 0
            before = self._counted.get(page_no, (0, 0))
            self._counted_records += held - before[0]
            self._counted_bytes += share - before[1]
            self._counted[page_no] = (held, share)
        self._stale.clear()

    def _count(self, page_no: int) -> int:
        """Records of the page some queue holding it has not acknowledged (a queue done with
        the page, completed, purged or deleted, holds none of it)."""
        cursors = self._cursors
        pages = [page for queue_id in self._holders.get(page_no, ())
                 if (cursor := cursors.get(queue_id)) is not None
                 and (page := cursor.pages.get(page_no)) is not None]
        if page_no not in self._uniform:
            return sum(max(0, page.count - page.acked.count) for page in pages)
        if not pages:
            return 0
        acked_by_all = -1  # every bit set
        for page in pages:
            acked_by_all &= page.acked.as_int()
            if not acked_by_all:
                break
        return max(0, self._sizes.get(page_no, (0, 0))[0] - acked_by_all.bit_count())

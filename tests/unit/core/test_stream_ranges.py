"""Where a streaming range ends and how it is sliced, from per-page counts
(core/stream_ranges.py): countable pages are never read; the others are read record by
record; messages in memory are merged in by id."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from pagemq.core.stream import PagedRange
from pagemq.core.stream_ranges import plan_range, plan_splits
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.queue_store import PageSpan

PAGE = 100  # records per page; page n holds ids n*1000+1 .. n*1000+100


class Pages:
    """Pages 1..`count` of one queue; which pages were read is noted."""

    def __init__(self, count: int, countable: bool = True, *, uncountable: tuple[int, ...] = ()) -> None:
        self.numbers = list(range(1, count + 1))
        self.countable = countable
        self.uncountable = set(uncountable)
        self.reads: list[int] = []

    def read(self, page_no: int, first: int) -> Iterator[tuple[int, PagedRecord]]:
        self.reads.append(page_no)
        for ordinal in range(first, PAGE):
            yield ordinal, PagedRecord(page_no * 1000 + ordinal + 1, (1,), True, b"")

    def span(self, page_no: int) -> PageSpan | None:
        if not self.countable or page_no in self.uncountable:
            return None
        return PageSpan(page_no, page_no * 1000 + 1, page_no * 1000 + PAGE, PAGE)

    def plan(self) -> PagedRange:
        return PagedRange(tuple((n, 0) for n in self.numbers), self.read, lambda _txid: False,
                          tuple(self.span(n) for n in self.numbers))


def test_a_range_of_whole_pages_ends_at_a_page_boundary_without_reading_a_page():
    pages = Pages(10)
    plan = plan_range([], pages.plan(), 0, 400, 200)
    assert (plan.end, plan.messages) == (4100, 400)
    assert plan.slices == [[0, 2100, 1], [2100, 4100, 3]]
    assert pages.reads == []
    following = plan_range([], pages.plan(), plan.end, 400, 200)
    assert (following.end, following.messages) == (8100, 400) and pages.reads == []


def test_a_limit_holds_exactly_that_many_messages_reading_only_the_page_that_crosses_it():
    pages = Pages(10)
    plan = plan_range([], pages.plan(), 0, 450, 200)
    assert (plan.end, plan.messages) == (5050, 450)  # as Kafka's maxOffsetsPerTrigger
    assert plan.slices == [[0, 2100, 1], [2100, 3100, 3], [3100, 5050, 4]]  # 3 of ~150 (whole pages)
    assert pages.reads == [5]  # read to find the 450th
    # the next range starts inside page 5: that page is read, the next ones counted
    following = plan_range([], pages.plan(), plan.end, 450, 200)
    assert (following.end, following.messages) == (9100, 450) and pages.reads == [5, 5]


def test_a_limit_below_a_page_ends_exactly_inside_the_page_that_crosses_it():
    pages = Pages(10)
    plan = plan_range([], pages.plan(), 0, 30, None)
    assert (plan.end, plan.messages) == (1030, 30)
    assert pages.reads == [1]  # read to find the 30th
    following = plan_range([], pages.plan(), plan.end, 170, None)
    assert (following.end, following.messages) == (2100, 170) and pages.reads == [1, 1]
    short = plan_range([], pages.plan(), 0, 130, None)
    assert (short.end, short.messages) == (2030, 130) and pages.reads == [1, 1, 2]


def test_messages_in_memory_before_a_page_count_towards_the_limit_it_crosses():
    """(Helper 37: 20 messages in memory before page 1 were not counted when page 1 was
    asked whether it crossed the limit of 110: taken whole, it did not fit, and the batch
    ended at the 20th message.)"""
    pages = Pages(3)
    plan = plan_range(list(range(500, 520)), pages.plan(), 0, 110, None)
    assert (plan.end, plan.messages) == (1090, 110) and pages.reads == [1]


def test_uncountable_pages_are_read_and_memory_messages_merge_in_by_id():
    pages = Pages(3, uncountable=(2,))
    memory = [500, 2050, 9000]
    plan = plan_range(memory, pages.plan(), 0, 1000, None)
    assert plan.messages == 303 and plan.end == 9000
    assert pages.reads == [2]
    sliced, count = plan_splits(memory, pages.plan(), 0, 9000, 150)
    assert count == 303 and sliced[0][0] == 0 and sliced[-1][1] == 9000
    for low_slice, high_slice in itertools.pairwise(sliced):
        assert low_slice[1] == high_slice[0]


def test_slices_are_as_even_as_whole_pages_allow():
    pages = Pages(10)
    sliced, count = plan_splits([], pages.plan(), 0, 10100, 400)
    assert count == 1000 and pages.reads == []
    assert [high for _low, high, _page in sliced] == [3100, 7100, 10100]  # 300/400/300, not 400/400/200
    assert [page for _low, _high, page in sliced] == [1, 4, 8]
    sliced, _count = plan_splits([], pages.plan(), 0, 10100, 250)
    assert [high for _low, high, _page in sliced] == [3100, 5100, 8100, 10100]  # 300/200/300/200


def test_splits_cut_a_page_larger_than_the_slice_size_exactly():
    pages = Pages(2)
    sliced, count = plan_splits([], pages.plan(), 0, 2100, 40)
    assert count == 200 and pages.reads == [1, 2]
    assert [high for _low, high, _page in sliced] == [1040, 1080, 2020, 2060, 2100]
    assert [page for _low, _high, page in sliced] == [1, 1, 1, 2, 2]


def test_a_range_bounded_by_upto_counts_only_what_lies_below_it():
    pages = Pages(5)
    sliced, count = plan_splits([], pages.plan(), 1100, 3050, 1000)
    assert count == 150 and sliced == [[1100, 3050, 2]]
    assert pages.reads == [3]  # page 2 counted, page 3 read up to 3050

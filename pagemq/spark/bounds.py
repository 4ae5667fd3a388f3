"""Ranges on `seq`, `timestamp` and `priority` that a whole page file can be tested against.

Spark pushes the filters of a query down to the source (`DataSourceReader.pushFilters`);
those on these three columns become inclusive integer ranges (or value sets) here, and a
page file none of whose rows can fall inside them is not read at all. The file's side comes
from what is known without reading it: its page number bounds its `seq` values exactly
(`seq` is the record's position, see `page_scan`), and a valid page summary's selector
summary holds the page's lowest and highest JMSTimestamp and its JMSPriority values. A page
without one (the live page, a page rebuilt from its bytes) is always read. Spark evaluates
every filter again on the rows, so a file kept here is never a wrong answer, only work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pagemq.core.selector.summary import PageSummary, PropertyStats

__all__ = ["ORDINAL_BITS", "Bounds", "ColumnRange", "page_seq_range"]

# seq = page number << ORDINAL_BITS | ordinal (a page's ordinals are u32 in the format)
ORDINAL_BITS = 32


@dataclass(frozen=True, slots=True)
class ColumnRange:
    """Values a filter lets through: `low <= v <= high` (None = unbounded) and, when given,
    only the values in `values`. Timestamps are in microseconds since the epoch, UTC."""

    low: int | None = None
    high: int | None = None
    values: frozenset[int] | None = None

    def narrowed(self, low: int | None = None, high: int | None = None,
                 values: frozenset[int] | None = None) -> ColumnRange:
        """The range that lets through only what both this one and the given one do."""
        new_low = low if self.low is None else self.low if low is None else max(self.low, low)
        new_high = high if self.high is None else self.high if high is None else min(self.high, high)
        new_values = (values if self.values is None else self.values if values is None
                      else self.values & values)
        return ColumnRange(new_low, new_high, new_values)

    def meets(self, low: float, high: float, values: set[object] | None = None) -> bool:
        """Can a value in [low, high] (and in `values`, when the page lists them) pass?"""
        if self.low is not None and high < self.low:
            return False
        if self.high is not None and low > self.high:
            return False
        allowed = self.values
        if allowed is not None:
            if not any(low <= v <= high for v in allowed):
                return False
            if values is not None and not any(v in allowed for v in values):
                return False
        return True


@dataclass(frozen=True, slots=True)
class Bounds:
    """The pushed-down ranges of one read, by column (`seq`, `timestamp`, `priority`)."""

    columns: dict[str, ColumnRange] = field(default_factory=dict)

    def with_range(self, column: str, low: int | None = None, high: int | None = None,
                   values: frozenset[int] | None = None) -> Bounds:
        current = self.columns.get(column, ColumnRange())
        return Bounds({**self.columns, column: current.narrowed(low, high, values)})

    def admits(self, page_no: int, summary: PageSummary | None) -> bool:
        """False only when no row of the page can pass every range."""
        seq = self.columns.get("seq")
        if seq is not None and not seq.meets(*page_seq_range(page_no)):
            return False
        if summary is None:
            return True
        if summary.count == 0:
            return False
        timestamp = self.columns.get("timestamp")
        if timestamp is not None:
            stats = summary.stats("JMSTimestamp")
            if stats is not None and not timestamp.meets(*_scaled(stats, 1000)):
                return False
        priority = self.columns.get("priority")
        if priority is not None:
            stats = summary.stats("JMSPriority")
            if stats is not None and not priority.meets(*_scaled(stats, 1), stats.values):
                return False
        return True


def page_seq_range(page_no: int) -> tuple[int, int]:
    """The lowest and highest `seq` a record of page `page_no` can have."""
    first = page_no << ORDINAL_BITS
    return first, first | ((1 << ORDINAL_BITS) - 1)


def _scaled(stats: PropertyStats, factor: int) -> tuple[float, float]:
    """The property's numeric range times `factor` (unbounded when the page has none)."""
    low = stats.min_number if stats.min_number is not None else -math.inf
    high = stats.max_number if stats.max_number is not None else math.inf
    return low * factor, high * factor

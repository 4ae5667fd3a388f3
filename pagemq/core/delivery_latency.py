"""How long messages waited between being sent and being delivered: a fixed-bucket histogram.

Observed once per first delivery (`Consumer.deliver`), on the loop, so it must cost next to
nothing: one clock read, one bisect over a dozen bounds and two additions, no lock (only the
loop thread writes it; the metrics view reads plain ints on the same thread). Redeliveries
are not observed: their wait says more about the consumer that gave them back than about
the broker.

The send time is `Message.timestamp` (milliseconds since the epoch, stamped when the broker
accepted the message, kept in the journal and page files), so a message paged for an hour
and delivered after a restart counts its whole hour. The resolution is therefore about a
millisecond; the smallest bucket is 1 ms.
"""

from __future__ import annotations

from bisect import bisect_left
from time import time as _now

__all__ = ["BUCKET_BOUNDS_SECONDS", "DeliveryLatency"]

# Upper bounds (seconds) of the buckets, Prometheus' `le`; a last +Inf bucket follows.
BUCKET_BOUNDS_SECONDS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 3600.0,
)


class DeliveryLatency:
    """Counts of deliveries per wait bucket, their sum in milliseconds; loop-only writes."""

    __slots__ = ("_bounds_ms", "counts", "sum_ms")

    def __init__(self, bounds_seconds: tuple[float, ...] = BUCKET_BOUNDS_SECONDS) -> None:
        self._bounds_ms = tuple(bound * 1000.0 for bound in bounds_seconds)
        self.counts = [0] * (len(bounds_seconds) + 1)  # per bucket (not cumulative), +Inf last
        self.sum_ms = 0.0

    def observe(self, sent_ms: int) -> None:
        """One delivery of a message accepted at `sent_ms` (ms since the epoch)."""
        waited = _now() * 1000.0 - sent_ms
        if waited < 0.0:  # the wall clock stepped back since the send
            waited = 0.0
        self.counts[bisect_left(self._bounds_ms, waited)] += 1
        self.sum_ms += waited

    def snapshot(self) -> tuple[list[tuple[float, int]], int, float]:
        """(cumulative count per upper bound in seconds, +Inf last; count; sum in seconds)."""
        cumulative: list[tuple[float, int]] = []
        running = 0
        bounds = [ms / 1000.0 for ms in self._bounds_ms] + [float("inf")]
        for bound, count in zip(bounds, self.counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative, running, self.sum_ms / 1000.0

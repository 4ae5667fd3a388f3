"""Statistics for `pagemq perf`: latency histograms, per-role totals and per-phase rates.

Latencies are kept in a log-linear histogram instead of a list of samples because a long
run at tens of thousands of messages per second would otherwise ship millions of numbers
from every worker process to the parent; the histogram is bounded (a few thousand buckets),
merges by adding counts, and is exact below 2.048 ms and within 0.1 % above it (HdrHistogram's
idea with 11 significant bits). The maximum is tracked exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LatencyHistogram",
    "RoleStats",
    "RoleSummary",
    "percentile_of_sorted",
    "summarize",
]

_MANTISSA_BITS = 11
_MANTISSA_MASK = (1 << _MANTISSA_BITS) - 1
_EXACT_BELOW = 1 << _MANTISSA_BITS


def _bucket(micros: int) -> int:
    """The bucket key of a latency in microseconds; keys sort in the order of their values.

    Below 2048 µs the key is the value itself. Above, the key keeps the top 11 bits
    (mantissa, 1024..2047) and the shift: `mantissa | shift << 11`. Keys from larger shifts
    are larger, and within a shift they grow with the mantissa, so sorting keys sorts values.
    """
    if micros < _EXACT_BELOW:
        return micros
    shift = micros.bit_length() - _MANTISSA_BITS
    return (shift << _MANTISSA_BITS) | (micros >> shift)


def _bucket_value(key: int) -> int:
    """The smallest latency (µs) that falls into bucket `key`."""
    return (key & _MANTISSA_MASK) << (key >> _MANTISSA_BITS)


class LatencyHistogram:
    """Latency samples in nanoseconds, bucketed at microsecond resolution."""

    __slots__ = ("count", "counts", "max_ns")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.max_ns = 0

    def record(self, nanos: int) -> None:
        """Add one sample; negative samples (clock steps between hosts) count as zero."""
        if nanos < 0:
            nanos = 0
        micros = nanos // 1000
        key = micros if micros < _EXACT_BELOW else _bucket(micros)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        self.count += 1
        if nanos > self.max_ns:
            self.max_ns = nanos

    def merge(self, other: LatencyHistogram) -> None:
        counts = self.counts
        for key, number in other.counts.items():
            counts[key] = counts.get(key, 0) + number
        self.count += other.count
        self.max_ns = max(self.max_ns, other.max_ns)

    def percentile_ms(self, percent: float) -> float | None:
        """Nearest-rank percentile in milliseconds (None without samples).

        Nearest rank, not interpolation: p99 of 100 samples is the 99th smallest, a value
        that was really observed, which is what latency reports conventionally show.
        """
        if not self.count:
            return None
        if percent >= 100:
            return self.max_ns / 1e6
        rank = max(1, math.ceil(percent / 100 * self.count))
        seen = 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                return min(_bucket_value(key) * 1000, self.max_ns) / 1e6
        return self.max_ns / 1e6  # unreachable: the counts add up to self.count

    def max_ms(self) -> float | None:
        return self.max_ns / 1e6 if self.count else None


def percentile_of_sorted(values: list[float], percent: float) -> float:
    """Nearest-rank percentile of an already sorted list (the histogram's reference)."""
    if not values:
        raise ValueError("no values")
    rank = max(1, math.ceil(percent / 100 * len(values)))
    return values[min(rank, len(values)) - 1]


@dataclass
class RoleStats:
    """What the producers (or the consumers) of one worker did in one phase.

    `last_ns` is the wall-clock time (`time.time_ns()`, comparable across processes on one
    machine) of the last counted event: a RECEIPT, a send, or a MESSAGE. The phase rate is
    taken up to that moment, so waiting for the stop signal does not dilute it.
    """

    connections: int = 0
    messages: int = 0
    body_bytes: int = 0
    last_ns: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: RoleStats) -> None:
        self.connections += other.connections
        self.messages += other.messages
        self.body_bytes += other.body_bytes
        self.last_ns = max(self.last_ns, other.last_ns)
        self.latency.merge(other.latency)
        self.errors.extend(other.errors)


@dataclass(frozen=True)
class RoleSummary:
    """One line of the report: a role's totals, rates and latency percentiles in a phase."""

    phase: str
    role: str  # "producers" | "consumers"
    latency_kind: str  # "send-receipt" | "end-to-end"
    connections: int
    messages: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    errors: tuple[str, ...]
    complete: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "role": self.role,
            "connections": self.connections,
            "messages": self.messages,
            "seconds": round(self.seconds, 6),
            "msgs_per_s": round(self.msgs_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 3),
            "latency_kind": self.latency_kind,
            "latency_ms": None if self.p50_ms is None else {
                "p50": round(self.p50_ms, 3),
                "p99": round(self.p99_ms or 0.0, 3),
                "max": round(self.max_ms or 0.0, 3),
            },
            "errors": list(self.errors),
            "complete": self.complete,
        }


def summarize(
    phase: str, role: str, parts: Iterable[RoleStats], start_ns: int, *, complete: bool
) -> RoleSummary:
    """Merge the workers' stats for one role and turn them into rates.

    MB/s counts message bodies only, in 10**6 bytes, so figures compare across brokers whose
    frame overheads differ.
    """
    total = RoleStats()
    for part in parts:
        total.merge(part)
    seconds = (total.last_ns - start_ns) / 1e9 if total.messages and total.last_ns > start_ns else 0.0
    return RoleSummary(
        phase=phase,
        role=role,
        latency_kind="send-receipt" if role == "producers" else "end-to-end",
        connections=total.connections,
        messages=total.messages,
        seconds=seconds,
        msgs_per_s=total.messages / seconds if seconds > 0 else 0.0,
        mb_per_s=total.body_bytes / seconds / 1e6 if seconds > 0 else 0.0,
        p50_ms=total.latency.percentile_ms(50),
        p99_ms=total.latency.percentile_ms(99),
        max_ms=total.latency.max_ms(),
        errors=tuple(total.errors),
        complete=complete and not total.errors,
    )

"""How late the event loop runs: the measure of anything slow done on the loop thread.

Everything the broker does runs on one loop, so a callback that takes 80 ms delays every
connection's frames by 80 ms; end-to-end latency percentiles show that only indirectly.
A timer scheduled every `interval` notes how much later than due it runs (the loop was
busy meanwhile): the maximum, the stalls over `STALL` (50 ms), per second for the last
hour so a benchmark can ask for the figures of its own run (`figures(since=...)`), and a
log line for a stall over `log_over`. A stall is late wall-clock time; how much CPU the loop
thread itself used meanwhile (`busy`) tells work done on the loop (busy close to the lag)
from a process that waited: for the CPU on a loaded machine, or for the GIL held by one of
its other threads. asyncio's debug mode (slow-callback logging) says which callback was
slow but costs far too much to leave on; this costs 100 timer callbacks a second.

Loop-only, like the rest of the server layer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

log = logging.getLogger("pagemq")

__all__ = ["STALL", "LoopLag"]

STALL = 0.050  # seconds late: a stall
INTERVAL = 0.010
LOG_OVER = 0.250
RECENT_STALLS = 20
HISTORY_SECONDS = 3600


class _Second:
    """The samples of one wall-clock second."""

    __slots__ = ("busy_stalls", "lag_max", "samples", "second", "stalls")

    def __init__(self, second: int) -> None:
        self.second = second
        self.lag_max = 0.0
        self.samples = 0
        self.stalls = 0
        self.busy_stalls = 0


class LoopLag:
    def __init__(self, *, interval: float = INTERVAL, stall: float = STALL,
                 log_over: float | None = LOG_OVER) -> None:
        self.interval = interval
        self.stall = stall
        self.log_over = log_over
        self.started = time.time()
        self._seconds: deque[_Second] = deque(maxlen=HISTORY_SECONDS)
        # (unix time, lag, busy) of the last stalls
        self._recent: deque[tuple[float, float, float]] = deque(maxlen=RECENT_STALLS)
        self.lag_max = 0.0
        self.samples = 0
        self.stalls = 0
        self.busy_stalls = 0  # stalls during which the loop thread itself ran `stall` or more
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._cpu = 0.0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = self._loop.time() + self.interval
        self._cpu = time.thread_time()
        self._timer = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        lag = max(0.0, self._loop.time() - self._due)
        busy = max(0.0, time.thread_time() - self._cpu - self.interval) if lag >= self.stall else 0.0
        self.note(lag, time.time(), busy)
        self._schedule()

    def note(self, lag: float, now: float, busy: float = 0.0) -> None:
        """One sample: the loop ran a callback due at `now - lag` only at `now`; its thread
        used `busy` seconds of CPU beyond the interval meanwhile."""
        second = int(now)
        bucket = self._seconds[-1] if self._seconds else None
        if bucket is None or bucket.second != second:
            bucket = _Second(second)
            self._seconds.append(bucket)
        bucket.samples += 1
        self.samples += 1
        bucket.lag_max = max(bucket.lag_max, lag)
        self.lag_max = max(self.lag_max, lag)
        if lag >= self.stall:
            bucket.stalls += 1
            self.stalls += 1
            if busy >= self.stall:
                bucket.busy_stalls += 1
                self.busy_stalls += 1
            self._recent.append((now, lag, busy))
            if self.log_over is not None and lag >= self.log_over:
                log.warning("event loop stalled for %.0f ms, %.0f ms of it running on the loop thread",
                            lag * 1000, busy * 1000)

    def figures(self, since: float | None = None) -> dict[str, object]:
        """JSON-ready figures since start, or since the unix time `since` (whole seconds,
        within the last hour)."""
        if since is None:
            lag_max, stalls, busy, samples = self.lag_max, self.stalls, self.busy_stalls, self.samples
            start = self.started
        else:
            window = [b for b in self._seconds if b.second >= int(since)]
            lag_max = max((b.lag_max for b in window), default=0.0)
            stalls = sum(b.stalls for b in window)
            busy = sum(b.busy_stalls for b in window)
            samples = sum(b.samples for b in window)
            start = float(window[0].second) if window else since
        return {
            "since": round(start, 3),
            "sample_interval_ms": round(self.interval * 1000, 3),
            "stall_threshold_ms": round(self.stall * 1000, 3),
            "samples": samples,
            "lag_max_ms": round(lag_max * 1000, 3),
            "stalls": stalls,
            "busy_stalls": busy,
            "recent_stalls": [
                {"at": round(at, 3), "ms": round(lag * 1000, 3), "busy_ms": round(cpu * 1000, 3)}
                for at, lag, cpu in self._recent if since is None or at >= since],
        }

"""Give freed message memory back to the operating system after a backlog drains.

Message bodies over 512 bytes live in the C allocator's heap, not in Python's arenas, and
glibc keeps freed heap memory for reuse: a broker that held 400 MiB of messages and drained
them would go on showing 400 MiB of RSS. `malloc_trim(0)` returns those pages.

When to trim: the broker accounts for the messages it holds, so RSS minus that account is
the process's own overhead, which should stay near what it was at start-up. When it has
grown by more than `threshold`, memory was freed and kept (or is held outside the account,
such as a slow consumer's socket buffer, which a later trim will catch). A trim costs a few
milliseconds on a large heap, so one that frees little doubles the wait before the next,
up to a minute, unless the account has dropped by `threshold` since (more was freed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger("pagemq")

TRIM_THRESHOLD = 32 * 1024 * 1024
MIN_INTERVAL = 1.0
MAX_INTERVAL = 60.0


def _libc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where there is no such call (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


def process_rss() -> int | None:
    """This process's resident set size in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class MemoryTrimmer:
    """Call `check(accounted_bytes)` periodically (every second or so)."""

    def __init__(
        self,
        trim: Callable[[], object] | None = None,
        rss: Callable[[], int | None] = process_rss,
        *,
        threshold: int = TRIM_THRESHOLD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trim = trim if trim is not None else _libc_trim()
        self._rss = rss
        self._clock = clock
        self.threshold = threshold
        self.base_overhead: int | None = None  # RSS minus the account; see baseline()
        self.interval = MIN_INTERVAL
        self._next = 0.0
        self._accounted_at_trim = 0
        self.trims = 0

    def baseline(self, accounted: int) -> None:
        """Note the overhead of a broker that has started and holds only what it recovered."""
        rss = self._rss()
        if rss is not None:
            self.base_overhead = rss - accounted

    def check(self, accounted: int) -> bool:
        """True if it trimmed now."""
        if self._trim is None:
            return False
        rss = self._rss()
        if rss is None:
            return False
        overhead = rss - accounted
        if self.base_overhead is None or overhead < self.base_overhead:
            self.base_overhead = overhead
            return False
        now = self._clock()
        if self._accounted_at_trim - accounted >= self.threshold:
            self.interval, self._next = MIN_INTERVAL, now  # more freed since: try again now
        if overhead - self.base_overhead < self.threshold or now < self._next:
            return False
        self._accounted_at_trim = accounted
        self._trim()
        self.trims += 1
        after = self._rss()
        freed = rss - after if after is not None else 0
        # Little freed: what is over the base is in use (buffers, fragments); back off.
        self.interval = MIN_INTERVAL if freed >= self.threshold // 2 else min(self.interval * 2, MAX_INTERVAL)
        self._next = now + self.interval
        log.debug("malloc_trim: RSS %d -> %d bytes (accounted %d)", rss, after or 0, accounted)
        return True

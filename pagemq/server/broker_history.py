"""The broker's recent history: a ring of samples the web console plots (`GET
/api/broker/history`, docs/http-api.md).

A graph of the last 15 minutes must not depend on a browser having been open for them, nor
on a Prometheus server: the broker keeps the samples itself. Every `INTERVAL` seconds (5)
one sample is taken (memory against `global-max-size`, the fullest broker filesystem
against the disk limit, the journal's and page files' bytes, connections open, messages
added and acknowledged per second, the most the event loop ran late) and the ring keeps the
last `CAPACITY` (180: 15 minutes). Nothing is kept up to date for it between samples: a
sample reads figures that exist anyway, the one pass over the queues (the totals, a few
milliseconds with 10,000 queues) included, so it costs the message path nothing.

Loop-only, like the rest of the server layer.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["CAPACITY", "INTERVAL", "BrokerHistory"]

INTERVAL = 5.0
CAPACITY = 180

# (connections open now, opened since start, closed since start), as the connection log says
ConnectionFigures = Callable[[], tuple[int, int, int]]
# the event loop's lag figures since a unix time (server/loop_lag.py)
LoopFigures = Callable[[float | None], Mapping[str, object]]


class BrokerHistory:
    def __init__(self, broker: Broker, store_stats: Callable[[], Mapping[str, int]],
                 connections: ConnectionFigures, loop: LoopFigures | None = None, *,
                 interval: float = INTERVAL, capacity: int = CAPACITY,
                 clock: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.store_stats = store_stats
        self.connections = connections
        self.loop = loop
        self.interval = interval
        self.capacity = capacity
        self.clock = clock
        self.samples: deque[dict[str, object]] = deque(maxlen=capacity)
        self._last: tuple[float, int, int] | None = None  # (time, added, acknowledged)

    def sample(self) -> dict[str, object]:
        """Take one sample now and keep it (the oldest goes once the ring is full)."""
        now = self.clock()
        broker = self.broker
        memory = broker.memory
        totals = broker.totals()
        added, acknowledged = totals["messages_added"], totals["messages_acknowledged"]
        rate_in = rate_out = None
        if self._last is not None and now > self._last[0]:
            elapsed = now - self._last[0]
            rate_in = round(max(0, added - self._last[1]) / elapsed, 2)
            rate_out = round(max(0, acknowledged - self._last[2]) / elapsed, 2)
        sample: dict[str, object] = {
            "time": round(now, 3),
            "memory_used_bytes": memory.used_bytes,
            "memory_used_messages": memory.used_messages,
            **self._disk(),
            "journal_bytes": self.store_stats().get("bytes", 0),
            "page_bytes": totals["page_bytes"],
            "paging_addresses": totals["paging_addresses"],
            "connections": self.connections()[0],
            "messages_added": added,
            "messages_acknowledged": acknowledged,
            "in_per_second": rate_in,
            "out_per_second": rate_out,
            "loop_lag_max_ms": self._lag(self._last[0] if self._last is not None else None),
        }
        self._last = (now, added, acknowledged)
        self.samples.append(sample)
        return sample

    def _disk(self) -> dict[str, object]:
        """The fullest filesystem holding the journal or the page files, and where the disk
        limit in force puts the line on it (a percentage of that filesystem; None: no limit)."""
        view = self.broker.disk.view()
        listed = view.get("filesystems")
        filesystems = [fs for fs in listed if isinstance(fs, dict) and "error" not in fs] if isinstance(
            listed, list) else []
        if not filesystems:
            return {"disk_used_percent": None, "disk_limit_percent": None, "disk_full": view.get("disk_full")}
        fullest = max(filesystems, key=lambda fs: fs["used_percent"])
        limit: float | None = None
        min_free = view.get("min_disk_free")
        max_usage = view.get("max_disk_usage")
        total = fullest.get("total_bytes")
        if isinstance(min_free, int) and min_free >= 0 and isinstance(total, int) and total > 0:
            limit = round(max(0.0, 100.0 * (1 - min_free / total)), 2)
        elif isinstance(max_usage, int | float) and max_usage >= 0:
            limit = float(max_usage)
        return {"disk_used_percent": fullest["used_percent"], "disk_limit_percent": limit,
                "disk_full": view.get("disk_full")}

    def _lag(self, since: float | None) -> float | None:
        if self.loop is None:
            return None
        value = self.loop(since).get("lag_max_ms")
        return value if isinstance(value, int | float) else None

    def view(self) -> dict[str, object]:
        """What `GET /api/broker/history` answers: the limits the graphs are drawn against,
        then the samples, oldest first."""
        memory = self.broker.memory
        disk = self.broker.disk.view()
        return {
            "interval_seconds": self.interval,
            "capacity": self.capacity,
            "limits": {
                "global_max_size": memory.max_bytes,
                "global_max_messages": memory.max_messages,
                "max_disk_usage": disk.get("max_disk_usage"),
                "min_disk_free": disk.get("min_disk_free"),
            },
            "samples": list(self.samples),
        }

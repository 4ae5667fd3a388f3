"""What `GET /api/broker` says of the broker as a whole before its detailed figures: the
version, since when it runs, its connections and its message rates (docs/http-api.md).

An operator (or a script checking a deployment) asks "which version is this, how long has it
been up, how busy is it" first; those answers must not need /metrics and a Prometheus server.
Nothing here is kept up to date on the message path: the rates are the growth of the queues'
totals (one pass over the queues, as a history sample does) since the newest sample of the
broker's history at least a second old, else since the HTTP listener opened.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pagemq.version import package_version

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["BrokerSummary"]

# (connections open now, opened since start, closed since start), as the connection log says
ConnectionFigures = Callable[[], tuple[int, int, int]]
# `GET /api/broker/history`: {"samples": [{"time", "messages_added", "messages_acknowledged"...}]}
HistoryView = Callable[[], Mapping[str, object]]

MIN_RATE_WINDOW = 1.0  # seconds: a shorter window would make a rate of noise


class BrokerSummary:
    def __init__(self, broker: Broker, connections: ConnectionFigures | None = None,
                 history: HistoryView | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.connections = connections
        self.history = history
        self.clock = clock
        self.started_at = clock()
        totals = broker.totals()
        # the base of the rates until the history has a sample: what recovery brought back
        self._start_base = (self.started_at, totals["messages_added"], totals["messages_acknowledged"])
        self.version = package_version()

    def figures(self) -> dict[str, object]:
        now = self.clock()
        return {
            "version": self.version,
            "started_at": round(self.started_at, 3),
            "uptime_seconds": round(now - self.started_at, 3),
            **self._connections(),
            "rates": self._rates(now),
        }

    def _connections(self) -> dict[str, int | None]:
        """`connections` is the number open now, as in the history's samples."""
        open_now, opened, closed = self.connections() if self.connections is not None else (None, None, None)
        return {"connections": open_now, "connections_opened": opened, "connections_closed": closed}

    def _rates(self, now: float) -> dict[str, object]:
        totals = self.broker.totals()
        added, acknowledged = totals["messages_added"], totals["messages_acknowledged"]
        base_time, base_added, base_acked = self._base(now)
        elapsed = now - base_time
        rate_in = rate_out = None
        if elapsed >= MIN_RATE_WINDOW:
            rate_in = round(max(0, added - base_added) / elapsed, 2)
            rate_out = round(max(0, acknowledged - base_acked) / elapsed, 2)
        return {"in_per_second": rate_in, "out_per_second": rate_out,
                "window_seconds": round(elapsed, 3),
                "messages_added": added, "messages_acknowledged": acknowledged}

    def _base(self, now: float) -> tuple[float, int, int]:
        samples = self.history().get("samples") if self.history is not None else None
        if isinstance(samples, list):
            for sample in reversed(samples):
                when = sample.get("time") if isinstance(sample, Mapping) else None
                if isinstance(when, int | float) and now - when >= MIN_RATE_WINDOW:
                    added, acked = sample.get("messages_added"), sample.get("messages_acknowledged")
                    if isinstance(added, int) and isinstance(acked, int):
                        return float(when), added, acked
        return self._start_base

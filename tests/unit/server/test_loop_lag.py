"""The event-loop lag sampler: figures per window, and a real stall seen on a real loop."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from pagemq.server.loop_lag import LoopLag


def test_figures_count_stalls_and_the_maximum_per_window() -> None:
    lag = LoopLag(log_over=None)
    lag.note(0.001, 1000.2)
    lag.note(0.070, 1000.5)
    lag.note(0.002, 1001.1)
    lag.note(0.120, 1002.9)
    assert (lag.samples, lag.stalls, lag.lag_max) == (4, 2, 0.120)
    window = lag.figures(since=1001.0)
    assert (window["samples"], window["stalls"], window["lag_max_ms"]) == (2, 1, 120.0)
    assert window["recent_stalls"] == [{"at": 1002.9, "ms": 120.0}]
    whole = lag.figures()
    assert (whole["samples"], whole["stalls"], whole["lag_max_ms"]) == (4, 2, 120.0)


def test_a_blocking_callback_is_measured_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> LoopLag:
        lag = LoopLag(interval=0.005, log_over=0.06)
        lag.start(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        time.sleep(0.09)  # something slow on the loop thread
        await asyncio.sleep(0.05)
        lag.stop()
        return lag

    with caplog.at_level(logging.WARNING, logger="pagemq"):
        lag = asyncio.run(body())
    assert lag.stalls >= 1 and 0.07 <= lag.lag_max < 1.0
    assert lag.samples >= 10
    assert "event loop stalled for" in caplog.text

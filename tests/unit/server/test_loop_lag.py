"""The event-loop lag sampler: figures per window, and a real stall seen on a real loop."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

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
    assert window["recent_stalls"] == [{"at": 1002.9, "ms": 120.0, "busy_ms": 0.0}]
    whole = lag.figures()
    assert (whole["samples"], whole["stalls"], whole["lag_max_ms"]) == (4, 2, 120.0)


def _stalled(block: Callable[[], None]) -> LoopLag:
    async def body() -> LoopLag:
        lag = LoopLag(interval=0.005, log_over=0.06)
        lag.start(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        block()
        await asyncio.sleep(0.05)
        lag.stop()
        return lag

    return asyncio.run(body())


def _spin() -> None:
    """90 ms of the loop thread's CPU (more wall time on a loaded machine)."""
    end = time.thread_time() + 0.09
    while time.thread_time() < end:
        pass


def test_work_on_the_loop_is_a_busy_stall_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pagemq"):
        lag = _stalled(_spin)  # something slow running on the loop thread
    assert lag.stalls >= 1 and lag.lag_max >= 0.07
    assert lag.busy_stalls >= 1
    assert lag.samples >= 10
    assert "event loop stalled for" in caplog.text


def test_a_wait_off_cpu_is_a_stall_but_not_a_busy_one() -> None:
    lag = _stalled(lambda: time.sleep(0.09))  # the loop thread waits: the CPU, or the GIL
    assert lag.stalls >= 1 and lag.busy_stalls == 0

"""A `Scheduler` that runs nothing until the test says so, on a clock that moves only when
the test moves it (hypercorn tests its protocol classes against a fake loop the same way).

It is also enough of an event loop to host real `asyncio.Future`s (`create_future`,
`get_debug`, `call_exception_handler`): a future's done-callbacks are scheduled with
`call_soon`, so a store's write completing, a receipt becoming due and the session hearing
of it are separate steps the test can look between. A callback that raises fails the test
at once, instead of being logged as a loop would.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any


class ManualHandle:
    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self._ready: deque[ManualHandle] = deque()
        self._timers: list[tuple[float, int, ManualHandle]] = []
        self._order = itertools.count()
        self.unhandled: list[dict[str, Any]] = []

    # -- Scheduler ------------------------------------------------------------------------

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Callable[..., object], *args: Any, context: object = None) -> ManualHandle:
        handle = ManualHandle(self.now, callback, args)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any,
                   context: object = None) -> ManualHandle:
        handle = ManualHandle(self.now + delay, callback, args)
        heapq.heappush(self._timers, (handle.when, next(self._order), handle))
        return handle

    # -- what asyncio.Future asks of its loop ---------------------------------------------

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)  # type: ignore[arg-type]

    def get_debug(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.unhandled.append(context)

    # -- driving it -----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Callbacks waiting for the next turn (cancelled ones included)."""
        return len(self._ready)

    def run_ready(self, limit: int = 100_000) -> int:
        """Run callbacks until none is ready (those they schedule included); how many ran.
        More than `limit` means something reschedules itself for ever: that fails."""
        ran = 0
        while self._ready:
            handle = self._ready.popleft()
            if handle.cancelled:
                continue
            handle.callback(*handle.args)
            ran += 1
            if ran > limit:
                raise AssertionError(f"more than {limit} callbacks in a row: a busy loop")
        return ran

    def run_once(self) -> int:
        """One loop turn: the callbacks ready now, not those they schedule."""
        batch, self._ready = self._ready, deque()
        ran = 0
        for handle in batch:
            if not handle.cancelled:
                handle.callback(*handle.args)
                ran += 1
        return ran

    def advance(self, seconds: float) -> None:
        """Move the clock, firing each timer due on the way at its own time (and running
        whatever becomes ready), in the order they fall due."""
        target = self.now + seconds
        self.run_ready()
        while self._timers and self._timers[0][0] <= target:
            when, _order, handle = heapq.heappop(self._timers)
            if handle.cancelled:
                continue
            self.now = max(self.now, when)
            handle.callback(*handle.args)
            self.run_ready()
        self.now = target

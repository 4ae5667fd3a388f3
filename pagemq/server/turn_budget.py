"""How long the connections' frames may hold one turn of the event loop.

Every connection's frames are carried out on the one loop, and a loop turn runs every
callback that is ready (each socket read, each deferred share) before any timer or other
socket gets its turn. A burst of 1,000 ACKs in one socket read (each ACK also delivers the
next message to the consumer that made room) takes ~50 ms of CPU; two such reads in one
turn delay everybody by 100 ms (issue 14: loop lag 190 ms, 99 stalls of 50 ms or more
spent running on the loop thread, most of them in one `data_received`). A cap on frames
cannot bound that: an ACK, a persistent SEND to a queue with consumers and a SEND that pages
cost from a few to 200 microseconds each.

So the bound is time, and it is the turn's, not a callback's: the first callback of a turn
that carries out frames starts the turn's clock (`begin`), and each asks after every frame
whether the turn's `seconds` are spent (`spent`). A callback past them leaves its remaining
frames, in order, to a later turn (the session's deferred share). Each callback still carries
out `floor` frames however late the turn is, so every connection progresses in every turn
it is ready in, and a connection that was cut short comes back behind those that were
waiting (the loop's ready queue is first in, first out).

A new turn is noticed with one `call_soon` per turn that had frames: it runs at the start
of the next turn and lets the next `begin` start the clock again. The time costs one
`perf_counter` call per frame (~60 ns against 5-200 us of the frame's own work).

Loop-only.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["TURN_FLOOR", "TURN_SECONDS", "TurnBudget", "loop_budget"]

# Frames' share of a loop turn. The turn's other work (writing each connection's output,
# group-commit completions, page reads handed back, timers) comes on top, and a stall is
# 50 ms. Smaller shares cost throughput: every deferral is a loop turn, and every turn
# flushes each connection's output (many small writes).
TURN_SECONDS = 0.010
TURN_FLOOR = 8  # frames a callback carries out however much of the turn others spent


class _CallSoon(Protocol):
    def call_soon(self, callback: Callable[..., object], *args: Any) -> object: ...


class TurnBudget:
    """The time frames may take in one loop turn, shared by every connection on the loop.

    `seconds=None`: no time bound (only the callers' own frame caps apply), for a manual loop
    whose tests count frames, not microseconds."""

    __slots__ = ("_armed", "_clock", "_deadline", "_scheduler", "deferrals", "floor", "seconds", "turns")

    def __init__(self, scheduler: _CallSoon, seconds: float | None = TURN_SECONDS, *,
                 floor: int = TURN_FLOOR, clock: Callable[[], float] = time.perf_counter) -> None:
        self._scheduler = scheduler
        self.seconds = seconds
        self.floor = max(1, floor)  # a callback always progresses
        self._clock = clock
        self._armed = False  # this turn's clock runs (a call_soon will end the turn)
        self._deadline = 0.0
        self.turns = 0  # turns that carried out frames
        self.deferrals = 0  # callbacks that left frames to a later turn

    def begin(self) -> None:
        """A callback is about to carry out frames: start the turn's clock if it is the
        turn's first."""
        if not self._armed and self.seconds is not None:
            self._armed = True
            self.turns += 1
            self._deadline = self._clock() + self.seconds
            self._scheduler.call_soon(self._next_turn)

    def spent(self, done: int) -> bool:
        """Whether a callback that has carried out `done` frames must leave the rest to a
        later turn (it counts as a deferral when so)."""
        if done < self.floor or not self._armed or self._clock() < self._deadline:
            return False
        self.deferrals += 1
        return True

    def _next_turn(self) -> None:
        self._armed = False


_BUDGETS: weakref.WeakKeyDictionary[Any, TurnBudget] = weakref.WeakKeyDictionary()


def loop_budget(loop: _CallSoon) -> TurnBudget:
    """The one budget of `loop`, shared by every listener's connections on it."""
    budget = _BUDGETS.get(loop)
    if budget is None:
        budget = _BUDGETS[loop] = TurnBudget(loop)
    return budget

"""How long the connections' frames may hold one turn of the event loop.

Every connection's frames are carried out on the one loop, and a loop turn runs every
callback that is ready (each socket read, each deferred share) before any timer or other
socket gets its turn. A burst of 1,000 ACKs in one socket read (each ACK also delivers the
next message to the consumer that made room) takes ~50 ms of CPU; two such reads in one
turn delay everybody by 100 ms (issue 14: loop lag 190 ms, 99 stalls of 50 ms or more
spent running on the loop thread, most of them in one `data_received`). A cap on frames
cannot bound that: an ACK, a persistent SEND to a queue with consumers and a SEND that pages
cost from a few to 200 microseconds each.

So the bound is time, and it is the turn's: about `seconds` (20 ms) for the frames of every
connection together, shared out equally among the connections that have more to do than
that. Each callback that carries out frames calls `begin`, which gives it a slice of the
turn: `seconds` divided by the number of callbacks the previous turn cut short (at least
`MIN_SLICE`; callbacks that finish early, a read of a few frames, are not counted: they
leave their time to the busy ones, and fewer, longer slices mean fewer turns, and so fewer
small writes), and asks before every frame whether its slice is over (`spent`); then it
leaves the rest of its frames, in order, to a later turn (the session's deferred share).
Equal slices, not first come first served: with one shared deadline the connection whose
callback comes first in the loop's ready queue would take the whole turn, every turn (a
deferred share is queued again in the order it ran), and the others would crawl. A callback
still carries out `floor` frames whatever the clock says, so every connection progresses;
and no slice runs past 1.5 times `seconds` from the turn's first frame, however many
connections share the turn (then each gets its floor).

What a callback runs past its slice after its last frame (the refill its ACKs made, a group
of SENDs appended) is owed by its connection (`debt`) and taken off its next slices, so over
a few turns each connection still gets its share whatever its frames set off.

Once the turn is past 1.5 times `seconds` for everybody (`late`), a callback with a new read
only takes its bytes (parsed in the next turn), as it does while its connection's earlier
frames wait: the poll phase may hand one busy socket over in dozens of reads.

A new turn is noticed with one `call_soon` per turn that had frames: it runs at the start of
the next turn, counts the callbacks the turn that ended cut short, and lets the next `begin`
start the turn's clock again. The time costs one `perf_counter` call per frame (~60 ns
against 5-200 us of the frame's own work).

Loop-only.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["MAX_DEBT", "MIN_SLICE", "TURN_FLOOR", "TURN_SECONDS", "TurnBudget", "loop_budget"]

# Frames' share of a loop turn. The turn's other work (writing each connection's output,
# group-commit completions, page reads handed back, timers) comes on top, and a stall is
# 50 ms. Smaller shares cost throughput: every deferral is a loop turn, and every turn
# flushes each connection's output (many small writes). The broker's CPU for a 4+4 `pagemq
# perf` run against the tree before (2 rounds each, loaded machine, noise ~3 %): +4 % as
# now, as with no time bound (1 s); +8 % with 10 ms shared by all callbacks, not only the
# busy ones (benchmarks/README.md).
TURN_SECONDS = 0.020
MIN_SLICE = 0.0005  # a callback's slice however many share the turn (a frame is <= 0.2 ms)
TURN_FLOOR = 8  # frames a callback carries out however late its turn
MAX_DEBT = 2.0  # turns' time a connection can owe (see TurnBudget.debt)


class _CallSoon(Protocol):
    def call_soon(self, callback: Callable[..., object], *args: Any) -> object: ...


class TurnBudget:
    """The time frames may take in one loop turn, shared equally by the callbacks (one per
    connection with frames) that have more to do than fits.

    `seconds=None`: no time bound (only the callers' own frame caps apply), for a manual loop
    whose tests count frames, not microseconds."""

    __slots__ = ("_armed", "_clock", "_cut", "_deadline", "_done", "_owed", "_scheduler", "_slice",
                 "_started", "_turn_end", "deferrals", "floor", "seconds", "turns")

    def __init__(self, scheduler: _CallSoon, seconds: float | None = TURN_SECONDS, *,
                 floor: int = TURN_FLOOR, clock: Callable[[], float] = time.perf_counter) -> None:
        self._scheduler = scheduler
        self.seconds = seconds
        self.floor = max(1, floor)  # a callback always progresses
        self._clock = clock
        self._armed = False  # this turn's clock runs (a call_soon will end the turn)
        self._slice = seconds or 0.0  # a callback's share of the turn
        self._cut = 0  # callbacks this turn cut short
        self._turn_end = 0.0  # no slice runs past it
        self._deadline = 0.0  # the running callback's
        self._done = 0  # frames the running callback was let carry out
        self._started = 0.0  # the running callback's start
        self._owed = 0.0  # the debt it began with
        self.turns = 0  # turns that carried out frames
        self.deferrals = 0  # callbacks that left frames to a later turn

    def begin(self, debt: float = 0.0) -> None:
        """A callback is about to carry out frames: its slice of the turn starts, less the
        `debt` its connection ran past its slices before (`debt`)."""
        if self.seconds is None:
            return
        now = self._clock()
        if not self._armed:
            self._armed = True
            self.turns += 1
            self._turn_end = now + 1.5 * self.seconds
            self._scheduler.call_soon(self._next_turn)
        self._done = 0
        self._started = now
        self._owed = debt
        self._deadline = min(now + max(0.0, self._slice - debt), self._turn_end)

    def debt(self) -> float:
        """Asked as a callback ends: the time its connection now owes later turns. A
        callback can run past its slice after its last frame (the refill a read's ACKs
        made, a group of SENDs appended): what it ran past is taken off its next slices,
        so over a few turns each connection still gets its share (deficit round robin).
        At most `MAX_DEBT` turns' worth."""
        if self.seconds is None:
            return 0.0
        owed = self._owed + (self._clock() - self._started) - self._slice
        return min(owed, MAX_DEBT * self.seconds) if owed > 0.0 else 0.0

    def spent(self) -> bool:
        """Asked before each frame: whether the running callback must leave it (and the rest)
        to a later turn (it counts as a deferral when so)."""
        done = self._done
        if done < self.floor or not self._armed or self._clock() < self._deadline:
            self._done = done + 1
            return False
        self.deferrals += 1
        self._cut += 1
        return True

    def over(self) -> bool:
        """Asked between shares of frames by a callback with more to do: whether its slice
        is over, whatever it has done (it counts as cut short when so). Without a time
        bound: always, so a callback carries out one share."""
        if self.seconds is None:
            return True
        if self._armed and self._clock() >= self._deadline:
            self._cut += 1
            return True
        return False

    def late(self) -> bool:
        """Asked by a callback with new input before it parses any: whether the turn is over
        for every callback (`1.5 * seconds` since its first frame), so the input waits for
        the next turn (it counts as cut short when so)."""
        if self._armed and self._clock() >= self._turn_end:
            self._cut += 1
            return True
        return False

    def _next_turn(self) -> None:
        assert self.seconds is not None
        self._armed = False
        self._slice = max(MIN_SLICE, self.seconds / max(1, self._cut))
        self._cut = 0


_BUDGETS: weakref.WeakKeyDictionary[Any, TurnBudget] = weakref.WeakKeyDictionary()


def loop_budget(loop: _CallSoon) -> TurnBudget:
    """The one budget of `loop`, shared by every listener's connections on it."""
    budget = _BUDGETS.get(loop)
    if budget is None:
        budget = _BUDGETS[loop] = TurnBudget(loop)
    return budget

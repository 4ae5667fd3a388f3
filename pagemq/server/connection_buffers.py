"""What connections hold besides messages, charged to the one memory budget (issue 16).

A STOMP connection holds bytes outside any message account: frames written but not yet
taken by the socket (the transport's write buffer, and the session's output of this loop
turn), frames read and held (a blocked SEND's read-ahead, frames behind a COMMIT taking
effect), and a frame partly received (the parser's buffer). Each is bounded per connection
(write: the transport's high-water mark, past which the session stops producing; held
input: `READ_AHEAD_BYTES`, past which the socket is no longer read; a partial frame:
`max-frame-size`), but a thousand consumers of 1 MiB each are a gigabyte, so their sum draws
from `global-max-size` too (`MemoryAccountant.charge_part`): while the sockets are slow
to take what was written, read-back from page files and consumers' windows shrink.

Input is bounded in sum as well. Sixteen producers each sending a frame near
`max-frame-size` into a blocked address would otherwise hold sixteen such frames whatever
the budget. Once the input held by all connections passes `INPUT_SHARE` of the budget, a
connection holding more than `INPUT_ALLOWANCE` is no longer read (TCP holds its peer
back), except one at a time: the *holder*, which may finish its frame. Without it, the
half-received frames themselves would keep the share full, and nothing would complete to
free it. The holder keeps that right until its input falls back to the allowance (its
frame was carried out, or its blocked SEND went through), then the oldest waiting
connection gets it; once the total is back within the share, every waiting connection is
read again. A holder whose peer sends nothing for `HOLDER_PATIENCE` seconds (half a frame,
then silence) while others wait loses its turn to the next and waits at the back: a peer
that stalls cannot stop every other large frame for good. One whose SEND waits for memory
or disk keeps it (handing it on would let the next one's frame block beside it, and so
on). So input is bounded by the share, one frame, the allowance plus one read per
connection, and what stalled peers read while they held the turn (a frame each at most,
one turn per `HOLDER_PATIENCE`). Small frames never wait here: a connection holding less
than the allowance is always read.

Measured, not counted per write: the transport tells how much it buffers but not when it
drained, so a connection is measured after each flush and each read, and every connection
still charged something is measured again every `SWEEP_PERIOD` seconds (the release of a
drained buffer is at most that late; readers waiting for room are woken then).

Loop-only.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

from pagemq.core.memory import CONNECTION_BUFFER_PART

if TYPE_CHECKING:
    from pagemq.core.memory import MemoryAccountant
    from pagemq.server.stomp_session import Cancellable, Scheduler

__all__ = ["HOLDER_PATIENCE", "INPUT_ALLOWANCE", "INPUT_SHARE", "SWEEP_PERIOD",
           "ConnectionBuffers", "Measured"]

SWEEP_PERIOD = 0.1  # seconds between measurements of connections still charged something
INPUT_SHARE = 0.25  # of global-max-size: past it in sum, connections' input is held back
INPUT_ALLOWANCE = 64 * 1024  # input a connection may always hold
HOLDER_PATIENCE = 5.0  # seconds a holder's peer may send nothing before the next gets its turn


class Measured(Protocol):
    """A connection: the bytes it buffers now, in all and of its input; and a switch for
    reading its socket, which the budget turns off and on (`hold_input`)."""

    def buffered_bytes(self) -> int: ...

    def input_bytes(self) -> int: ...

    def hold_input(self, held: bool) -> None: ...

    @property
    def input_blocked(self) -> bool:
        """A SEND of it waits for memory or disk (it is not read on our account)."""
        ...


class ConnectionBuffers:
    """The charge of every connection's buffers against the memory budget, and the bound on
    their input in sum."""

    __slots__ = ("_charged", "_holder", "_holder_read", "_input", "_input_total", "_loop",
                 "_memory", "_sweep", "_waiting", "input_limit")

    def __init__(self, memory: MemoryAccountant, loop: Scheduler) -> None:
        self._memory = memory
        self._loop = loop
        self._charged: dict[Measured, int] = {}  # connections charged more than nothing
        self._input: dict[Measured, int] = {}  # connections holding input, and how much
        self._input_total = 0
        # Past this (bytes of input held by all connections) input is held back; -1: never.
        self.input_limit = int(memory.max_bytes * INPUT_SHARE) if memory.max_bytes >= 0 else -1
        self._holder: Measured | None = None  # may go on reading past the limit (see module)
        self._holder_read = 0.0  # when the holder was last read
        self._waiting: deque[Measured] = deque()  # not read, oldest first
        self._sweep: Cancellable | None = None

    @property
    def total(self) -> int:
        return sum(self._charged.values())

    @property
    def input_total(self) -> int:
        return self._input_total

    @property
    def waiting(self) -> int:
        """Connections not read because of the input bound."""
        return len(self._waiting)

    def measure(self, connection: Measured) -> None:
        """Charge (or release) the change in what `connection` buffers since last measured."""
        self._measure_input(connection)
        now = connection.buffered_bytes()
        charged = self._charged
        before = charged.get(connection, 0)
        if now == before:
            return
        self._memory.charge_part(CONNECTION_BUFFER_PART, now - before)
        if now:
            charged[connection] = now
            self._schedule_sweep()
        else:
            del charged[connection]

    def admit_input(self, connection: Measured) -> bool:
        """After a read: may `connection` be read on? If not, it waits (its socket is not
        read) until `hold_input(False)` is called on it."""
        held = self._input.get(connection, 0)
        limit = self.input_limit
        if held <= INPUT_ALLOWANCE or limit < 0 or self._input_total <= limit:
            return True
        if self._holder is None or self._holder is connection:
            self._holder = connection
            self._holder_read = self._loop.time()
            return True
        if connection not in self._waiting:
            self._waiting.append(connection)
        self._schedule_sweep()
        return False

    def gone(self, connection: Measured) -> None:
        """The connection closed: whatever it held is released."""
        before = self._charged.pop(connection, 0)
        if before:
            self._memory.charge_part(CONNECTION_BUFFER_PART, -before)
        self._input_total -= self._input.pop(connection, 0)
        if connection in self._waiting:
            self._waiting.remove(connection)
        if self._holder is connection:
            self._holder = None
        self._let_in()

    def _measure_input(self, connection: Measured) -> None:
        now = connection.input_bytes()
        before = self._input.get(connection, 0)
        if now == before:
            return
        self._input_total += now - before
        if now:
            self._input[connection] = now
        else:
            del self._input[connection]
        if now < before:
            if now <= INPUT_ALLOWANCE:
                if self._holder is connection:
                    self._holder = None
                elif self._waiting and connection in self._waiting:  # its held frames went
                    self._waiting.remove(connection)
                    connection.hold_input(False)
            self._let_in()

    def _let_in(self) -> None:
        """Read waiting connections again: all once the input is within the limit, else the
        oldest one becomes the holder when there is none."""
        waiting = self._waiting
        if not waiting:
            return
        if self._input_total <= self.input_limit:
            while waiting:
                waiting.popleft().hold_input(False)
        elif self._holder is None:
            self._holder = waiting.popleft()
            self._holder_read = self._loop.time()
            self._holder.hold_input(False)

    def _rotate(self) -> None:
        """A holder whose peer stalled while others wait goes to the back (see module)."""
        holder = self._holder
        if (holder is None or not self._waiting or holder.input_blocked
                or self._loop.time() - self._holder_read < HOLDER_PATIENCE):
            return
        self._holder = None
        holder.hold_input(True)
        self._waiting.append(holder)
        self._let_in()

    def _schedule_sweep(self) -> None:
        if self._sweep is None:
            self._sweep = self._loop.call_later(SWEEP_PERIOD, self._measure_all)

    def _measure_all(self) -> None:
        self._sweep = None
        for connection in list(self._charged):
            self.measure(connection)
        self._let_in()
        self._rotate()
        if (self._charged or self._waiting) and self._sweep is None:
            self._sweep = self._loop.call_later(SWEEP_PERIOD, self._measure_all)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

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

Partial frames are bounded in sum as well. Sixteen producers each sending a frame near
`max-frame-size` into a blocked address would otherwise hold sixteen such frames whatever
the budget. Once the input held by all connections (held frames and partial frames) passes
`INPUT_SHARE` of the budget, a connection in the middle of a frame larger than
`INPUT_ALLOWANCE` is no longer read (TCP holds its peer back), with two exceptions:

- One connection at a time, the *holder*, may finish its frame: without it the
  half-received frames themselves would keep the share full, and nothing would complete to
  free it. The turn ends with the frame; then the connection that waited longest goes on.
- Only a frame that may go somewhere gets the turn: a SEND to an address that would block
  it now (policy BLOCK at its limit, or the disk full under BLOCK; `Router.would_block`)
  waits, as the SEND itself would, unless frames behind it may make room (the connection
  holds deliveries or a transaction: its ACKs or COMMIT; a transactional SEND does not
  block). So a blocked producer never holds up a consumer that
  publishes elsewhere before it acknowledges (that would deadlock: the consumer's ACKs are
  what unblocks the producer), and frames into a blocked address stay in the sockets.

A connection's held frames count toward the total but never stop it being read: its ACKs,
which free memory, come behind them (the session reads on up to `READ_AHEAD_BYTES`). A
holder whose peer sends nothing for `HOLDER_PATIENCE` seconds while others wait loses its
turn and waits at the back, so a peer that stalls in the middle of a frame cannot stop every
other large frame; its partial frame stays (at most `max-frame-size` per connection).

Measured, not counted per write: the transport tells how much it buffers but not when it
drained, so a connection is measured after each flush and each read, and every connection
still charged something is measured again every `SWEEP_PERIOD` seconds (the release of a
drained buffer is at most that late; readers waiting for room are woken then, and waiting
connections whose address has room again are let in).

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
INPUT_SHARE = 0.25  # of global-max-size: past it in sum, large partial frames are held back
INPUT_ALLOWANCE = 64 * 1024  # a partial frame up to this is always read on
HOLDER_PATIENCE = 5.0  # seconds a holder's peer may send nothing before the next gets its turn


class Measured(Protocol):
    """A connection: the bytes it buffers now (in all, of its input, of a frame still coming),
    where that frame goes, and a switch for reading its socket (`hold_input`)."""

    def buffered_bytes(self) -> int: ...

    def input_bytes(self) -> int: ...

    def partial_bytes(self) -> int: ...

    def waits_for_room(self) -> bool:
        """The frame still coming is a SEND to an address that would hold it now."""
        ...

    def hold_input(self, held: bool) -> None: ...


class ConnectionBuffers:
    """The charge of every connection's buffers against the memory budget, and the bound on
    their partial frames in sum."""

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
        holder = self._holder
        if holder is connection:
            self._holder_read = self._loop.time()
            return True
        limit = self.input_limit
        if limit < 0 or self._input_total <= limit or connection.partial_bytes() <= INPUT_ALLOWANCE:
            return True
        if holder is None and not connection.waits_for_room():
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
        if now != before:
            self._input_total += now - before
            if now:
                self._input[connection] = now
            else:
                del self._input[connection]
        if ((self._holder is connection or (self._waiting and connection in self._waiting))
                and connection.partial_bytes() <= INPUT_ALLOWANCE):  # its frame is whole
            self._release(connection)
            self._let_in()
        elif now < before:
            self._let_in()

    def _release(self, connection: Measured) -> None:
        if self._holder is connection:
            self._holder = None
        else:
            self._waiting.remove(connection)
            connection.hold_input(False)

    def _let_in(self) -> None:
        """Read waiting connections again: all once the input is within the limit, else the
        oldest whose frame may go somewhere becomes the holder when there is none."""
        waiting = self._waiting
        if not waiting:
            return
        if self._input_total <= self.input_limit:
            while waiting:
                waiting.popleft().hold_input(False)
            return
        if self._holder is None:
            for connection in waiting:
                if not connection.waits_for_room():
                    waiting.remove(connection)
                    self._holder = connection
                    self._holder_read = self._loop.time()
                    connection.hold_input(False)
                    return

    def _rotate(self) -> None:
        """A holder whose peer stalled while others wait goes to the back (see module)."""
        holder = self._holder
        if (holder is None or not self._waiting
                or self._loop.time() - self._holder_read < HOLDER_PATIENCE):
            return
        self._holder = None
        self._let_in()
        if self._holder is None:  # nobody else may go now: it keeps its turn
            self._holder = holder
            return
        holder.hold_input(True)
        self._waiting.append(holder)

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

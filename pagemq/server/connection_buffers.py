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

Measured, not counted per write: the transport tells how much it buffers but not when it
drained, so a connection is measured after each flush and each read, and every connection
still charged something is measured again every `SWEEP_PERIOD` seconds (the release of a
drained buffer is at most that late; readers waiting for room are woken then).

Loop-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pagemq.core.memory import CONNECTION_BUFFER_PART

if TYPE_CHECKING:
    from pagemq.core.memory import MemoryAccountant
    from pagemq.server.stomp_session import Cancellable, Scheduler

__all__ = ["SWEEP_PERIOD", "ConnectionBuffers", "Measured"]

SWEEP_PERIOD = 0.1  # seconds between measurements of connections still charged something


class Measured(Protocol):
    """A connection: the bytes it buffers now, in all."""

    def buffered_bytes(self) -> int: ...


class ConnectionBuffers:
    """The charge of every connection's buffers against the memory budget."""

    __slots__ = ("_charged", "_loop", "_memory", "_sweep")

    def __init__(self, memory: MemoryAccountant, loop: Scheduler) -> None:
        self._memory = memory
        self._loop = loop
        self._charged: dict[Measured, int] = {}  # connections charged more than nothing
        self._sweep: Cancellable | None = None

    @property
    def total(self) -> int:
        return sum(self._charged.values())

    def measure(self, connection: Measured) -> None:
        """Charge (or release) the change in what `connection` buffers since last measured."""
        now = connection.buffered_bytes()
        charged = self._charged
        before = charged.get(connection, 0)
        if now == before:
            return
        self._memory.charge_part(CONNECTION_BUFFER_PART, now - before)
        if now:
            charged[connection] = now
            if self._sweep is None:
                self._sweep = self._loop.call_later(SWEEP_PERIOD, self._measure_all)
        else:
            del charged[connection]

    def gone(self, connection: Measured) -> None:
        """The connection closed: whatever it held is released."""
        before = self._charged.pop(connection, 0)
        if before:
            self._memory.charge_part(CONNECTION_BUFFER_PART, -before)

    def _measure_all(self) -> None:
        self._sweep = None
        for connection in list(self._charged):
            self.measure(connection)
        if self._charged and self._sweep is None:
            self._sweep = self._loop.call_later(SWEEP_PERIOD, self._measure_all)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

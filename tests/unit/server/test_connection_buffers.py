"""Connections' buffers are charged to the memory budget as they are measured, released when
they drain (seen at the next sweep) or the connection goes, and wake readers waiting for room
(server/connection_buffers.py). A manual loop moves the clock."""

from __future__ import annotations

from manual_loop import ManualLoop

from pagemq.core.memory import CONNECTION_BUFFER_PART as PART
from pagemq.core.memory import MemoryAccountant
from pagemq.server.connection_buffers import SWEEP_PERIOD, ConnectionBuffers


class Conn:
    def __init__(self) -> None:
        self.bytes = 0

    def buffered_bytes(self) -> int:
        return self.bytes


def test_a_buffer_is_charged_when_measured_and_released_at_the_sweep_after_it_drained() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=1000)
    buffers = ConnectionBuffers(memory, loop)
    conn = Conn()
    conn.bytes = 600
    buffers.measure(conn)
    assert memory.parts[PART] == memory.used_bytes == 600 and memory.used_messages == 0
    conn.bytes = 0  # the socket took it: nobody tells us but the next sweep
    assert memory.used_bytes == 600
    loop.advance(SWEEP_PERIOD)
    assert memory.parts[PART] == memory.used_bytes == 0 and buffers.total == 0
    loop.advance(10 * SWEEP_PERIOD)  # nothing charged: no sweep runs on
    assert loop.pending == 0


def test_buffers_fill_the_budget_for_readers_but_not_for_producers() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=1000)
    buffers = ConnectionBuffers(memory, loop)
    conn = Conn()
    conn.bytes = 1000
    buffers.measure(conn)
    assert memory.is_full()  # readers read nothing more
    assert not memory.messages_full() and not memory.would_exceed(500)  # producers go on
    woken: list[int] = []
    memory.wait_to_read(lambda: woken.append(1) or True)
    conn.bytes = 100
    loop.advance(SWEEP_PERIOD)
    assert woken == [1]  # room again: the waiting reader was woken


def test_a_closed_connection_releases_what_it_held() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=-1)
    buffers = ConnectionBuffers(memory, loop)
    first, second = Conn(), Conn()
    first.bytes, second.bytes = 300, 200
    buffers.measure(first)
    buffers.measure(second)
    assert memory.used_bytes == 500
    buffers.gone(first)
    assert memory.used_bytes == 200 and buffers.total == 200

"""Connections' buffers are charged to the memory budget as they are measured, released when
they drain (seen at the next sweep) or the connection goes, and wake readers waiting for room
(server/connection_buffers.py). A manual loop moves the clock."""

from __future__ import annotations

from manual_loop import ManualLoop

from pagemq.core.memory import CONNECTION_BUFFER_PART as PART
from pagemq.core.memory import MemoryAccountant
from pagemq.server.connection_buffers import HOLDER_PATIENCE, SWEEP_PERIOD, ConnectionBuffers

KIB, MIB = 1024, 1024 * 1024


class Conn:
    def __init__(self) -> None:
        self.bytes = 0

    def buffered_bytes(self) -> int:
        return self.bytes

    def input_bytes(self) -> int:
        return 0

    def partial_bytes(self) -> int:
        return 0

    def waits_for_room(self) -> bool:
        return False

    def hold_input(self, held: bool) -> None:
        raise AssertionError("a connection holding no input is never held back")


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
    assert memory.reading_full()  # readers read nothing more
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


class Producer(Conn):
    """A connection reading a frame: `bytes` of it so far (partial), `held` frames whole but
    held (a blocked SEND), whether its frame goes to an address that would hold it now, and
    whether its socket is read (`paused` mirrors the switch)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 0
        self.paused = False
        self.to_full_address = False

    def buffered_bytes(self) -> int:
        return self.bytes + self.held

    def input_bytes(self) -> int:
        return self.bytes + self.held

    def partial_bytes(self) -> int:
        return self.bytes

    def waits_for_room(self) -> bool:
        return self.to_full_address

    def hold_input(self, held: bool) -> None:
        self.paused = held


def _reads(buffers: ConnectionBuffers, conn: Producer, size: int) -> bool:
    assert not conn.paused, "a paused connection is not read"
    conn.bytes += size
    buffers.measure(conn)
    admitted = buffers.admit_input(conn)
    conn.paused = not admitted
    return admitted


def _whole(buffers: ConnectionBuffers, conn: Producer, *, blocked: bool = False) -> None:
    """Its frame is complete: carried out, or held by a blocked SEND."""
    if blocked:
        conn.held += conn.bytes
    conn.bytes = 0
    buffers.measure(conn)


def test_past_the_input_share_one_connection_at_a_time_may_finish_a_large_frame() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=4 * MIB)  # input share: 1 MiB
    buffers = ConnectionBuffers(memory, loop)
    first, second, third = Producer(), Producer(), Producer()
    assert _reads(buffers, first, 600 * KIB)
    assert _reads(buffers, second, 420 * KIB)  # 1,020 KiB in all: within the share
    assert _reads(buffers, third, 100 * KIB)  # past it: the one that crossed is the holder
    assert not _reads(buffers, first, 10 * KIB)  # the others wait, oldest first
    assert not _reads(buffers, second, 10 * KIB)
    assert buffers.waiting == 2
    assert _reads(buffers, third, 5 * MIB)  # the holder finishes its frame
    _whole(buffers, third)  # carried out: 1,040 KiB still held, so only the oldest gets its turn
    assert not first.paused and second.paused and buffers.waiting == 1
    assert _reads(buffers, first, 100 * KIB)
    _whole(buffers, first)  # 430 KiB left in all: every waiting connection is read again
    assert not second.paused and buffers.waiting == 0


def test_a_frame_into_a_full_address_waits_and_never_holds_up_a_frame_going_elsewhere() -> None:
    """Found by a breaker: a holder blocked on a full address kept the turn, so a consumer
    publishing elsewhere before acknowledging was never read, and never acknowledged."""
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=4 * MIB)  # input share: 1 MiB
    buffers = ConnectionBuffers(memory, loop)
    blocked, other, processor = Producer(), Producer(), Producer()
    blocked.to_full_address = other.to_full_address = True
    assert _reads(buffers, blocked, 900 * KIB)
    assert not _reads(buffers, blocked, 200 * KIB)  # past the share: its SEND would wait anyway
    assert not _reads(buffers, other, 300 * KIB)
    assert _reads(buffers, processor, 300 * KIB)  # going elsewhere: it takes the turn
    _whole(buffers, processor)
    assert blocked.paused and other.paused  # still no room where they go
    blocked.to_full_address = other.to_full_address = False  # a consumer made room
    loop.advance(SWEEP_PERIOD)
    assert not blocked.paused and other.paused  # the oldest first
    assert _reads(buffers, blocked, 5 * MIB)
    _whole(buffers, blocked, blocked=True)  # its SEND is held: the turn goes on all the same
    assert not other.paused


def test_held_frames_count_but_never_stop_a_connection_being_read() -> None:
    """A connection holding a blocked SEND reads on: its ACKs come behind it."""
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=MIB)  # input share: 256 KiB
    buffers = ConnectionBuffers(memory, loop)
    consumer = Producer()
    assert _reads(buffers, consumer, 900 * KIB)
    _whole(buffers, consumer, blocked=True)
    assert buffers.input_total == 900 * KIB
    assert _reads(buffers, consumer, 40 * KIB)  # small frames (its ACKs) are read on


def test_small_input_is_always_read_and_a_closed_holder_passes_its_turn_on() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=MIB)  # input share: 256 KiB
    buffers = ConnectionBuffers(memory, loop)
    holder, waiter, small = Producer(), Producer(), Producer()
    assert _reads(buffers, holder, 200 * KIB)
    assert _reads(buffers, holder, 200 * KIB)
    assert not _reads(buffers, waiter, 100 * KIB)
    assert _reads(buffers, small, 60 * KIB)  # within INPUT_ALLOWANCE: never held back
    buffers.gone(holder)
    assert not waiter.paused and buffers.waiting == 0


def test_without_a_global_limit_input_is_never_held_back() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=-1)
    buffers = ConnectionBuffers(memory, loop)
    conns = [Producer() for _ in range(4)]
    assert all(_reads(buffers, conn, 16 * MIB) for conn in conns)


def test_a_holder_whose_peer_stalls_loses_its_turn_to_a_frame_that_may_go() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=MIB)  # input share: 256 KiB
    buffers = ConnectionBuffers(memory, loop)
    staller, waiter = Producer(), Producer()
    assert _reads(buffers, staller, 300 * KIB)  # half a frame, then silence
    waiter.to_full_address = True
    assert not _reads(buffers, waiter, 100 * KIB)
    loop.advance(2 * HOLDER_PATIENCE)
    assert waiter.paused and not staller.paused  # nobody else may go: it keeps the turn
    waiter.to_full_address = False
    loop.advance(SWEEP_PERIOD)
    assert not waiter.paused and staller.paused and buffers.waiting == 1  # the staller waits at the back
    assert _reads(buffers, waiter, 5 * MIB)  # the new holder reads its frame


def test_a_waiting_connection_whose_frame_became_whole_is_read_again_at_once() -> None:
    loop, memory = ManualLoop(), MemoryAccountant(max_bytes=MIB)  # input share: 256 KiB
    buffers = ConnectionBuffers(memory, loop)
    holder, waiter = Producer(), Producer()
    assert _reads(buffers, holder, 300 * KIB)
    assert not _reads(buffers, waiter, 100 * KIB)
    _whole(buffers, waiter)  # the frames it had read were parsed in a later turn
    assert not waiter.paused and buffers.waiting == 0

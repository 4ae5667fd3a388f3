"""The asyncio shell's heart-beat timeout and close, on a manual clock: a silent peer is
aborted; while the session does not read the socket, bytes arriving in the kernel or leaving
our write buffer count as life, and a session waiting for memory (BLOCK) is not timed out; a
close that does not complete within the grace is aborted; our own heart-beats go out."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from manual_loop import ManualLoop

from pagemq.core.broker import Broker
from pagemq.core.settings import AddressSettingsRepository
from pagemq.protocol.stomp.frames import encode_frame
from pagemq.server.config import StompConfig
from pagemq.server.stomp_server import CLOSE_GRACE, StompServerProtocol


class FakeTransport:
    """Enough of an asyncio transport; its socket is one end of a real socketpair so the
    shell can ask the kernel how many bytes wait unread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.written = bytearray()
        self.buffered = 0  # what get_write_buffer_size reports
        self.aborted = False
        self.closed = False
        self.eof = False  # write_eof: our side shut, the peer's still read
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else default

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


Shell = tuple[StompServerProtocol, FakeTransport, socket.socket, ManualLoop]


@pytest.fixture
def connect() -> Iterator[Callable[[str], Shell]]:
    """A shell over a socketpair end, connected with the given CONNECT `heart-beat` header."""
    sockets: list[socket.socket] = []

    def make(heart_beat: str) -> Shell:
        ours, peer = socket.socketpair()
        sockets.extend((ours, peer))
        loop = ManualLoop()
        broker = Broker(AddressSettingsRepository())
        shell = StompServerProtocol(broker, StompConfig(1 << 20, 100, 8192), set(), loop)
        transport = FakeTransport(ours)
        shell.connection_made(transport)  # type: ignore[arg-type]
        shell.data_received(encode_frame("CONNECT", {"accept-version": "1.2", "heart-beat": heart_beat}))
        loop.run_ready()
        return shell, transport, peer, loop

    yield make
    for sock in sockets:
        sock.close()


def test_a_silent_peer_is_aborted_not_closed(connect: Callable[[str], Shell]) -> None:
    shell, transport, _peer, loop = connect("500,0")
    assert shell.session is not None and shell.session.protocol.expect_heartbeat_ms == 500
    loop.advance(1.0)  # twice the interval: still within the grace
    assert not transport.aborted
    loop.advance(0.25)  # the next check finds it late
    assert transport.aborted and not transport.closed


def test_a_peer_sending_heart_beats_is_kept(connect: Callable[[str], Shell]) -> None:
    shell, transport, _peer, loop = connect("500,0")
    for _ in range(20):
        loop.advance(0.45)
        shell.data_received(b"\n")
    assert not transport.aborted


def test_while_not_reading_bytes_arriving_in_the_kernel_count_as_heart_beats(
    connect: Callable[[str], Shell],
) -> None:
    shell, transport, peer, loop = connect("500,0")
    shell.pause_reading()
    peer.sendall(b"\n")
    loop.advance(1.25)
    assert not transport.aborted
    loop.advance(1.25)  # nothing more arrived, nothing was read from us
    assert transport.aborted


def test_while_not_reading_a_peer_taking_our_bytes_is_alive(connect: Callable[[str], Shell]) -> None:
    shell, transport, _peer, loop = connect("500,0")
    transport.buffered = 2 << 20
    shell.pause_reading()
    transport.buffered = 1 << 20
    loop.advance(1.25)
    assert not transport.aborted


def test_a_session_waiting_for_memory_is_not_timed_out(connect: Callable[[str], Shell]) -> None:
    shell, transport, _peer, loop = connect("500,0")
    assert shell.session is not None
    shell.pause_reading()
    shell.session._blocked_retry = lambda: False  # what Broker.wait_for_memory returns
    loop.advance(5.0)
    assert not transport.aborted
    shell.session._blocked_retry = None
    shell.resume_reading()  # the clock restarts: it could not be heard meanwhile
    loop.advance(1.0)
    assert not transport.aborted
    loop.advance(0.25)
    assert transport.aborted


def test_a_close_that_does_not_complete_is_aborted_after_the_grace(connect: Callable[[str], Shell]) -> None:
    shell, transport, _peer, loop = connect("0,0")
    shell.close()
    assert transport.eof and not transport.aborted
    loop.advance(CLOSE_GRACE - 0.01)
    assert not transport.aborted
    loop.advance(0.02)
    assert transport.aborted


def test_a_closing_connection_shuts_its_side_and_drops_what_the_peer_still_sends(
    connect: Callable[[str], Shell],
) -> None:
    """Closing with the peer's pipelined frames unread would answer them with a reset, which
    can destroy the ERROR frame in the peer's socket before it is read."""
    shell, transport, _peer, _loop = connect("0,0")
    shell.pause_reading()  # (the session had stopped reading: the peer's frames are read again)
    assert not transport.reading
    shell.close()
    assert transport.eof and not transport.closed and transport.reading
    written = bytes(transport.written)
    shell.data_received(b"SEND\ndestination:/queue/a\n\nx\x00")
    shell.write(b"\n")  # nothing more goes out after the FIN
    assert bytes(transport.written) == written


def test_the_server_sends_heart_beats_when_it_has_nothing_else_to_write(
    connect: Callable[[str], Shell],
) -> None:
    _shell, transport, _peer, loop = connect("0,500")
    assert transport.written.startswith(b"CONNECTED")
    loop.advance(1.0)  # checks every 0.25 s; a beat once 0.45 s passed without a write
    assert transport.written.split(b"\x00")[-1] == b"\n\n"
    assert not transport.aborted

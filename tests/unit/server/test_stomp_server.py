"""The asyncio shell's heart-beat timeout and close: a silent peer is aborted; while the
session does not read the socket, bytes arriving in the kernel or leaving our write buffer
count as life, and a session waiting for memory (BLOCK) is not timed out; a close that does
not complete within the grace is aborted."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from pagemq.core.broker import Broker
from pagemq.core.settings import AddressSettingsRepository
from pagemq.protocol.stomp.frames import encode_frame
from pagemq.server import stomp_server
from pagemq.server.config import StompConfig
from pagemq.server.stomp_server import StompServerProtocol


class FakeTransport:
    """Enough of an asyncio transport; its socket is one end of a real socketpair so the
    shell can ask the kernel how many bytes wait unread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.written = bytearray()
        self.buffered = 0  # what get_write_buffer_size reports
        self.aborted = False
        self.closed = False
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

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def _run(test: Any) -> None:
    async def body() -> None:
        ours, peer = socket.socketpair()
        try:
            broker = Broker(AddressSettingsRepository())
            shell = StompServerProtocol(broker, StompConfig(1 << 20, 100, 8192), set())
            transport = FakeTransport(ours)
            shell.connection_made(transport)  # type: ignore[arg-type]
            shell.data_received(encode_frame("CONNECT", {"accept-version": "1.2", "heart-beat": "500,0"}))
            assert shell.session is not None and shell.session.protocol.expect_heartbeat_ms == 500
            await test(shell, transport, peer)
        finally:
            ours.close()
            peer.close()

    asyncio.run(body())


def _silent_for(shell: StompServerProtocol, seconds: float) -> None:
    shell._last_read = asyncio.get_running_loop().time() - seconds


def test_a_silent_peer_is_aborted_not_closed() -> None:
    async def test(shell, transport, peer) -> None:  # type: ignore[no-untyped-def]
        _silent_for(shell, 1.5)
        shell._beat()
        assert transport.aborted and not transport.closed

    _run(test)


def test_while_not_reading_bytes_arriving_in_the_kernel_count_as_heart_beats() -> None:
    async def test(shell, transport, peer) -> None:  # type: ignore[no-untyped-def]
        shell.pause_reading()
        peer.sendall(b"\n")
        _silent_for(shell, 1.5)
        shell._beat()
        assert not transport.aborted
        _silent_for(shell, 1.5)  # nothing more arrived, nothing was read from us
        shell._beat()
        assert transport.aborted

    _run(test)


def test_while_not_reading_a_peer_taking_our_bytes_is_alive() -> None:
    async def test(shell, transport, peer) -> None:  # type: ignore[no-untyped-def]
        transport.buffered = 2 << 20
        shell.pause_reading()
        transport.buffered = 1 << 20
        _silent_for(shell, 1.5)
        shell._beat()
        assert not transport.aborted

    _run(test)


def test_a_session_waiting_for_memory_is_not_timed_out() -> None:
    async def test(shell, transport, peer) -> None:  # type: ignore[no-untyped-def]
        shell.pause_reading()
        shell.session._blocked_retry = lambda: False  # what Broker.wait_for_memory returns
        _silent_for(shell, 1.5)
        shell._beat()
        assert not transport.aborted
        shell.session._blocked_retry = None
        shell.resume_reading()  # the clock restarts: it could not be heard meanwhile
        shell._beat()
        assert not transport.aborted

    _run(test)


def test_a_close_that_does_not_complete_is_aborted_after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stomp_server, "CLOSE_GRACE", 0.05)

    async def test(shell, transport, peer) -> None:  # type: ignore[no-untyped-def]
        shell.close()
        assert transport.closed and not transport.aborted
        await asyncio.sleep(0.1)
        assert transport.aborted

    _run(test)

"""The asyncio shell of the STOMP acceptor: sockets in, `StompSession` does the rest.

Kept thin on purpose (hypercorn's tcp_server is the model): it moves bytes, runs the
heart-beat timer and relays transport flow control. Output the session buffers during one
loop iteration is written with a single `transport.write`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from pagemq.protocol.stomp.connection import StompConnection
from pagemq.server.stomp_session import StompSession

if TYPE_CHECKING:
    from pagemq.core.broker import Broker
    from pagemq.server.config import StompConfig

log = logging.getLogger("pagemq.stomp")

SERVER_HEARTBEAT_MS = (500, 500)  # the floor: clients get the intervals they ask for, down to this
HEARTBEAT_GRACE = 2.0  # a peer may be this many intervals late before we give up on it


class StompServerProtocol(asyncio.Protocol):
    def __init__(self, broker: Broker, limits: StompConfig, connections: set[StompServerProtocol]) -> None:
        self._broker = broker
        self._limits = limits
        self._connections = connections
        self._loop = asyncio.get_event_loop()
        self._transport: asyncio.Transport | None = None
        self._flush_scheduled = False
        self._paused_writing = False
        self._heartbeat: asyncio.TimerHandle | None = None
        self._last_read = 0.0
        self._last_write = 0.0
        self.session: StompSession | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement its methods.
        self._transport = cast(asyncio.Transport, transport)
        transport = self._transport
        transport.set_write_buffer_limits(high=1 << 20, low=1 << 18)
        protocol = StompConnection(
            server_heartbeat=SERVER_HEARTBEAT_MS,
            max_frame_size=self._limits.max_frame_size,
            max_headers=self._limits.max_headers,
            max_header_length=self._limits.max_header_length,
        )
        self.session = StompSession(self._broker, protocol, self)
        self._connections.add(self)
        self._last_read = self._last_write = self._loop.time()

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        session = self.session
        assert session is not None
        session.receive(data)
        if self._heartbeat is None and session.protocol.version is not None:
            self._start_heartbeat()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.session is not None:
            self.session.connection_lost()

    def pause_writing(self) -> None:
        self._paused_writing = True
        if self.session is not None:
            self.session.set_writable(False)

    def resume_writing(self) -> None:
        self._paused_writing = False
        if self.session is not None:
            self.session.set_writable(True)

    # -- Transport for the session --------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)
            self._last_write = self._loop.time()

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        session = self.session
        if session is None:
            return
        data = session.take_output()
        if data:
            self.write(data)
        if not self._paused_writing and not session.closing_hard and not session._writable:
            session.set_writable(True)

    def pause_reading(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def close(self) -> None:
        """Write what is buffered (an ERROR frame, a last RECEIPT), then close."""
        self._flush()
        if self._transport is not None:
            self._transport.close()

    # -- heart-beats ----------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        protocol = self.session.protocol if self.session else None
        if protocol is None:
            return
        intervals = [ms for ms in (protocol.send_heartbeat_ms, protocol.expect_heartbeat_ms) if ms]
        if not intervals:
            self._heartbeat = self._loop.call_later(3600, lambda: None)  # marks "started"
            return
        self._heartbeat = self._loop.call_later(min(intervals) / 2000, self._beat)

    def _beat(self) -> None:
        session = self.session
        if session is None or self._transport is None or self._transport.is_closing():
            return
        protocol = session.protocol
        now = self._loop.time()
        expect = protocol.expect_heartbeat_ms / 1000
        if expect and now - self._last_read > expect * HEARTBEAT_GRACE:
            log.info("%s: no heart-beat for %.1fs, closing", session.session_id, now - self._last_read)
            self._transport.close()
            return
        send = protocol.send_heartbeat_ms / 1000
        if send and now - self._last_write >= send * 0.9:
            self.write(b"\n")
        intervals = [ms for ms in (protocol.send_heartbeat_ms, protocol.expect_heartbeat_ms) if ms]
        self._heartbeat = self._loop.call_later(min(intervals) / 2000, self._beat)


async def start_stomp_server(
    broker: Broker, limits: StompConfig, host: str, port: int
) -> tuple[asyncio.Server, set[StompServerProtocol]]:
    connections: set[StompServerProtocol] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: StompServerProtocol(broker, limits, connections), host, port, reuse_address=True
    )
    return server, connections

"""The asyncio shell of the STOMP acceptor: sockets in, `StompSession` does the rest.

Kept thin on purpose (hypercorn's tcp_server is the model): it moves bytes, runs the
heart-beat timer and relays transport flow control. Output the session buffers during one
loop iteration is written with a single `transport.write`.

Dead peers are dropped, not waited for:
- a peer silent past its heart-beat timeout is aborted (its write buffer discarded), so the
  session's unacknowledged deliveries go back to their queues at once;
- a close (after an ERROR or a DISCONNECT) lets the write buffer drain and the peer close
  for `CLOSE_GRACE` seconds, reading and dropping what it still sends, then aborts;
- while the session has stopped reading the socket (its read-ahead is full), bytes arriving
  in the kernel's receive buffer or leaving our write buffer count as signs of life; while
  it waits for memory (BLOCK) the peer waits on us, so the timeout does not run.

Timers and the clock come from the `Scheduler` it is given (the running loop by default), and
it hands the same one to its session, so a test can run the heart-beat timeout and the close
grace on a manual clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import socket
import struct
import sys
import termios
import time
from typing import TYPE_CHECKING, cast

from pagemq.core.errors import InvalidDestination
from pagemq.core.management import MANAGEMENT_ADDRESS
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.security.listener import ListenerPolicy
from pagemq.server.connection_buffers import ConnectionBuffers
from pagemq.server.connection_log import ConnectionLog, format_peer
from pagemq.server.destinations import parse_destination
from pagemq.server.stomp_session import Cancellable, Scheduler, StompSession
from pagemq.server.turn_budget import TurnBudget, loop_budget

if TYPE_CHECKING:
    import ssl

    from pagemq.core.broker import Broker
    from pagemq.server.config import StompConfig

log = logging.getLogger("pagemq.stomp")

SERVER_HEARTBEAT_MS = (500, 500)  # the floor: clients get the intervals they ask for, down to this
HEARTBEAT_GRACE = 2.0  # a peer may be this many intervals late before we give up on it
CLOSE_GRACE = 3.0  # seconds a closing connection gets to take its last frames before an abort
WRITE_HIGH_WATER = 1 << 20  # transport write buffer: above it the session stops producing
WRITE_LOW_WATER = 1 << 18


class StompServerProtocol(asyncio.Protocol):
    def __init__(self, broker: Broker, limits: StompConfig, connections: set[StompServerProtocol],
                 scheduler: Scheduler | None = None, policy: ListenerPolicy | None = None,
                 connection_log: ConnectionLog | None = None, turn: TurnBudget | None = None,
                 buffers: ConnectionBuffers | None = None) -> None:
        """`turn`: the loop turn's time for frames (by default the running loop's shared one;
        none, so frame caps alone, when a test's `scheduler` is given). `buffers`: charges
        what the connection buffers to the memory budget (server/connection_buffers.py)."""
        self._broker = broker
        self._buffers = buffers  # charges what this connection buffers to the memory budget
        self._policy = policy if policy is not None else ListenerPolicy("stomp")
        self._connect_timer: Cancellable | None = None
        self._connection_log = connection_log if connection_log is not None else ConnectionLog()
        self._logged_open = False  # the open line was written (CONNECT accepted, login verified)
        self._peer = "?"
        self._started = 0.0
        self._limits = limits
        self._connections = connections
        self._loop: Scheduler = scheduler if scheduler is not None else asyncio.get_running_loop()
        self._turn = turn if turn is not None or scheduler is not None else loop_budget(self._loop)
        self._transport: asyncio.Transport | None = None
        self._flush_scheduled = False
        self._paused_writing = False
        self._reading_paused = False  # the transport is not read (for either reason below)
        self._session_paused = False  # the session holds input (server/stomp_session.py)
        self._input_held = False  # the input bound of all connections (connection_buffers.py)
        self._socket_seen = (0, 0)  # (unread bytes in the kernel, our write buffer) when last looked
        self._heartbeat: Cancellable | None = None
        self._close_timer: Cancellable | None = None
        self._draining = False  # closing: our side is shut, the peer's input is dropped (close)
        self._last_read = 0.0
        self._last_write = 0.0
        self.session: StompSession | None = None
        self.peer: object = None  # the peer's address, and when it connected (GET /api/connections)
        self.connected_at = 0.0

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement its methods.
        self._transport = cast(asyncio.Transport, transport)
        transport = self._transport
        policy = self._policy
        if not policy.admit(len(self._connections)):
            self._refuse(transport, policy.refusal())
            return
        self._peer = format_peer(transport.get_extra_info("peername"))
        self._started = self._connection_log.accepted()
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        protocol = StompConnection(
            server_heartbeat=SERVER_HEARTBEAT_MS,
            max_frame_size=self._limits.max_frame_size,
            max_headers=self._limits.max_headers,
            max_header_length=self._limits.max_header_length,
        )
        access = None if policy.access is None else policy.access.for_peer(_peer(transport))
        self.session = StompSession(self._broker, protocol, self, self._loop, access, self._turn)
        self._connections.add(self)
        self.peer = transport.get_extra_info("peername")
        self.connected_at = time.time()
        self._last_read = self._last_write = self._loop.time()
        if policy.connect_timeout > 0:
            self._connect_timer = self._loop.call_later(policy.connect_timeout, self._no_connect)

    def _refuse(self, transport: asyncio.Transport, why: str) -> None:
        """Over max-connections: an ERROR saying so, then close (no session is made)."""
        transport.write(f"ERROR\nmessage:{why}\ncontent-length:0\n\n\0".encode())
        transport.close()

    def _no_connect(self) -> None:
        """connect-timeout: the socket sent no CONNECT frame in time (an idle socket holds a
        file descriptor and counts against max-connections: a flood of them is an attack)."""
        self._connect_timer = None
        session = self.session
        if session is not None and session.protocol.version is None and not session.closing:
            log.info("%s: no CONNECT within %.1fs from %s, closing", session.session_id,
                     self._policy.connect_timeout, _peer(self._transport))
            self._abort()

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        session = self.session
        if session is None or self._draining:
            return  # a refused connection, or one closing: what the peer still sends is dropped
        session.receive(data)
        buffers = self._buffers
        if buffers is not None:
            buffers.measure(self)
            if not buffers.admit_input(self):
                self.hold_input(True)
        if self._heartbeat is None and session.protocol.version is not None:
            if self._connect_timer is not None:
                self._connect_timer.cancel()
                self._connect_timer = None
            self._start_heartbeat()  # once, when CONNECT is accepted
            if session.authenticating:  # the open line names a verified user, or is not written
                session.on_authenticated = self._log_connected
            else:
                self._log_connected()

    def _log_connected(self) -> None:
        session = self.session
        if session is not None:
            self._logged_open = True
            self._connection_log.connected(self._peer, session.session_id, session.login,
                                           session.protocol.version, session.client_id)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        if self._buffers is not None:
            self._buffers.gone(self)
        session = self.session
        if session is not None:
            self._connection_log.lost(self._peer, session.session_id, session.login,
                                      self._logged_open, self._started, exc)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._close_timer is not None:
            self._close_timer.cancel()
        if self._connect_timer is not None:
            self._connect_timer.cancel()
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
        if self._transport is not None and not self._transport.is_closing() and not self._draining:
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
        if self._buffers is not None:
            self._buffers.measure(self)
        if (not self._paused_writing and not session.closing_hard and not session.writable
                and not session.replies_backlogged):
            session.set_writable(True)

    def pause_reading(self) -> None:
        self._session_paused = True
        self._apply_reading()

    def resume_reading(self) -> None:
        self._session_paused = False
        self._apply_reading()

    def hold_input(self, held: bool) -> None:
        """The input of all connections is past its bound: this one is not read (held) until
        it is its turn (server/connection_buffers.py)."""
        self._input_held = held
        self._apply_reading()

    def _apply_reading(self) -> None:
        """Read the socket unless the session or the input bound holds it."""
        transport = self._transport
        paused = self._session_paused or self._input_held
        if transport is None or paused == self._reading_paused:
            return
        self._reading_paused = paused
        if paused:
            self._socket_seen = self._socket_state(transport)
            transport.pause_reading()
        else:
            self._last_read = self._loop.time()  # the peer could not be heard while we did not read
            if not transport.is_closing():
                transport.resume_reading()

    def close(self) -> None:
        """Write what is buffered (an ERROR frame, a last RECEIPT), then close; a peer that
        does not take it and close within CLOSE_GRACE seconds is aborted.

        Over TCP the write side closes first (a FIN after those frames) while what the peer
        still sends (a producer's pipelined SENDs) is read and dropped, until it closes its
        side: closing with its frames unread would answer them with a reset, which can
        destroy the ERROR frame in the peer's socket before the peer reads it."""
        self._flush()
        if self.session is not None:
            self.session.stop_deliveries()
        transport = self._transport
        if transport is None or transport.is_closing() or self._draining:
            return
        if transport.can_write_eof():
            self._draining = True
            try:
                transport.write_eof()
            except OSError:  # the peer is gone already (ENOTCONN): nothing to drain
                transport.abort()
                return
            self._session_paused = self._input_held = False
            self._apply_reading()
        else:
            transport.close()
        self._close_timer = self._loop.call_later(CLOSE_GRACE, self._abort_close)

    def _abort_close(self) -> None:
        """The close has not completed (connection_lost cancels this timer)."""
        log.info("%s: peer did not take its last frames and close within %.0fs, aborting",
                 self.session.session_id if self.session else "?", CLOSE_GRACE)
        self._abort()

    def _abort(self) -> None:
        """Drop the connection now: unsent bytes are discarded and the peer gets a reset (a
        plain close would leave the kernel holding them, probing a peer that never reads)."""
        transport = self._transport
        if transport is None:
            return
        if self.session is not None:
            self.session.stop_deliveries()
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(AttributeError, OSError, ValueError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    def buffered_bytes(self) -> int:
        """What this connection holds besides messages (server/connection_buffers.py)."""
        transport, session = self._transport, self.session
        held = session.buffered_bytes() if session is not None else 0
        return held if transport is None else held + transport.get_write_buffer_size()

    def input_bytes(self) -> int:
        """Of that, what it read and holds: frames held, a partial frame."""
        session = self.session
        return session.input_bytes() if session is not None else 0

    def partial_bytes(self) -> int:
        """Of that, bytes read and not yet parsed into frames (a frame still coming)."""
        session = self.session
        return session.protocol.buffered if session is not None else 0

    def waits_for_room(self) -> bool:
        """The frame still coming is a SEND to an address that would hold it now, and nothing
        behind it on this connection can make room: not a SEND in a transaction (only its
        COMMIT meets the policy), nor one from a connection holding deliveries or an open
        transaction (its ACKs or COMMIT behind the frame may be what drains the address)."""
        session = self.session
        headers = session.protocol.pending_send if session is not None else None
        if headers is None or "transaction" in headers or session is None or session.may_make_room():
            return False
        destination = headers.get("destination")
        if destination is None:
            return False
        try:
            address = parse_destination(destination).address
        except InvalidDestination:
            return False
        # Management requests are never held back (docs/management.md).
        return address != MANAGEMENT_ADDRESS and self._broker.router.would_block(address)

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
        transport = self._transport
        if session is None or transport is None or transport.is_closing() or self._draining:
            return
        protocol = session.protocol
        now = self._loop.time()
        intervals = [ms for ms in (protocol.send_heartbeat_ms, protocol.expect_heartbeat_ms) if ms]
        if session.authenticating:  # heart-beats begin with CONNECTED (a failed login may wait)
            self._last_read = self._last_write = now
            self._heartbeat = self._loop.call_later(min(intervals) / 2000, self._beat)
            return
        expect = protocol.expect_heartbeat_ms / 1000
        if expect and now - self._last_read > expect * HEARTBEAT_GRACE:
            if self._reading_paused and (session.blocked or self._input_held
                                         or self._peer_stirred(transport)):
                self._last_read = now  # not reading it is our doing; the socket says it lives
            else:
                log.info("%s: no heart-beat for %.1fs, dropping the connection",
                         session.session_id, now - self._last_read)
                self._abort()  # its deliveries go back to their queues now
                return
        send = protocol.send_heartbeat_ms / 1000
        if send and now - self._last_write >= send * 0.9:
            self.write(b"\n")
        self._heartbeat = self._loop.call_later(min(intervals) / 2000, self._beat)

    def _peer_stirred(self, transport: asyncio.Transport) -> bool:
        """Since we last looked: did bytes arrive in the kernel (we are not reading them),
        or did the peer take some of what we wrote?"""
        state = self._socket_state(transport)
        before, self._socket_seen = self._socket_seen, state
        return state[0] > before[0] or state[1] < before[1]

    @staticmethod
    def _socket_state(transport: asyncio.Transport) -> tuple[int, int]:
        return _unread_bytes(transport), transport.get_write_buffer_size()


def _peer(transport: asyncio.BaseTransport | None) -> str:
    """`host:port` of the peer, for logs and per-address failure counts."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return str(peer) if peer else "unknown"


def _unread_bytes(transport: asyncio.BaseTransport) -> int:
    """Bytes waiting in the kernel's receive buffer of the transport's socket (-1: unknown)."""
    sock = transport.get_extra_info("socket")
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (AttributeError, OSError, ValueError):
        return -1
    return int.from_bytes(raw, sys.byteorder, signed=True)


async def start_stomp_server(
    broker: Broker, limits: StompConfig, host: str, port: int,
    policy: ListenerPolicy | None = None, ssl_context: ssl.SSLContext | None = None,
    connection_log: ConnectionLog | None = None,
) -> tuple[asyncio.Server, set[StompServerProtocol]]:
    """`ssl_context`: a TLS listener (a client that does not complete the handshake within
    the connect-timeout, or speaks plaintext, is dropped before any session is made)."""
    connections: set[StompServerProtocol] = set()
    loop = asyncio.get_running_loop()
    handshake: float | None = None
    if ssl_context is not None:
        handshake = policy.connect_timeout if policy is not None and policy.connect_timeout > 0 else 10.0
    buffers = ConnectionBuffers(broker.memory, loop)
    server = await loop.create_server(
        lambda: StompServerProtocol(broker, limits, connections, policy=policy,
                                    connection_log=connection_log, buffers=buffers),
        host, port, reuse_address=True, ssl=ssl_context, ssl_handshake_timeout=handshake,
    )
    return server, connections

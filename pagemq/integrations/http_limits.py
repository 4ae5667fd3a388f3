"""`max-connections` and `connect-timeout` for the HTTP listeners: past the limit a
connection is answered 503 and closed; one that sends no complete request head within
`connect-timeout` (or, on `http-tls`, does not finish its TLS handshake within it) is closed.

aiohttp's TCPSite takes no limit, so `LimitedSite` is a TCPSite whose server makes, for a
connection over the limit, a tiny protocol that writes the 503 and closes instead of an
aiohttp request handler. `http` and `http-tls` serve one application and share its count of
open connections (aiohttp keeps one list per application server).

aiohttp bounds the wait between requests (its keep-alive timeout) but not the wait for a
connection's first request: an idle socket, or one that sends half a request head and
stops (slowloris), would hold its slot of `max-connections` for ever, and a flood of them
would leave no room for the health probes and the operators. `_FirstRequestDeadline` sits
in front of aiohttp's handler and closes such a connection after `connect-timeout`, as the
STOMP listeners close a socket that sends no CONNECT.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from pagemq.security.listener import ListenerPolicy

__all__ = ["LimitedSite"]

log = logging.getLogger("pagemq.http")
_HEAD_END = b"\r\n\r\n"
_DEFAULT_HANDSHAKE = 10.0  # seconds for a TLS handshake when connect-timeout is off (as STOMP)


class _Refuse(asyncio.Protocol):
    def __init__(self, why: str) -> None:
        self._why = why

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        body = json.dumps({"error": self._why}).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        transport.write(head + body)  # type: ignore[attr-defined]
        transport.close()


class _FirstRequestDeadline(asyncio.Protocol):
    """aiohttp's request handler, closed unless a whole request head (up to the blank line)
    arrives within `timeout` seconds of the connection; then out of the way."""

    def __init__(self, handler: asyncio.Protocol, timeout: float, name: str) -> None:
        self._handler = handler
        self._timeout = timeout
        self._name = name
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""  # the last bytes seen, for a blank line split across reads
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expired)
        self._handler.connection_made(transport)

    def _expired(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            peer = transport.get_extra_info("peername")
            log.info("%s: no request within %.1fs from %s, closing", self._name, self._timeout,
                     f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?")
            transport.abort()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self._timer is not None:
            seen = self._tail + data
            if _HEAD_END in seen:
                self._timer.cancel()
                self._timer = None
            else:
                self._tail = seen[-3:]
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class LimitedSite(web.TCPSite):
    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, policy: ListenerPolicy,
                 **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._policy = policy

    async def start(self) -> None:
        """TCPSite.start with a factory that counts (aiohttp 3.x: the runner's server is
        the protocol factory and lists its open connections)."""
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        policy = self._policy

        def factory() -> asyncio.BaseProtocol:
            if not policy.admit(len(server.connections)):
                return _Refuse(policy.refusal())
            if policy.connect_timeout > 0:
                return _FirstRequestDeadline(server(), policy.connect_timeout, policy.name)
            return server()

        loop = asyncio.get_running_loop()
        handshake = None
        if self._ssl_context is not None:
            handshake = policy.connect_timeout if policy.connect_timeout > 0 else _DEFAULT_HANDSHAKE
        self._server = await loop.create_server(
            factory, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port,
            ssl_handshake_timeout=handshake,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

"""`max-connections` for the HTTP listeners: past it a connection is answered 503 and closed.

aiohttp's TCPSite takes no limit, so `LimitedSite` is a TCPSite whose server makes, for a
connection over the limit, a tiny protocol that writes the 503 and closes instead of an
aiohttp request handler. `http` and `http-tls` serve one application and share its count of
open connections (aiohttp keeps one list per application server).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from pagemq.security.listener import ListenerPolicy

__all__ = ["LimitedSite"]


class _Refuse(asyncio.Protocol):
    def __init__(self, why: str) -> None:
        self._why = why

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        body = json.dumps({"error": self._why}).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        transport.write(head + body)  # type: ignore[attr-defined]
        transport.close()


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
            if policy.admit(len(server.connections)):
                return server()
            return _Refuse(policy.refusal())

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            factory, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

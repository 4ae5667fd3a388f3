"""HTTP Basic authentication and the `view` / `manage` permissions, as an aiohttp middleware.

Registered by `make_app` only when security is enabled. Every request but the console's
files and the health checks (`/health`, `/health/ready`, `/health/live`) needs credentials
(none or wrong: 401 with `WWW-Authenticate`, the same answer for an unknown user and a
wrong password, after the same growing delay per peer address as STOMP). A GET or HEAD
needs `view` or `manage`, anything else `manage` (403 otherwise); `/metrics` is a GET like
the rest. Both are checked on the management address (`pagemq.management`, which a `"#"`
match covers), as Artemis checks management operations on its management address.
Passwords are verified in the security thread pool and cached (`security/access.py`).

Beside the console's own files, two exceptions, both so that nobody needs more than their job:
- the health checks (`GET /health`, `/health/live`, `/health/ready`) answer without
  credentials: orchestrators' probes (Kubernetes, load balancers) carry none, and the answer
  says only whether the broker is up and ready;
- a stream request (the Spark streaming source) is also allowed with `consume` on the
  streamed address (`stream_access.py`), as a STOMP consumer of it would be.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Middleware

from pagemq.integrations.admin_api import is_health_probe
from pagemq.integrations.console_api import is_console_asset
from pagemq.integrations.stream_access import stream_needs
from pagemq.security.access import AUTHENTICATION_FAILED, Access
from pagemq.security.permissions import MANAGEMENT_ADDRESS

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["security_middleware"]

REALM = 'Basic realm="pagemq", charset="UTF-8"'
_READS = frozenset({"GET", "HEAD"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _unauthorized(request: web.Request, message: str) -> web.Response:
    # A script asking not to be challenged (the console's own login form; the convention of
    # `X-Requested-With`) gets no WWW-Authenticate, so the browser shows no password dialog.
    quiet = request.headers.get("X-Requested-With") == "XMLHttpRequest"
    return web.json_response({"error": message}, status=401,
                             headers={} if quiet else {"WWW-Authenticate": REALM})


def _credentials(header: str | None) -> tuple[str, str] | None:
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    login, sep, password = decoded.partition(":")
    return (login, password) if sep else None


def _peer(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return request.remote or "unknown"


def security_middleware(access: Access, broker: Broker | None = None) -> Middleware:
    """`broker`: to find a stream request's address (without it, streams need view/manage)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_console_asset(request.method, request.path):
            return await handler(request)  # the console's files: no broker data in them
        if is_health_probe(request.method, request.path):
            return await handler(request)  # orchestrators' probes carry no credentials
        credentials = _credentials(request.headers.get("Authorization"))
        if credentials is None:
            return _unauthorized(request, "authentication required (HTTP Basic)")
        user = await access.authenticate(credentials[0], credentials[1], _peer(request))
        if user is None:
            return _unauthorized(request, AUTHENTICATION_FAILED)
        needed = "view" if request.method in _READS else "manage"
        if (access.allowed(user.name, needed, MANAGEMENT_ADDRESS)
                or access.allowed(user.name, "manage", MANAGEMENT_ADDRESS)):
            return await handler(request)
        address, permission = MANAGEMENT_ADDRESS, needed
        stream = await stream_needs(request, broker) if broker is not None else None
        if stream is not None:
            address = stream[0]
            permission = next((p for p in stream[1] if not access.allowed(user.name, p, address)), "")
            if not permission:
                return await handler(request)
        message = f"User {user.name} lacks permission {permission} on address {address}"
        return web.json_response({"error": message, "code": "forbidden"}, status=403)

    return check

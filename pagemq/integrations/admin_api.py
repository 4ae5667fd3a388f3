"""The management API's actions and operator views (issue 18): browse, purge, delete, move,
retry, connections, health, and server-side paging of the address and queue lists.

Registered by `http_api.make_app` (`register`), in the same JSON style: errors are
`{"error": ...}` with 400 for a bad body, parameter or selector, 404 for an unknown name
only, 405 (with `Allow`) for a wrong method on a known path. Names are URL-encoded path
segments, so a queue named `/queue/#` or `a b` is `/api/queues/%2Fqueue%2F%23` or
`/api/queues/a%20b` (aiohttp matches the raw path and decodes the segment).

The actions are the core's (`core/admin.py`); this module only parses requests and shapes
answers. What it knows of connections and of the server's state comes through callables the
server hands in (`ConnectionsView`, `HealthView`), so nothing here imports the server.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import web

from pagemq.core.errors import BrokerError
from pagemq.integrations.http_params import BadRequest, int_param

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

ConnectionsView = Callable[[], list[dict[str, object]]]
"""The open STOMP connections, one dict each (see server/connections.py)."""

HealthView = Callable[[], str]
"""The server's state: "starting", "ready" or "stopping"."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ADMIN_BROKER_KEY: web.AppKey[Broker] = web.AppKey("admin_broker")
CONNECTIONS_KEY: web.AppKey[ConnectionsView | None] = web.AppKey("connections")
HEALTH_KEY: web.AppKey[HealthView | None] = web.AppKey("health")

BROWSE_LIMIT = 100
BROWSE_MAX = 10_000
LIST_MAX = 10_000


def _bad(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


def _broker_error(exc: BrokerError) -> web.Response:
    return web.json_response({"error": exc.message, "code": exc.code}, status=exc.http_status)


def _guarded(handler: Handler) -> Handler:
    """Turn `BadRequest` and `BrokerError` into their JSON answers."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadRequest as exc:
            return _bad(str(exc))
        except BrokerError as exc:
            return _broker_error(exc)

    return guarded


async def _json_body(request: web.Request) -> dict[str, object]:
    if not request.can_read_body:
        return {}
    data = await request.read()
    if not data.strip():
        return {}
    try:  # bytes, not request.text(): a body that is not UTF-8 is the client's mistake (400)
        body = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def _optional_text(body: dict[str, object], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{key}: expected a string, got {json.dumps(value)}")
    return value


# -- lists with paging, sorting and filtering ---------------------------------------------

def listing(request: web.Request, key: str, names: Iterable[str],
            info: Callable[[str], dict[str, object]]) -> web.Response:
    """`{key: [...], "total": n}` for `GET /api/addresses` and `/api/queues`.

    `filter` keeps names containing it (case-insensitive); `sort` is a field of the items
    (default `name`), `order` `asc` or `desc`; `offset` and `limit` cut the page. Sorting by
    name needs no item built; another field builds every filtered item once. Without
    parameters the answer is the whole list, sorted by name, as before.
    """
    try:
        offset = int_param(request, "offset", 0) or 0
        limit = int_param(request, "limit", None, maximum=LIST_MAX)
        order = request.query.get("order", "asc")
        if order not in ("asc", "desc"):
            raise BadRequest(f"order: 'asc' or 'desc', got {order!r}")
        sort = request.query.get("sort", "name") or "name"
        wanted = request.query.get("filter", "").lower()
        selected = sorted(n for n in names if wanted in n.lower()) if wanted else sorted(names)
        reverse = order == "desc"
        if sort == "name":
            if reverse:
                selected.reverse()
            window = selected[offset:offset + limit if limit is not None else None]
            items = [info(name) for name in window]
        else:
            every = [info(name) for name in selected]
            if every and sort not in every[0]:
                raise BadRequest(f"sort: no field {sort!r}; one of {', '.join(sorted(every[0]))}")
            every.sort(key=lambda item: _sort_key(item.get(sort)), reverse=reverse)
            items = every[offset:offset + limit if limit is not None else None]
    except BadRequest as exc:
        return _bad(str(exc))
    return web.json_response({key: items, "total": len(selected), "offset": offset, "limit": limit})


def _sort_key(value: object) -> tuple[int, object]:
    """Numbers and booleans before text, each in its own order; lists by length."""
    if isinstance(value, bool | int | float):
        return 0, float(value)
    if isinstance(value, list | tuple | dict):
        return 0, float(len(value))
    return 1, "" if value is None else str(value)


# -- queue actions ----------------------------------------------------------------------------

@_guarded
async def browse_messages(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    limit = int_param(request, "limit", BROWSE_LIMIT, maximum=BROWSE_MAX)
    after = int_param(request, "after", None)
    selector = request.query.get("selector") or None
    assert limit is not None
    messages, more = request.app[ADMIN_BROKER_KEY].admin.browse(
        name, limit=limit, after=after, selector_text=selector)
    last = messages[-1]["message_id"] if messages and more else None
    return web.json_response({"queue": name, "messages": messages, "count": len(messages),
                              "more": more, "next_after": last})


def _named(act: Callable[[Broker, str], Awaitable[dict[str, object]]]) -> Handler:
    """A handler running `act` on the `{name}` of the path; its dict is the answer."""

    @_guarded
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(await act(request.app[ADMIN_BROKER_KEY], request.match_info["name"]))

    return handler


async def _purge(broker: Broker, name: str) -> dict[str, object]:
    return {"queue": name, "purged": await broker.admin.purge(name)}


async def _delete_queue(broker: Broker, name: str) -> dict[str, object]:
    await broker.admin.delete_queue(name)
    return {"deleted": name}


async def _delete_address(broker: Broker, name: str) -> dict[str, object]:
    return {"deleted": name, "queues": await broker.admin.delete_address(name)}


async def _retry(broker: Broker, name: str) -> dict[str, object]:
    return {"queue": name, "retried": await broker.admin.retry(name)}


purge_queue = _named(_purge)
delete_queue = _named(_delete_queue)
delete_address = _named(_delete_address)
retry_messages = _named(_retry)


@_guarded
async def move_messages(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    body = await _json_body(request)
    unknown = sorted(set(body) - {"to", "selector"})
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)} (expected 'to', 'selector')")
    to = _optional_text(body, "to")
    if not to:
        raise BadRequest("'to' (the address to move the messages to) is required")
    selector = _optional_text(body, "selector")
    broker = request.app[ADMIN_BROKER_KEY]
    broker.admin.queue(name)  # 404 before anything is created for the target
    moved = await broker.admin.move(name, to, selector or None)
    return web.json_response({"queue": name, "to": to, "moved": moved})


# -- connections and health -------------------------------------------------------------------

async def list_connections(request: web.Request) -> web.Response:
    view = request.app[CONNECTIONS_KEY]
    connections = view() if view is not None else []
    return web.json_response({"connections": connections, "total": len(connections)})


def _health_answer(request: web.Request, *, live_only: bool) -> web.Response:
    view = request.app[HEALTH_KEY]
    state = view() if view is not None else "ready"
    ready = state == "ready"
    ok = (live_only and state != "stopped") or ready
    return web.json_response({"status": state, "ready": ready, "live": state != "stopped"},
                             status=200 if ok else 503)


HEALTH_PATHS = frozenset({"/health", "/health/ready", "/health/live"})


def is_health_probe(method: str, path: str) -> bool:
    """A GET/HEAD of a health check: public when security is enabled, as an orchestrator's
    probe (Kubernetes' httpGet, a load balancer's check) carries no credentials and a 401
    would read as "unhealthy" and restart the broker. The answer says only starting, ready
    or stopping."""
    return method in ("GET", "HEAD") and path in HEALTH_PATHS


async def health(request: web.Request) -> web.Response:
    """Readiness (what a load balancer or Kubernetes' readinessProbe asks): 200 once ready,
    503 while starting or stopping."""
    return _health_answer(request, live_only=False)


async def health_live(request: web.Request) -> web.Response:
    """Liveness: 200 while the process serves HTTP at all (starting and stopping too)."""
    return _health_answer(request, live_only=True)


# -- registration -------------------------------------------------------------------------

def _method_not_allowed(allowed: tuple[str, ...]) -> Handler:
    allow = ", ".join(allowed)

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": f"method {request.method} is not allowed on {request.path}; allowed: {allow}"},
            status=405, headers={"Allow": allow})

    return refuse


# Every path of the API and the methods it answers (GETs registered by http_api included), so
# a wrong method gets 405 rather than the catch-all 404.
KNOWN_PATHS: dict[str, tuple[str, ...]] = {
    "/api/broker": ("GET",),
    "/api/addresses": ("GET",),
    "/api/addresses/{name}": ("GET", "DELETE"),
    "/api/queues": ("GET",),
    "/api/queues/{name}": ("GET", "DELETE"),
    "/api/queues/{name}/messages": ("GET",),
    "/api/queues/{name}/purge": ("POST",),
    "/api/queues/{name}/move": ("POST",),
    "/api/queues/{name}/retry": ("POST",),
    "/api/connections": ("GET",),
    "/health": ("GET",),
    "/health/live": ("GET",),
    "/health/ready": ("GET",),
    "/metrics": ("GET",),
}


def register(app: web.Application, broker: Broker, *, connections: ConnectionsView | None = None,
             health_view: HealthView | None = None) -> None:
    """Add the management actions and views to `app` (before its catch-all 404 route)."""
    app[ADMIN_BROKER_KEY] = broker
    app[CONNECTIONS_KEY] = connections
    app[HEALTH_KEY] = health_view
    router = app.router
    router.add_get("/api/queues/{name}/messages", browse_messages)
    router.add_post("/api/queues/{name}/purge", purge_queue)
    router.add_post("/api/queues/{name}/move", move_messages)
    router.add_post("/api/queues/{name}/retry", retry_messages)
    router.add_delete("/api/queues/{name}", delete_queue)
    router.add_delete("/api/addresses/{name}", delete_address)
    router.add_get("/api/connections", list_connections)
    router.add_get("/health", health)
    router.add_get("/health/ready", health)
    router.add_get("/health/live", health_live)
    refuse_other_methods(router, KNOWN_PATHS)


def refuse_other_methods(router: web.UrlDispatcher, paths: dict[str, tuple[str, ...]]) -> None:
    """Answer every method a path of `paths` does not list with 405 and `Allow` (GET implies
    HEAD); registered after the path's own routes, before the catch-all 404."""
    for path, methods in paths.items():
        allowed = (*methods, "HEAD") if "GET" in methods else methods
        router.add_route("*", path, _method_not_allowed(allowed))

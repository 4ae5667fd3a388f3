"""The web console (`/console/`) and the endpoints only it needed (docs/console.md).

The console is static files shipped in the package (`integrations/console/static/`: HTML,
CSS and ES modules, no build step) that read and act through the same JSON API every other
client uses, so it can do nothing the API does not allow. This module serves those files
and adds what the API lacked for it:

- `GET /api/broker/history`: the ring of samples the broker keeps (server/broker_history.py)
  for the overview's 15-minute graphs;
- `GET /api/queues/{name}/pages` and `GET /api/addresses/{name}/pages`: page files with the
  range of message ids each holds (`core/views.py` over the paged-queue store).

Security: the console's files hold no broker data and are served without credentials (as
RabbitMQ's management UI and Artemis' console serve their login page); every API call the
page makes needs them (docs/security.md). Registered by `http_api.make_app` (`register`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from pagemq.integrations.admin_api import Handler, _guarded, refuse_other_methods
from pagemq.integrations.http_params import int_param

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["CONSOLE_PREFIX", "STATIC_DIRECTORY", "is_console_asset", "register"]

HistoryView = Callable[[], dict[str, object]]
"""The broker's recent samples (server/broker_history.py `BrokerHistory.view`)."""

CONSOLE_PREFIX = "/console"
STATIC_DIRECTORY = Path(__file__).with_name("console") / "static"
PAGES_MAX = 10_000

CONSOLE_BROKER_KEY: web.AppKey[Broker] = web.AppKey("console_broker")
HISTORY_KEY: web.AppKey[HistoryView | None] = web.AppKey("history")

_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


def is_console_asset(method: str, path: str) -> bool:
    """A GET/HEAD of the console's own files (public: they hold no broker data)."""
    return method in ("GET", "HEAD") and (path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/"))


async def console_root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMovedPermanently(CONSOLE_PREFIX + "/")


async def console_file(request: web.Request) -> web.StreamResponse:
    """One file of the console; `/console/` is its index. Only files that are in the static
    directory are served (no `..`, no hidden files); they are revalidated on each load
    (`no-cache` with Last-Modified) so an upgraded broker's console is never stale."""
    relative = request.match_info.get("file", "") or "index.html"
    parts = relative.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return _missing(request)
    path = STATIC_DIRECTORY.joinpath(*parts)
    content_type = _CONTENT_TYPES.get(path.suffix)
    if content_type is None or not path.is_file():
        return _missing(request)
    return web.FileResponse(path, headers={"Content-Type": content_type, "Cache-Control": "no-cache"})


def _missing(request: web.Request) -> web.Response:
    return web.json_response({"error": f"no such resource: {request.path}"}, status=404)


async def broker_history(request: web.Request) -> web.Response:
    view = request.app[HISTORY_KEY]
    if view is None:
        return web.json_response({"interval_seconds": None, "capacity": 0, "limits": {}, "samples": []})
    return web.json_response(view())


def _window(request: web.Request, answer: dict[str, object]) -> web.Response:
    """`offset` / `limit` over the answer's `pages`, with `total` (all of them)."""
    offset = int_param(request, "offset", 0) or 0
    limit = int_param(request, "limit", None, maximum=PAGES_MAX)
    pages = answer["pages"]
    assert isinstance(pages, list)
    answer["total"] = len(pages)
    answer["pages"] = pages[offset:offset + limit if limit is not None else None]
    answer["offset"], answer["limit"] = offset, limit
    return web.json_response(answer)


@_guarded
async def queue_pages(request: web.Request) -> web.Response:
    broker = request.app[CONSOLE_BROKER_KEY]
    return _window(request, broker.queue_pages(request.match_info["name"]))


@_guarded
async def address_pages(request: web.Request) -> web.Response:
    broker = request.app[CONSOLE_BROKER_KEY]
    return _window(request, broker.address_pages(request.match_info["name"]))


# Every path added here: each answers GET (and HEAD) only, anything else gets 405 with Allow.
GET_ROUTES: dict[str, Handler] = {
    "/api/broker/history": broker_history,
    "/api/queues/{name}/pages": queue_pages,
    "/api/addresses/{name}/pages": address_pages,
    CONSOLE_PREFIX: console_root,
    CONSOLE_PREFIX + "/": console_file,
    CONSOLE_PREFIX + "/{file:.+}": console_file,
}


def register(app: web.Application, broker: Broker, history: HistoryView | None) -> None:
    """Add the console and its endpoints to `app` (before its catch-all 404 route)."""
    app[CONSOLE_BROKER_KEY] = broker
    app[HISTORY_KEY] = history
    for path, handler in GET_ROUTES.items():
        app.router.add_get(path, handler)
    refuse_other_methods(app.router, dict.fromkeys(GET_ROUTES, ("GET",)))

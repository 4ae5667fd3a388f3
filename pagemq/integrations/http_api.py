"""The HTTP acceptor: management JSON and Prometheus metrics over aiohttp.

It reads the broker only through its management views (`Broker.address_info`,
`Broker.queue_info`), never its internals, so the JSON fields stay the contract of
docs/http-api.md whatever the core does inside.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.registry import Collector

from pagemq.core.errors import BrokerError
from pagemq.core.views import disk_info, memory_info
from pagemq.integrations import admin_api, console_api
from pagemq.integrations.admin_api import ConnectionsView, HealthView
from pagemq.integrations.broker_summary import BrokerSummary
from pagemq.integrations.console_api import HistoryView
from pagemq.integrations.metrics import BrokerCollector, ConnectionFigures, collect, process_collectors, write
from pagemq.integrations.stream_api import StreamCollector, add_stream_routes

if TYPE_CHECKING:
    import ssl

    from pagemq.core.broker import Broker
    from pagemq.security.access import Access

BROKER_KEY: web.AppKey[Broker] = web.AppKey("broker")
STATS_KEY: web.AppKey[Callable[[], dict[str, int]]] = web.AppKey("stats")
# the server's event-loop lag figures (`server/loop_lag.py`), since a unix time or since start
LoopFigures = Callable[[float | None], dict[str, object]]
LOOP_KEY: web.AppKey[LoopFigures | None] = web.AppKey("loop")
# what /metrics renders: the broker's collector, then the process metrics
METRICS_KEY: web.AppKey[Sequence[Collector]] = web.AppKey("metrics")
# version, uptime, connections and rates at the top of /api/broker (integrations/broker_summary.py)
SUMMARY_KEY: web.AppKey[BrokerSummary] = web.AppKey("summary")


def _error(exc: BrokerError) -> web.Response:
    return web.json_response({"error": exc.message, "code": exc.code}, status=exc.http_status)


async def list_addresses(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    return admin_api.listing(request, "addresses", broker.addresses, broker.address_info)


async def get_address(request: web.Request) -> web.Response:
    try:
        return web.json_response(request.app[BROKER_KEY].address_info(request.match_info["name"]))
    except BrokerError as exc:
        return _error(exc)


async def list_queues(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    return admin_api.listing(request, "queues", broker.queues, broker.queue_info)


async def get_queue(request: web.Request) -> web.Response:
    try:
        return web.json_response(request.app[BROKER_KEY].queue_info(request.match_info["name"]))
    except BrokerError as exc:
        return _error(exc)


async def get_broker(request: web.Request) -> web.Response:
    """Broker-wide figures: memory, store, and how late the event loop ran (`?since=` a
    unix time: the loop figures of that window only, so a benchmark can read its own run)."""
    since_text = request.query.get("since")
    try:
        since = float(since_text) if since_text is not None else None
    except ValueError:
        return web.json_response({"error": f"since: not a unix time: {since_text!r}"}, status=400)
    broker = request.app[BROKER_KEY]
    figures: dict[str, object] = {
        **request.app[SUMMARY_KEY].figures(),
        "memory": memory_info(broker.memory),
        "disk": disk_info(broker.disk),
        "store": request.app[STATS_KEY](),
    }
    loop = request.app[LOOP_KEY]
    if loop is not None:
        figures["event_loop"] = loop(since)
    return web.json_response(figures)


async def not_found(request: web.Request) -> web.Response:
    return web.json_response({"error": f"no such resource: {request.path}"}, status=404)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text, or OpenMetrics when the Accept header asks for it (integrations/metrics.py):
    the figures are read on the loop, the text is written in a thread."""
    families = collect(request.app[METRICS_KEY])
    body, content_type = await asyncio.to_thread(write, families, request.headers.get("Accept"))
    return web.Response(body=body, headers={"Content-Type": content_type})


def make_app(broker: Broker, stats: Callable[[], dict[str, int]],
             loop: LoopFigures | None = None, connections: ConnectionFigures | None = None,
             access: Access | None = None, *, connection_list: ConnectionsView | None = None,
             health: HealthView | None = None, history: HistoryView | None = None) -> web.Application:
    """`access`: security enabled (Basic auth, view/manage: integrations/http_security.py)."""
    middlewares: list[Middleware] = []
    if access is not None:
        from pagemq.integrations.http_security import security_middleware

        middlewares.append(security_middleware(access, broker))
    app = web.Application(middlewares=middlewares)
    app[BROKER_KEY] = broker
    app[STATS_KEY] = stats
    app[LOOP_KEY] = loop
    app[SUMMARY_KEY] = BrokerSummary(broker, connections, history)
    app[METRICS_KEY] = [BrokerCollector(broker, stats, loop, connections), StreamCollector(broker),
                        *process_collectors()]
    app.router.add_get("/api/broker", get_broker)
    app.router.add_get("/api/addresses", list_addresses)
    app.router.add_get("/api/addresses/{name}", get_address)
    app.router.add_get("/api/queues", list_queues)
    app.router.add_get("/api/queues/{name}", get_queue)
    app.router.add_get("/metrics", metrics)
    admin_api.register(app, broker, connections=connection_list, health_view=health)
    add_stream_routes(app, broker)
    console_api.register(app, broker, history)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


async def start_http(
    broker: Broker, stats: Callable[[], dict[str, int]], host: str | None, port: int,
    loop: LoopFigures | None = None, connections: ConnectionFigures | None = None, *,
    access: Access | None = None, tls: tuple[str, int, ssl.SSLContext] | None = None,
    max_connections: int = -1, connection_list: ConnectionsView | None = None,
    health: HealthView | None = None, history: HistoryView | None = None,
    connect_timeout: float = 0.0,
) -> web.AppRunner:
    """`host` None: no plaintext listener; `tls`: (host, port, context) of `http-tls`;
    `max_connections`: -1 no limit, else past it a 503; `connect_timeout`: seconds for a
    connection's first request head (and TLS handshake), 0 none (integrations/http_limits.py)."""
    from pagemq.integrations.http_limits import LimitedSite
    from pagemq.security.listener import ListenerPolicy

    app = make_app(broker, stats, loop, connections, access, connection_list=connection_list, health=health,
                   history=history)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    if host is not None:
        await LimitedSite(runner, host, port, reuse_address=True,
                          policy=ListenerPolicy("http", max_connections, connect_timeout)).start()
    if tls is not None:
        await LimitedSite(runner, tls[0], tls[1], reuse_address=True, ssl_context=tls[2],
                          policy=ListenerPolicy("http-tls", max_connections, connect_timeout)).start()
    return runner

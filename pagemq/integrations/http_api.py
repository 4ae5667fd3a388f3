"""The HTTP acceptor: management JSON and Prometheus metrics over aiohttp.

It reads the broker only through its management views (`Broker.address_info`,
`Broker.queue_info`), never its internals, so the JSON fields stay the contract of
interface.md whatever the core does inside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from pagemq.core.errors import BrokerError
from pagemq.core.views import disk_info, memory_info
from pagemq.integrations.limit_metrics import limit_metrics

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

BROKER_KEY: web.AppKey[Broker] = web.AppKey("broker")
STATS_KEY: web.AppKey[Callable[[], dict[str, int]]] = web.AppKey("stats")
# the server's event-loop lag figures (`server/loop_lag.py`), since a unix time or since start
LoopFigures = Callable[[float | None], dict[str, object]]
LOOP_KEY: web.AppKey[LoopFigures | None] = web.AppKey("loop")


def _error(exc: BrokerError) -> web.Response:
    return web.json_response({"error": exc.message, "code": exc.code}, status=exc.http_status)


async def list_addresses(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    return web.json_response(
        {"addresses": [broker.address_info(name) for name in sorted(broker.addresses)]}
    )


async def get_address(request: web.Request) -> web.Response:
    try:
        return web.json_response(request.app[BROKER_KEY].address_info(request.match_info["name"]))
    except BrokerError as exc:
        return _error(exc)


async def list_queues(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    return web.json_response({"queues": [broker.queue_info(name) for name in sorted(broker.queues)]})


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


_QUEUE_METRICS = (
    ("messages", "gauge", "Messages not yet acknowledged, delivering ones included"),
    ("messages_in_memory", "gauge", "Messages of the queue held in memory"),
    ("messages_paged", "gauge", "Messages of the queue in page files"),
    ("messages_delivering", "gauge", "Messages delivered and not yet acknowledged"),
    ("consumers", "gauge", "Consumers attached"),
    ("messages_added", "counter", "Messages added since start"),
    ("messages_acknowledged", "counter", "Messages acknowledged since start"),
    ("messages_expired", "counter", "Messages expired since start"),
    ("messages_killed", "counter", "Messages sent to the dead-letter address since start"),
)
_ADDRESS_METRICS = (
    ("messages", "gauge", "Messages held for all queues of the address"),
    ("messages_in_memory", "gauge", "Messages of the address held in memory"),
    ("messages_paged", "gauge", "Messages of the address in page files"),
    ("bytes_in_memory", "gauge", "Bytes the address holds in memory"),
    ("page_files", "gauge", "Page files on disk"),
    ("dropped_messages", "counter", "Messages dropped by the address-full policy"),
    ("paging", "gauge", "1 while the address is in page mode"),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(broker: Broker, stats: dict[str, int], loop: dict[str, object] | None = None) -> str:
    lines: list[str] = []
    addresses = [(name, broker.address_info(name)) for name in sorted(broker.addresses)]
    queues = [(name, broker.queue_info(name)) for name in sorted(broker.queues)]
    for field, kind, help_text in _ADDRESS_METRICS:
        metric = f"pagemq_address_{field}"
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
        for name, info in addresses:
            value = info[field]
            lines.append(f'{metric}{{address="{_label(name)}"}} {int(value)}')  # type: ignore[call-overload]
    for field, kind, help_text in _QUEUE_METRICS:
        metric = f"pagemq_queue_{field}"
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
        for name, info in queues:
            lines.append(
                f'{metric}{{queue="{_label(name)}",address="{_label(str(info["address"]))}"}} '
                f"{info[field]}"
            )
    memory = broker.memory
    lines += [
        "# HELP pagemq_memory_used_bytes Bytes of messages the broker holds in memory",
        "# TYPE pagemq_memory_used_bytes gauge",
        f"pagemq_memory_used_bytes {memory.used_bytes}",
        "# HELP pagemq_memory_used_messages Messages the broker holds in memory",
        "# TYPE pagemq_memory_used_messages gauge",
        f"pagemq_memory_used_messages {memory.used_messages}",
    ]
    lines += limit_metrics(broker, addresses)
    for key, value in sorted(stats.items()):
        metric = f"pagemq_store_{key}"
        lines += [f"# TYPE {metric} gauge", f"{metric} {value}"]
    if loop is not None:
        lines += [
            "# HELP pagemq_event_loop_lag_max_seconds Most the event loop ran late since start",
            "# TYPE pagemq_event_loop_lag_max_seconds gauge",
            f"pagemq_event_loop_lag_max_seconds {float(loop['lag_max_ms']) / 1000}",  # type: ignore[arg-type]
            "# HELP pagemq_event_loop_stalls_total Times the event loop ran 50 ms or more late",
            "# TYPE pagemq_event_loop_stalls_total counter",
            f"pagemq_event_loop_stalls_total {loop['stalls']}",
        ]
    return "\n".join(lines) + "\n"


async def metrics(request: web.Request) -> web.Response:
    loop = request.app[LOOP_KEY]
    text = render_metrics(request.app[BROKER_KEY], request.app[STATS_KEY](),
                          loop(None) if loop is not None else None)
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


def make_app(broker: Broker, stats: Callable[[], dict[str, int]],
             loop: LoopFigures | None = None) -> web.Application:
    app = web.Application()
    app[BROKER_KEY] = broker
    app[STATS_KEY] = stats
    app[LOOP_KEY] = loop
    app.router.add_get("/api/broker", get_broker)
    app.router.add_get("/api/addresses", list_addresses)
    app.router.add_get("/api/addresses/{name}", get_address)
    app.router.add_get("/api/queues", list_queues)
    app.router.add_get("/api/queues/{name}", get_queue)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


async def start_http(
    broker: Broker, stats: Callable[[], dict[str, int]], host: str, port: int,
    loop: LoopFigures | None = None,
) -> web.AppRunner:
    runner = web.AppRunner(make_app(broker, stats, loop), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner

"""The broker's open STOMP connections as operators see them, and what a deleted queue does
to the connections consuming from it.

The server keeps the set of its connection protocols (`stomp_server.start_stomp_server`);
this module reads it for `GET /api/connections` and is the core's `Admin.on_queue_deleted`
listener: a connection with a subscription on a queue an operator deleted gets an ERROR
naming the queue and is closed, as STOMP has no frame that ends one subscription from the
server side (RabbitMQ's STOMP adapter answers a deleted queue with an ERROR too).

Loop-only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pagemq.server.connection_log import format_peer

if TYPE_CHECKING:
    from pagemq.core.consumer import Consumer
    from pagemq.server.stomp_server import StompServerProtocol


def connection_view(connection: StompServerProtocol) -> dict[str, object] | None:
    session = connection.session
    if session is None:
        return None
    subscriptions = []
    in_flight = 0
    for sub in session.subscriptions.values():
        consumer = sub.consumer
        flying = len(consumer.in_flight) if consumer is not None else 0
        in_flight += flying
        subscriptions.append({
            "id": sub.id,
            "destination": sub.destination,
            "queue": sub.queue.name if sub.queue is not None else None,
            "ack": sub.ack_mode.value,
            "selector": consumer.selector.text if consumer is not None and consumer.selector else None,
            "browser": sub.browse is not None,
            "in_flight": flying,
        })
    user = getattr(session, "user", None) or session.login
    return {
        "session": session.session_id,
        "peer": format_peer(connection.peer) if connection.peer else None,
        "user": user,
        "client_id": session.client_id,
        "version": session.protocol.version,
        "subscriptions": subscriptions,
        "in_flight": in_flight,
        "transactions": len(session.transactions),
        "connected_since": connection.connected_at,
        "connected_seconds": round(max(0.0, time.time() - connection.connected_at), 3),
    }


def connections_view(connections: Iterable[StompServerProtocol]) -> Callable[[], list[dict[str, object]]]:
    def view() -> list[dict[str, object]]:
        found = [connection_view(c) for c in list(connections)]
        shown = [v for v in found if v is not None]
        shown.sort(key=lambda v: float(v["connected_since"]))  # type: ignore[arg-type]
        return shown

    return view


def queue_deleted_listener(connections: Iterable[StompServerProtocol]
                           ) -> Callable[[str, list[Consumer]], None]:
    """Ends the connections that consumed from a deleted queue, with an ERROR naming it."""

    def deleted(name: str, consumers: list[Consumer]) -> None:
        if not consumers:
            return
        gone = {id(c) for c in consumers}
        for connection in list(connections):
            session = connection.session
            if session is None or session.closing:
                continue
            if any(sub.consumer is not None and id(sub.consumer) in gone
                   for sub in session.subscriptions.values()):
                session.fail(f"queue {name} was deleted by an administrator", None)

    return deleted

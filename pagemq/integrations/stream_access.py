"""What a stream request (`/api/streams/...`, the Spark streaming source) needs on an
address when security is enabled, beside the broker-wide `view` / `manage`.

A Spark job that streams a queue is a consumer of that queue's address: giving it `manage`
(purge, delete, move on every queue) to read one queue would be far more than it needs. So
a stream request is also allowed with the permissions a STOMP client would need for the same
work: reading, planning and committing a queue need `consume` on the queue's address, and
making a durable subscription for a stream needs what a durable SUBSCRIBE needs (`consume`,
plus `create-address` / `create-durable-queue` when they do not exist yet). The broker-wide
`view` (reads) and `manage` (everything) keep working as for the rest of the API.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from pagemq.integrations.stream_api import DEFAULT_READER

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["StreamNeeds", "stream_needs"]

STREAMS = "/api/streams/"
SUBSCRIPTIONS = "/api/streams/subscriptions"

StreamNeeds = tuple[str, list[str]]  # (address, permissions needed on it)


async def stream_needs(request: web.Request, broker: Broker) -> StreamNeeds | None:
    """The address and permissions a stream request needs; None when it is no stream request
    (or its body names no address: the handler answers 400 to anyone allowed to ask)."""
    path = request.path
    if not path.startswith(STREAMS):
        return None
    if path == SUBSCRIPTIONS:
        return await _subscription_needs(request, broker)
    name = request.match_info.get("queue")
    if not name:
        return None
    queue = broker.queues.get(name)
    # An unknown queue is checked as the anycast address of that name (its own): a user who
    # may not consume it learns nothing about whether it exists.
    return (queue.address_name if queue is not None else name), ["consume"]


async def _subscription_needs(request: web.Request, broker: Broker) -> StreamNeeds | None:
    try:
        body = await request.json()  # aiohttp keeps the body: the handler reads it again
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    address, name = body.get("address"), body.get("subscription")
    client_id = body.get("client_id") or DEFAULT_READER
    if not isinstance(address, str) or not address or not isinstance(name, str):
        return None
    needed = ["consume"]
    if address not in broker.addresses:
        needed.append("create-address")
    if f"{client_id}.{name}" not in broker.queues:
        needed.append("create-durable-queue")
    return address, needed

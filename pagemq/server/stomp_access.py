"""Which permissions a STOMP frame needs on its address, beyond the frame's own.

Kept out of the session so the session only asks `SessionAccess.require` for each: a SEND
needs `send`, a SUBSCRIBE `consume` (`browse` for a browser), and a frame that would create
or remove something needs the permission for that too (docs/security.md):
- an address that does not exist yet: `create-address`;
- an anycast queue that does not exist yet (a SEND or SUBSCRIBE to `/queue/X`), a queue
  named by a SUBSCRIBE to `ADDRESS::QUEUE` that does not exist yet, or a new durable
  subscription: `create-durable-queue`;
- a plain topic subscription (its own queue, gone with it): `create-non-durable-queue`;
- a durable subscription whose selector changed (the old one is deleted and a new one made,
  as JMS): `delete-durable-queue` and `create-durable-queue`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST, MULTICAST
from pagemq.core.errors import SubscriptionError

if TYPE_CHECKING:
    from pagemq.core.broker import Broker
    from pagemq.core.queue import Queue
    from pagemq.server.destinations import Destination


def durable_subscription(broker: Broker, name: str) -> Queue | None:
    """The durable subscription queue `name` (`CLIENT-ID.SUBSCRIPTION-NAME`), None if there is
    none. Any other queue of that name (an anycast queue such as `orders.eu` for client-id
    `orders`, another connection's temporary subscription queue) is refused: a durable
    subscription's UNSUBSCRIBE or new selector deletes its queue, and must never delete
    those, with or without security."""
    queue = broker.queues.get(name)
    if queue is not None and (queue.routing_type != MULTICAST or queue.temporary or not queue.durable):
        kind = "anycast queue" if queue.routing_type == ANYCAST else "temporary subscription queue"
        raise SubscriptionError(f"{name!r} is not a durable subscription: it is the {kind} "
                                f"of address {queue.address_name!r}")
    return queue


def _creates(broker: Broker, destination: Destination) -> list[str]:
    needed = []
    address = broker.addresses.get(destination.address)
    if address is None:
        needed.append("create-address")
    if destination.queue is not None:
        if destination.queue not in broker.queues:
            needed.append("create-durable-queue")
    elif destination.routing_type == ANYCAST and (address is None or not address.anycast_queues):
        needed.append("create-durable-queue")
    return needed


def send_permissions(broker: Broker, destination: Destination) -> list[str]:
    return ["send", *_creates(broker, destination)]


def subscribe_permissions(broker: Broker, destination: Destination, *, browse: bool,
                          durable_queue: str | None, selector: str | None) -> list[str]:
    """`durable_queue`: the durable subscription's queue name, if it is one."""
    if browse:
        return ["browse"]
    needed = ["consume", *_creates(broker, destination)]
    if destination.routing_type == ANYCAST or destination.queue is not None:
        return needed
    if durable_queue is None:
        return [*needed, "create-non-durable-queue"]
    existing = durable_subscription(broker, durable_queue)
    if existing is None or existing.address_name != destination.address:
        needed.append("create-durable-queue")  # (another topic's: see replaced_subscription)
    elif (existing.filter_text or None) != (selector or None):
        needed += ["delete-durable-queue", "create-durable-queue"]
    return needed


def replaced_subscription(broker: Broker, destination: Destination, durable_queue: str | None) -> str | None:
    """The address of the durable subscription a SUBSCRIBE on another topic would delete
    (`delete-durable-queue` is needed there, as for an UNSUBSCRIBE); None if it deletes none."""
    if durable_queue is None or destination.routing_type == ANYCAST or destination.queue is not None:
        return None
    existing = durable_subscription(broker, durable_queue)
    if existing is None or existing.address_name == destination.address:
        return None
    return existing.address_name

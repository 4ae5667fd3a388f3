"""Which permissions a STOMP frame needs on its address, beyond the frame's own.

Kept out of the session so the session only asks `SessionAccess.require` for each: a SEND
needs `send`, a SUBSCRIBE `consume` (`browse` for a browser), and a frame that would create
or remove something needs the permission for that too (interface.md, Security):
- an address that does not exist yet: `create-address`;
- an anycast queue that does not exist yet (a SEND or SUBSCRIBE to `/queue/X`), or a new
  durable subscription: `create-durable-queue`;
- a plain topic subscription (its own queue, gone with it): `create-non-durable-queue`;
- a durable subscription whose selector changed (the old one is deleted and a new one made,
  as JMS): `delete-durable-queue` and `create-durable-queue`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST

if TYPE_CHECKING:
    from pagemq.core.broker import Broker
    from pagemq.server.destinations import Destination


def _creates(broker: Broker, destination: Destination) -> list[str]:
    needed = []
    address = broker.addresses.get(destination.address)
    if address is None:
        needed.append("create-address")
    if destination.routing_type == ANYCAST and (address is None or not address.anycast_queues):
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
    if destination.routing_type == ANYCAST:
        return needed
    if durable_queue is None:
        return [*needed, "create-non-durable-queue"]
    existing = broker.queues.get(durable_queue)
    if existing is None:
        needed.append("create-durable-queue")
    elif (existing.filter_text or None) != (selector or None):
        needed += ["delete-durable-queue", "create-durable-queue"]
    return needed

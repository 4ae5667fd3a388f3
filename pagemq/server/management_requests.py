"""STOMP's side of the management address (`core/management.py`): a SEND to
`activemq.management` is answered, not stored, and the answer sent to its `reply-to`
destination (`/queue/NAME`, `/topic/NAME` or a bare name, as any destination).

The reply carries `_AMQ_OperationSucceeded` (`true` / `false`), the request's
`correlation-id` when it had one, and the JSON body; it is non-persistent and admitted past
every limit (as the broker's own moves are), so a management request is answered on a
broker whose producers are held back by a full disk. A request without `reply-to` is
carried out and its answer dropped, as Artemis does.

Loop-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from pagemq.core.errors import InvalidDestination
from pagemq.core.management import MANAGEMENT_ADDRESS, OPERATION_SUCCEEDED, answer
from pagemq.protocol.stomp import events as ev
from pagemq.server.destinations import Destination, parse_destination
from pagemq.server.stomp_access import send_permissions

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["answer_request", "is_management_send", "management_permissions"]

REPLY_TO = "reply-to"
CORRELATION_ID = "correlation-id"


def is_management_send(event: object) -> TypeGuard[ev.Send]:
    """A SEND to the management address (it goes ahead of frames held behind a blocked
    SEND, as ACKs do: management is never blocked)."""
    if not isinstance(event, ev.Send):
        return False
    try:
        return parse_destination(event.destination).address == MANAGEMENT_ADDRESS
    except InvalidDestination:
        return False


def _reply_to(headers: dict[str, str]) -> Destination | None:
    reply_to = headers.get(REPLY_TO)
    return parse_destination(reply_to) if reply_to else None


def management_permissions(broker: Broker, headers: dict[str, str]) -> list[tuple[str, str]]:
    """(permission, address) pairs a management request needs when security is on: `manage`
    on the management address (as Artemis), and what a SEND to its reply-to would need, so
    the answer lands only where the user could send (an address it may not create is not
    created for it)."""
    needed = [("manage", MANAGEMENT_ADDRESS)]
    destination = _reply_to(headers)
    if destination is not None:
        needed += [(permission, destination.address)
                   for permission in send_permissions(broker, destination)]
    return needed


def answer_request(broker: Broker, headers: dict[str, str], body: bytes) -> None:
    """Answer one management request on its reply-to (InvalidDestination for a bad one,
    checked before anything is done)."""
    destination = _reply_to(headers)
    succeeded, result = answer(broker, headers, body)
    if destination is None:
        return
    reply_headers = {OPERATION_SUCCEEDED: "true" if succeeded else "false"}
    if CORRELATION_ID in headers:
        reply_headers[CORRELATION_ID] = headers[CORRELATION_ID]
    broker.send(destination.address, destination.routing_type, reply_headers, result.encode(),
                persistent=False, internal=True)

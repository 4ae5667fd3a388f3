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
from pagemq.server.destinations import parse_destination

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["answer_request", "is_management_send"]

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


def answer_request(broker: Broker, headers: dict[str, str], body: bytes) -> None:
    """Answer one management request on its reply-to (InvalidDestination for a bad one,
    checked before anything is done)."""
    reply_to = headers.get(REPLY_TO)
    destination = parse_destination(reply_to) if reply_to else None
    succeeded, result = answer(broker, headers, body)
    if destination is None:
        return
    reply_headers = {OPERATION_SUCCEEDED: "true" if succeeded else "false"}
    if CORRELATION_ID in headers:
        reply_headers[CORRELATION_ID] = headers[CORRELATION_ID]
    broker.send(destination.address, destination.routing_type, reply_headers, result.encode(),
                persistent=False, internal=True)

"""Subscription states per id, and what an ACK or NACK settles in each ack mode, as data.

A subscription id names nothing (NONE) until a SUBSCRIBE takes it; UNSUBSCRIBE (or the
connection ending) leaves the subscription UNSUBSCRIBED, which is terminal for it and frees
the id for a later SUBSCRIBE. ACK and NACK name a delivery (the 1.2 `ack` id, or the 1.0/1.1
`message-id`); the state is that of the subscription the delivery was made on, NONE when it
names no delivery of a live subscription (a browser's messages have no ack id to name).

`ACK_SCOPES` is the second half: what an allowed ACK/NACK settles depends on the
subscription's ack mode, and in mode `auto` there is nothing to settle. The session reads it
once per SUBSCRIBE, not per ACK.
"""

from __future__ import annotations

import enum

from pagemq.protocol.errors import RemoteProtocolError
from pagemq.protocol.stomp.events import Ack, Nack, Subscribe, Unsubscribe
from pagemq.protocol.stomp.state_table import ConnectionEnds, StateTable

__all__ = ["ACK_SCOPES", "SUBSCRIPTIONS", "AckScope", "SubState", "ack_mode_error", "render_ack_modes"]


class SubState(enum.Enum):
    NONE = "NONE"
    SUBSCRIBED = "SUBSCRIBED"
    UNSUBSCRIBED = "UNSUBSCRIBED"


_UNKNOWN_DELIVERY = "ACK/NACK of unknown id {name!r}"

SUBSCRIPTIONS: StateTable[SubState] = StateTable(
    states=SubState,
    moves={
        (SubState.NONE, Subscribe): SubState.SUBSCRIBED,
        (SubState.SUBSCRIBED, Ack): SubState.SUBSCRIBED,
        (SubState.SUBSCRIBED, Nack): SubState.SUBSCRIBED,
        (SubState.SUBSCRIBED, Unsubscribe): SubState.UNSUBSCRIBED,
        (SubState.SUBSCRIBED, ConnectionEnds): SubState.UNSUBSCRIBED,
    },
    refusals={
        (SubState.SUBSCRIBED, Subscribe): "subscription id {name!r} is already in use",
        # A durable subscription's name instead of an id is not refused: it removes the
        # durable queue whether or not this connection subscribed to it.
        (SubState.NONE, Unsubscribe): "no subscription with id {name!r}",
        (SubState.NONE, Ack): _UNKNOWN_DELIVERY,
        (SubState.NONE, Nack): _UNKNOWN_DELIVERY,
    },
    rows=[
        ("SUBSCRIBE", Subscribe),
        ("UNSUBSCRIBE", Unsubscribe),
        ("ACK", Ack),
        ("NACK", Nack),
        ("(connection ends)", ConnectionEnds),
    ],
)


class AckScope(enum.Enum):
    """What one ACK/NACK of a delivery settles."""

    CUMULATIVE = "that delivery and every earlier one of the subscription"
    ONE = "that delivery only"


# Ack mode (the SUBSCRIBE `ack` header) -> what its ACK/NACK settles; None: ACK/NACK refused.
ACK_SCOPES: dict[str, AckScope | None] = {
    "auto": None,
    "client": AckScope.CUMULATIVE,
    "client-individual": AckScope.ONE,
}

_NOTHING_TO_ACK = "subscription uses ack mode {mode}: nothing to acknowledge"


def ack_mode_error(mode: str) -> RemoteProtocolError:
    """The error for an ACK/NACK of a delivery on a subscription whose mode settles nothing."""
    return RemoteProtocolError(_NOTHING_TO_ACK.format(mode=mode))


def render_ack_modes() -> str:
    """`ACK_SCOPES` as Markdown: one row per ack mode."""
    lines = ["| ack mode | an ACK or NACK of a delivery settles |", "|---|---|"]
    for mode, scope in ACK_SCOPES.items():
        cell = scope.value if scope is not None else "error: " + _NOTHING_TO_ACK.format(mode=mode)
        lines.append(f"| {mode} | {cell} |")
    return "\n".join(lines) + "\n"

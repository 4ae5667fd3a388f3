"""Client frames as validated, normalised events: what the broker side acts on.

An event exists only if its frame was valid for the negotiated version: required headers
are present (a missing one is a `RemoteProtocolError` naming it, with the frame's `receipt`
as `receipt_id`), the 1.0/1.1/1.2 differences are resolved here (the ACK id header, a 1.0
SUBSCRIBE without `id`), so the session never looks at the version again.

The `from_*` builders take the frame's header dict and may keep it (the parser made it for
this frame alone); they do no per-field validation beyond what the spec requires, because
one of them runs for every SEND.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from pagemq.protocol.errors import RemoteProtocolError

__all__ = [
    "ACK_MODES",
    "BUILDERS",
    "Abort",
    "Ack",
    "Begin",
    "Commit",
    "Connect",
    "Disconnect",
    "Event",
    "Nack",
    "Send",
    "SendBatch",
    "Subscribe",
    "Unsubscribe",
]

ACK_MODES = ("auto", "client", "client-individual")


@dataclass(frozen=True, slots=True)
class Connect:
    """CONNECT or STOMP. `version` is the negotiated one; `heartbeat` is the client's (cx, cy)."""

    version: str
    host: str | None
    login: str | None
    passcode: str | None
    heartbeat: tuple[int, int]
    client_id: str | None
    headers: dict[str, str]


class Send(NamedTuple):
    """`headers` is every frame header but receipt, transaction and content-length.

    Immutable as the other events, but a named tuple rather than a frozen dataclass: that
    sets each field through `object.__setattr__`, 0.6 µs more for every SEND parsed."""

    destination: str
    headers: dict[str, str]
    body: bytes
    receipt: str | None
    transaction: str | None


class SendBatch(NamedTuple):
    """One batch SEND frame (`protocol.stomp.batch`). `messages` yields each message as
    (headers, body), its header dict complete (the frame's headers with its own on top),
    decoding it then: a bad one raises FrameError there. The rest weighs the batch before
    that: `size` is the frame body's length; `header_count`, `header_text` and `body_bytes`
    bound what its messages' headers (entries, and characters of names and values) and
    bodies add up to."""

    destination: str
    transaction: str
    messages: Iterator[tuple[dict[str, str], bytes]]
    receipt: str | None
    size: int
    message_count: int
    header_count: int
    header_text: int
    body_bytes: int


@dataclass(frozen=True, slots=True)
class Subscribe:
    """`headers` is every frame header (browser, prefetch, durable names are read from it)."""

    id: str
    destination: str
    ack: str
    selector: str | None
    headers: dict[str, str]
    receipt: str | None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    id: str | None
    destination: str | None
    headers: dict[str, str]
    receipt: str | None


@dataclass(frozen=True, slots=True)
class Ack:
    """`id` is the 1.2 `id` header, or the 1.0/1.1 `message-id` header."""

    id: str
    subscription: str | None
    transaction: str | None
    receipt: str | None


@dataclass(frozen=True, slots=True)
class Nack:
    """As `Ack`; STOMP 1.0 has no NACK."""

    id: str
    subscription: str | None
    transaction: str | None
    receipt: str | None


@dataclass(frozen=True, slots=True)
class Begin:
    transaction: str
    receipt: str | None


@dataclass(frozen=True, slots=True)
class Commit:
    transaction: str
    receipt: str | None


@dataclass(frozen=True, slots=True)
class Abort:
    transaction: str
    receipt: str | None


@dataclass(frozen=True, slots=True)
class Disconnect:
    receipt: str | None


Event = (Connect | Send | SendBatch | Subscribe | Unsubscribe | Ack | Nack | Begin | Commit | Abort
         | Disconnect)

# Headers that name an UNSUBSCRIBE target without an id (durable topic subscriptions).
DURABLE_NAME_HEADERS = ("durable-subscription-name", "activemq.subscriptionName")


def _required(command: str, headers: dict[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise RemoteProtocolError(
            f"{command} frame is missing the required {name} header", receipt_id=headers.get("receipt")
        )
    return value


def from_send(headers: dict[str, str], body: bytes, version: str) -> Send:
    destination = headers.get("destination") or _required("SEND", headers, "destination")
    receipt = headers.pop("receipt", None)
    transaction = headers.pop("transaction", None)
    headers.pop("content-length", None)
    return Send(destination, headers, body, receipt, transaction)


def from_subscribe(headers: dict[str, str], body: bytes, version: str) -> Subscribe:
    destination = _required("SUBSCRIBE", headers, "destination")
    # STOMP 1.0 made `id` optional; ActiveMQ then names the subscription after its destination.
    sub_id = headers.get("id") or (destination if version == "1.0" else None)
    if sub_id is None:
        sub_id = _required("SUBSCRIBE", headers, "id")
    ack = headers.get("ack") or "auto"
    if ack not in ACK_MODES:
        raise RemoteProtocolError(
            f"ack header must be auto, client or client-individual, got {ack!r}",
            receipt_id=headers.get("receipt"),
        )
    # Blank space around a selector means nothing: one made only of it selects everything,
    # and a durable subscription's selector compares without it.
    selector = (headers.get("selector") or "").strip() or None
    return Subscribe(sub_id, destination, ack, selector, headers,
                     headers.get("receipt"))


def from_unsubscribe(headers: dict[str, str], body: bytes, version: str) -> Unsubscribe:
    sub_id = headers.get("id") or None
    destination = headers.get("destination") or None
    if sub_id is None and version == "1.0":
        sub_id = destination  # the id a 1.0 SUBSCRIBE without one was given
    if sub_id is None and not any(headers.get(name) for name in DURABLE_NAME_HEADERS):
        _required("UNSUBSCRIBE", headers, "id")
    return Unsubscribe(sub_id, destination, headers, headers.get("receipt"))


_AckFields = tuple[str, str | None, str | None, str | None]


def _ack_fields(command: str, headers: dict[str, str], version: str) -> _AckFields:
    id_header = "id" if version == "1.2" else "message-id"
    return (
        _required(command, headers, id_header),
        headers.get("subscription"),
        headers.get("transaction"),
        headers.get("receipt"),
    )


def from_ack(headers: dict[str, str], body: bytes, version: str) -> Ack:
    return Ack(*_ack_fields("ACK", headers, version))


def from_nack(headers: dict[str, str], body: bytes, version: str) -> Nack:
    if version == "1.0":
        raise RemoteProtocolError("NACK is not part of STOMP 1.0", receipt_id=headers.get("receipt"))
    return Nack(*_ack_fields("NACK", headers, version))


def from_begin(headers: dict[str, str], body: bytes, version: str) -> Begin:
    return Begin(_required("BEGIN", headers, "transaction"), headers.get("receipt"))


def from_commit(headers: dict[str, str], body: bytes, version: str) -> Commit:
    return Commit(_required("COMMIT", headers, "transaction"), headers.get("receipt"))


def from_abort(headers: dict[str, str], body: bytes, version: str) -> Abort:
    return Abort(_required("ABORT", headers, "transaction"), headers.get("receipt"))


def from_disconnect(headers: dict[str, str], body: bytes, version: str) -> Disconnect:
    return Disconnect(headers.get("receipt"))


Builder = Callable[[dict[str, str], bytes, str], Event]

# Command -> builder for every frame a client may send once connected (its event type is
# in state.COMMAND_EVENTS). CONNECT/STOMP are built by the connection, which negotiates the
# version first.
BUILDERS: dict[str, Builder] = {
    "SEND": from_send,
    "SUBSCRIBE": from_subscribe,
    "UNSUBSCRIBE": from_unsubscribe,
    "ACK": from_ack,
    "NACK": from_nack,
    "BEGIN": from_begin,
    "COMMIT": from_commit,
    "ABORT": from_abort,
    "DISCONNECT": from_disconnect,
}

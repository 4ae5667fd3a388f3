"""Consumers of a queue: their credit window, ack mode and the deliveries they hold.

A consumer knows nothing of the protocol that feeds it: it hands each delivery to a
`DeliverySink` (the STOMP session implements one) and is told about acknowledgements by
tag, a per-consumer increasing integer. In-flight deliveries are kept in delivery order so a
cumulative (client mode) acknowledgement settles a prefix.

A consumer does not know its queue (whoever subscribed it does): an auto-acked delivery is
settled through the one callable it is handed, `auto_settle`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pagemq.core.errors import UnknownDelivery
from pagemq.core.selector.properties import message_view

if TYPE_CHECKING:
    from pagemq.core.delivery_latency import DeliveryLatency
    from pagemq.core.message import Message
    from pagemq.core.selector import Selector


class AckMode(enum.Enum):
    AUTO = "auto"
    CLIENT = "client"
    INDIVIDUAL = "client-individual"


class MessageRef:
    """One queue's hold on a message; the message object itself is shared (multicast)."""

    # Weakly referenced by the expiry timers (core.expiry): an entry must not keep an
    # acknowledged message alive until it would have expired.
    __slots__ = ("__weakref__", "delivery_count", "message", "page_pos", "pos", "queued")

    def __init__(self, message: Message, page_pos: tuple[int, int] | None = None) -> None:
        self.message = message
        self.delivery_count = 0
        # Pending in its queue (ready or held back), as far as the queue has said: False
        # means surely not (delivered, settled), so expiry need not look for it.
        self.queued = False
        # (page number, ordinal) when the message came from the address's page files.
        self.page_pos = page_pos
        self.pos = 0  # its place among the queue's pending refs (`Queue`), while it is there


class DeliverySink(Protocol):
    def deliver(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        """Write the delivery out; `ref.delivery_count > 1` means it is a redelivery."""


UNLIMITED = -1


class Consumer:
    """A subscription's view of one queue: credit, selector and unsettled deliveries."""

    __slots__ = (
        "ack_mode",
        "auto_settle",
        "bytes_in_flight",
        "closed",
        "in_flight",
        "key",
        "latency",
        "next_tag",
        "prefetch",
        "scanned",
        "selector",
        "sink",
        "window_bytes",
        "writable",
    )

    def __init__(
        self,
        sink: DeliverySink,
        *,
        auto_settle: Callable[[MessageRef], None] | None = None,
        key: object = None,
        ack_mode: AckMode = AckMode.AUTO,
        selector: Selector | None = None,
        prefetch: int = 1000,
        window_bytes: int = UNLIMITED,
        latency: DeliveryLatency | None = None,
    ) -> None:
        self.sink = sink
        self.latency = latency  # observes each first delivery's wait (core/delivery_latency.py)
        self.auto_settle = auto_settle
        self.key = key
        self.ack_mode = ack_mode
        self.selector = selector
        self.prefetch = prefetch if prefetch != 0 else 1
        self.window_bytes = window_bytes
        self.in_flight: dict[int, MessageRef] = {}
        self.bytes_in_flight = 0
        self.next_tag = 1
        self.writable = True
        self.closed = False
        # Per priority level, the span of pending positions whose refs this consumer's
        # selector has rejected: kept by the queue so that a consumer getting credit back
        # resumes where it stopped, and a SEND is offered only to the new message.
        self.scanned: list[tuple[int, int]] = []

    def has_credit(self) -> bool:
        if not self.writable or self.closed:
            return False
        if self.prefetch > 0 and len(self.in_flight) >= self.prefetch:
            return False
        return not (self.window_bytes > 0 and self.bytes_in_flight >= self.window_bytes)

    def accepts(self, message: Message) -> bool:
        selector = self.selector
        return selector is None or selector.matches_headers(message_view(message))

    def deliver(self, ref: MessageRef) -> None:
        """Hand one ref to the sink; the queue has already taken it off its pending list."""
        tag = self.next_tag
        self.next_tag = tag + 1
        ref.delivery_count += 1
        if ref.delivery_count == 1 and self.latency is not None:
            self.latency.observe(ref.message.timestamp)
        if self.ack_mode is AckMode.AUTO:
            self.sink.deliver(self, ref, tag)
            # Auto ack: settled as it is handed to the transport (at-most-once, as STOMP says).
            if self.auto_settle is not None:
                self.auto_settle(ref)
            return
        self.in_flight[tag] = ref
        self.bytes_in_flight += len(ref.message.body)
        self.sink.deliver(self, ref, tag)

    def take(self, tag: int) -> MessageRef:
        """Remove one unsettled delivery (individual ACK or NACK)."""
        ref = self.in_flight.pop(tag, None)
        if ref is None:
            raise UnknownDelivery(f"no unacknowledged message with ack id {tag} on this subscription")
        self.bytes_in_flight -= len(ref.message.body)
        return ref

    def take_through(self, tag: int) -> list[MessageRef]:
        """Remove every unsettled delivery up to and including `tag` (client ack mode)."""
        if tag not in self.in_flight:
            raise UnknownDelivery(f"no unacknowledged message with ack id {tag} on this subscription")
        taken: list[MessageRef] = []
        for key in list(self.in_flight):
            if key > tag:
                break
            taken.append(self.take(key))
        return taken

    def take_all(self) -> list[MessageRef]:
        refs = list(self.in_flight.values())
        self.in_flight.clear()
        self.bytes_in_flight = 0
        return refs

"""An address: its queues, the routing rule that picks among them, and its memory usage.

Routing follows Artemis: a multicast send reaches every multicast queue whose filter accepts
the message (one shared copy); an anycast send reaches one anycast queue, round-robin among
those whose filter accepts it. The address counts what it holds in memory so the broker can
decide when it is full and must page, drop, fail or block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pagemq.core.message import Message
    from pagemq.core.queue import Queue
    from pagemq.core.settings import AddressSettings

ANYCAST = "anycast"
MULTICAST = "multicast"
ROUTING_TYPES = (ANYCAST, MULTICAST)


class Address:
    def __init__(
        self,
        name: str,
        routing_type: str,
        settings: AddressSettings,
        *,
        address_id: int = 0,
    ) -> None:
        self.name = name
        self.routing_type = routing_type
        self.settings = settings
        self.address_id = address_id
        self.queues: dict[str, Queue] = {}
        self.anycast_queues = 0  # kept by the broker: a send to /queue/NAME needs one
        self.bytes_in_memory = 0
        self.messages_in_memory = 0
        self.dropped_messages = 0
        self.paging = False
        # Sends of a commit being admitted that will page: counted against page limits.
        self.staged_records = 0
        self.staged_bytes = 0
        # Messages of commits not decided yet (their page batch, or their commit's other page
        # batches, not written yet): transaction id -> its first message id here. Their ids
        # are taken, but they are in no queue yet, so a stream's range must end before them
        # (`undecided_from`), or later messages would carry it past them for good.
        self.undecided: dict[int, int] = {}
        self._anycast_next = 0

    # -- routing --------------------------------------------------------------------------

    def route(self, message: Message, routing_type: str) -> list[Queue]:
        """The queues this message goes to; filters are applied here, at routing time."""
        matching = [
            q for q in self.queues.values()
            if q.routing_type == routing_type and q.accepts(message)
        ]
        if routing_type == MULTICAST or len(matching) <= 1:
            return matching
        index = self._anycast_next % len(matching)
        self._anycast_next = index + 1
        return [matching[index]]

    def undecided_from(self) -> int | None:
        """The lowest message id of an undecided commit (None: there is none)."""
        return min(self.undecided.values()) if self.undecided else None

    # -- memory ---------------------------------------------------------------------------

    def is_full(self, size: int) -> bool:
        """Would one more message of `size` bytes pass this address's own limits?"""
        settings = self.settings
        if settings.max_size_bytes >= 0 and self.bytes_in_memory + size > settings.max_size_bytes:
            return True
        limit = settings.max_size_messages
        return limit >= 0 and self.messages_in_memory + 1 > limit

    def charge(self, size: int) -> None:
        self.bytes_in_memory += size
        self.messages_in_memory += 1

    def release(self, size: int) -> None:
        self.bytes_in_memory -= size
        self.messages_in_memory -= 1

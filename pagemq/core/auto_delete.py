"""Artemis' auto-delete: auto-created queues and addresses go once they are empty and unused.

`auto-delete-queues` deletes a queue that was auto-created (not named in the configuration)
once it has had no consumer and no more than `auto-delete-queues-message-count` messages
(-1: any number; they go with it) for `auto-delete-queues-delay` milliseconds;
`auto-delete-addresses` deletes an auto-created address once it has had no queue for
`auto-delete-addresses-delay` milliseconds. Durable topic subscriptions are not auto-created
queues here: they live until UNSUBSCRIBE (that is what makes them durable).

pagemq does not store whether a queue was auto-created: what the configuration does not
name counts as auto-created (a queue can only come from the configuration or from a client).
A periodic `tick` (every second, from the server) looks at every queue: a dict walk, about a
millisecond for 10,000 queues. The idle time starts when the tick first sees the queue idle,
so a delay is honoured to within the tick period, as Artemis' reaper
(`address-queue-scan-period`) does.

Loop-only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pagemq.core.address import MULTICAST

if TYPE_CHECKING:
    from pagemq.core.admin import Admin
    from pagemq.core.bindings import Bindings
    from pagemq.core.queue import Queue

log = logging.getLogger("pagemq.admin")


class AutoDelete:
    def __init__(self, bindings: Bindings, admin: Admin) -> None:
        self.bindings = bindings
        self.admin = admin
        self._configured_addresses: set[str] = set()
        self._configured_queues: set[str] = set()
        self._idle_queues: dict[int, float] = {}   # queue id -> when first seen idle
        self._idle_addresses: dict[str, float] = {}

    def configured(self, addresses: Iterable[str], queues: Iterable[str]) -> None:
        """Names the configuration declares: never auto-deleted."""
        self._configured_addresses.update(addresses)
        self._configured_queues.update(queues)

    def tick(self, now: float) -> int:
        """Delete what has been idle long enough (`now`: monotonic seconds); how many."""
        deleted = 0
        idle_queues: dict[int, float] = {}
        for queue in list(self.bindings.queues.values()):
            if not self._queue_idle(queue):
                continue
            since = self._idle_queues.get(queue.queue_id, now)
            if (now - since) * 1000 >= queue.settings.auto_delete_queues_delay:
                log.info("queue %r auto-deleted: no consumer and %d message(s) for %.1fs",
                         queue.name, _messages(queue), now - since)
                self.admin.delete_queue_now(queue)
                deleted += 1
            else:
                idle_queues[queue.queue_id] = since
        self._idle_queues = idle_queues
        idle_addresses: dict[str, float] = {}
        for address in list(self.bindings.addresses.values()):
            name = address.name
            if (address.queues or not address.settings.auto_delete_addresses
                    or name in self._configured_addresses):
                continue
            since = self._idle_addresses.get(name, now)
            if (now - since) * 1000 >= address.settings.auto_delete_addresses_delay:
                log.info("address %r auto-deleted: no queue for %.1fs", name, now - since)
                self.bindings.delete_address(address)
                deleted += 1
            else:
                idle_addresses[name] = since
        self._idle_addresses = idle_addresses
        return deleted

    def _queue_idle(self, queue: Queue) -> bool:
        settings = queue.settings
        if not settings.auto_delete_queues or queue.consumers or queue.name in self._configured_queues:
            return False
        if self.admin.busy(queue):
            return False  # an operator's action on it is in progress
        if queue.routing_type == MULTICAST and queue.durable:
            return False  # a durable subscription: kept until UNSUBSCRIBE
        limit = settings.auto_delete_queues_message_count
        return limit < 0 or _messages(queue) <= limit


def _messages(queue: Queue) -> int:
    paged = queue.cursor.unread if queue.cursor is not None else 0
    return queue.pending + queue.delivering + paged

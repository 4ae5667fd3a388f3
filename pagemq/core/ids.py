"""Broker-wide ids for messages, queues, addresses and journal records.

They grow with time and stay unique across restarts (start-up moves the next one above every
id recovered, paged messages' included): a queue's order across a restart is the order of its
message ids.
"""

from __future__ import annotations

import time


class Ids:
    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = int(time.time() * 1_000_000)

    def new_id(self) -> int:
        self._next += 1
        return self._next

    def above(self, *ids: int) -> None:
        """Every id handed out from now on is above `ids` (recovered ones)."""
        self._next = max([self._next, *ids])

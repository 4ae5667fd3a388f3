"""Client transactions: sends and acknowledgements held until COMMIT, dropped on ABORT.

Nothing a transaction holds is visible or durable before the commit; the broker then makes
every message and acknowledgement of it durable at one point, one journal transaction (which
also commits any page-file batches), so a crash leaves all or none of it (`core.commit.Transactions`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pagemq.core.message import estimate_memory

if TYPE_CHECKING:
    from pagemq.core.consumer import MessageRef
    from pagemq.core.queue import Queue


class PendingSend:
    """A transactional SEND as COMMIT will route it. `memory_size` is counted once here and
    handed on to the message the COMMIT makes of it. (A plain class: one is made for every
    SEND of a transaction, and a dataclass' `__post_init__` call costs a tenth of it.)"""

    __slots__ = ("address", "body", "expiration", "headers", "internal", "memory_size", "persistent",
                 "priority", "routing_type")

    def __init__(self, address: str, routing_type: str, headers: dict[str, str], body: bytes,
                 persistent: bool, priority: int, expiration: int, *, internal: bool = False) -> None:
        self.address = address
        self.routing_type = routing_type
        self.headers = headers
        self.body = body
        self.persistent = persistent
        self.priority = priority
        self.expiration = expiration
        self.internal = internal  # a copy the broker moves: routed as Router.route's `internal`
        self.memory_size = estimate_memory(headers, body)

    def __repr__(self) -> str:
        return (f"PendingSend({self.address!r}, {self.routing_type!r}, {self.headers!r}, "
                f"{len(self.body)} bytes, persistent={self.persistent})")


@dataclass(slots=True)
class Transaction:
    name: str
    sends: list[PendingSend] = field(default_factory=list)
    acks: list[tuple[Queue, MessageRef]] = field(default_factory=list)  # by the queue it came from
    # Charged to the broker's memory budget by `Transactions.stage` until commit or rollback.
    staged_bytes: int = 0
    # Set by `Transactions.commit` when the commit takes effect only once page files are written:
    # resolves then (the sender's later frames wait for it, so they stay behind the commit).
    applied: asyncio.Future[None] | None = None
    # The broker's own transaction moving messages (core.dead_letters): its acks settle the
    # originals of its copies, which are not acknowledgements by a consumer (not counted as
    # such), and on failure go back without being dead-lettered again.
    move: bool = False

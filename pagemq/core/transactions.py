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


@dataclass(slots=True)
class PendingSend:
    address: str
    routing_type: str
    headers: dict[str, str]
    body: bytes
    persistent: bool
    priority: int
    expiration: int
    # Counted once here, and handed on to the message the COMMIT makes of it.
    memory_size: int = field(init=False)

    def __post_init__(self) -> None:
        self.memory_size = estimate_memory(self.headers, self.body)


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

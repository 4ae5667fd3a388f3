"""Client transactions: sends and acknowledgements held until COMMIT, dropped on ABORT.

Nothing a transaction holds is visible or durable before the commit; the broker then writes
every message and acknowledgement of it as one store transaction, so a crash leaves all or
none of it (see `Broker.commit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pagemq.core.consumer import Consumer, MessageRef
from pagemq.core.message import estimate_memory


@dataclass(slots=True)
class PendingSend:
    address: str
    routing_type: str
    headers: dict[str, str]
    body: bytes
    persistent: bool
    priority: int
    expiration: int

    @property
    def memory_size(self) -> int:
        return estimate_memory(self.headers, self.body)


@dataclass(slots=True)
class Transaction:
    name: str
    sends: list[PendingSend] = field(default_factory=list)
    acks: list[tuple[Consumer, MessageRef]] = field(default_factory=list)
    # Charged to the broker's memory budget by `Broker.stage` until commit or rollback.
    staged_bytes: int = 0

"""The broker core as protocol sessions and the server see it: one object, made of parts that
each change for one reason.

- `Bindings` (core.bindings): addresses and queues, created durably, found, deleted.
- `Router` (core.routing): routing a send and admitting it (address-full and page policies).
- `Ledger` (core.ledger): who holds each message: reference counts, durable releases, memory
  charges, cursor-ack batching.
- `Transactions` (core.commit): staging, atomic commit, rollback.
- `DuplicateIds` (core.duplicates): the ids of recent sends per address (`_AMQ_DUPL_ID`).
- `DeadLetters` (core.dead_letters) with `ExpiryTimers` (core.expiry): dead letters, expiry.
- `Recovery` (core.recovery): start-up from the journal and page files.
- `views` (core.views): what the management API shows.

It knows nothing of STOMP: sessions call `send`, `subscribe`, `acknowledge` and friends with
plain values, and get plain values or `BrokerError`s back. The broker is also what its queues
report to (`QueueOwner`), the narrow interface they are handed instead of a reference to the
whole broker; paging is handed its store and the memory budget (`Bindings.pager`).

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST, MULTICAST
from pagemq.core.admin import Admin
from pagemq.core.auto_delete import AutoDelete
from pagemq.core.bindings import Bindings, PageStoreFactory, QueueStoreFactory
from pagemq.core.commit import Transactions
from pagemq.core.consumer import AckMode, Consumer, DeliverySink, MessageRef
from pagemq.core.dead_letters import ORIGINAL_DESTINATION, DeadLetters
from pagemq.core.delivery_latency import DeliveryLatency
from pagemq.core.duplicates import ENTRY_BYTES as DUPLICATE_ENTRY_BYTES
from pagemq.core.duplicates import DuplicateIds
from pagemq.core.expiry import ExpiryTimers
from pagemq.core.ids import Ids
from pagemq.core.ledger import Ledger
from pagemq.core.memory import MemoryAccountant
from pagemq.core.paged_expiry import PagedExpiry
from pagemq.core.recovery import Recovery
from pagemq.core.routing import DROP, MEMORY, PAGE, Blocked, Router
from pagemq.core.selector import compile_filter
from pagemq.core.views import (
    address_figures,
    address_info,
    address_pages,
    broker_totals,
    queue_info,
    queue_pages,
)
from pagemq.storage.api import MemoryStore, MessageStore

if TYPE_CHECKING:
    import asyncio
    from pathlib import Path

    from pagemq.core.address import Address
    from pagemq.core.queue import Queue
    from pagemq.core.settings import AddressSettingsRepository
    from pagemq.core.transactions import PendingSend, Transaction


class Broker:
    def __init__(
        self,
        settings: AddressSettingsRepository,
        *,
        store: MessageStore | None = None,
        memory: MemoryAccountant | None = None,
        page_stores: PageStoreFactory | None = None,
        queue_stores: QueueStoreFactory | None = None,
    ) -> None:
        self.settings = settings
        self.store: MessageStore = store or MemoryStore()
        self.memory = memory or MemoryAccountant()
        self.ids = Ids()
        self.expiry = ExpiryTimers(self.memory)
        self.delivery_latency = DeliveryLatency()  # every consumer's first deliveries, for /metrics
        self.addresses: dict[str, Address] = {}
        self.ledger = Ledger(self.store, self.memory, self.addresses)
        self.bindings = Bindings(
            settings, self.store, self.ids, self.ledger, self, self.memory, page_stores, queue_stores,
            self.addresses,
        )
        self.queues: dict[str, Queue] = self.bindings.queues
        self.duplicates = DuplicateIds(self.store, self.ids, lambda name: settings.match(name).id_cache_size)
        self.memory.count_part("duplicate_ids", self.duplicates.total, DUPLICATE_ENTRY_BYTES)
        self.router = Router(self.bindings, self.ledger, self.memory, self.store, self.ids, self.duplicates)
        self.transactions = Transactions(
            self.router, self.bindings, self.ledger, self.memory, self.store, self.ids
        )
        self.dead_letters = DeadLetters(self.transactions, self.ledger, self.expiry)
        self.recovery = Recovery(self.bindings, self.ledger, self.store, self.ids, self.duplicates)
        self.admin = Admin(self.bindings, self.ledger, self.router)  # management actions
        self.auto_delete = AutoDelete(self.bindings, self.admin)
        # What sessions, the server and the parts call, bound straight to the part that does
        # it (no extra call per SEND or ACK). Bound here, these cannot be overridden by a
        # subclass; the transaction calls below are methods (a test's broker overrides them).
        self.new_id = self.ids.new_id
        self.flush = self.ledger.flush
        self.acks_to_write = self.ledger.acks_to_write
        self.write_acks = self.ledger.write_acks
        self.acknowledge = self.ledger.acknowledge
        self.begin_acks = self.ledger.begin_acks
        self.end_acks = self.ledger.end_acks
        self.settle = self.ledger.settle
        self.recover = self.recovery.recover
        self.forget_record = self.recovery.forget_record
        self.forget_stale = self.recovery.forget_stale
        self.pager = self.bindings.pager
        self.ensure_address = self.bindings.ensure_address
        self.ensure_queue = self.bindings.ensure_queue
        self.delete_queue = self.bindings.delete_queue
        self.send = self.router.send
        self.begin_sends = self.router.begin_sends
        self.end_sends = self.router.end_sends
        self.wait_for_memory = self.router.wait_for_memory
        self.cancel_wait = self.router.cancel_wait
        self.disk = self.router.disk
        self.expire_due = self.dead_letters.expire_due
        self.paged_expiry = PagedExpiry(self.bindings.pagers, self.dead_letters.expired)
        self.expire_paged = self.paged_expiry.scan
        self.expired = self.dead_letters.expired
        self.dead_letter = self.dead_letters.exhausted
        self.given_back = self.ledger.given_back
        self.expires = self.expiry.add

    @property
    def paging_directory(self) -> Path:
        return self.recovery.paging_directory

    @paging_directory.setter
    def paging_directory(self, directory: Path) -> None:
        self.recovery.paging_directory = directory

    @property
    def stale_records(self) -> list[int]:
        return self.recovery.stale_records

    # -- consuming and settling -----------------------------------------------------------

    def subscribe(
        self,
        queue: Queue,
        sink: DeliverySink,
        *,
        key: object = None,
        ack_mode: AckMode = AckMode.AUTO,
        selector: str | None = None,
        prefetch: int = 1000,
        window_bytes: int = -1,
    ) -> Consumer:
        consumer = Consumer(
            sink, auto_settle=partial(self.ledger.settle, queue), key=key, ack_mode=ack_mode,
            selector=compile_filter(selector), prefetch=prefetch, window_bytes=window_bytes,
            latency=self.delivery_latency,
        )
        queue.add_consumer(consumer)
        return consumer

    def close_consumer(self, queue: Queue, consumer: Consumer) -> None:
        queue.remove_consumer(consumer)
        if queue.temporary and not queue.consumers and not queue.deleted:
            self.bindings.delete_queue(queue)

    def nack(self, queue: Queue, refs: list[MessageRef], *, transacted: bool = False) -> None:
        """Return refs for redelivery; `transacted`: they were held by a transaction."""
        if transacted:
            queue.transacted -= len(refs)
        queue.return_refs(refs)
        queue.dispatch()

    # -- transactions ---------------------------------------------------------------------

    def hold_for_transaction(self, queue: Queue, refs: list[MessageRef]) -> None:
        """ACKed or NACKed in a transaction: out of the consumer's window (as ActiveMQ
        Classic extends the prefetch for them), so one that takes more than its prefetch
        before COMMIT is not left waiting for messages that never come. The caller has put
        them in the transaction first: the dispatch may fail the session, and its rollback
        must give them back."""
        self.transactions.hold(queue, refs)
        self.ledger.room_made(queue, len(refs))

    def stage(self, tx: Transaction, send: PendingSend) -> None:
        self.transactions.stage(tx, send)

    def stage_all(self, tx: Transaction, sends: list[PendingSend]) -> None:
        self.transactions.stage_all(tx, sends)

    def check_room(self, tx: Transaction, size: int, sends: int) -> None:
        self.transactions.check_room(tx, size, sends)

    def commit(self, tx: Transaction) -> asyncio.Future[None] | None:
        return self.transactions.commit(tx)

    def rollback(self, tx: Transaction) -> None:
        self.transactions.rollback(tx)

    # -- management views -----------------------------------------------------------------

    def address_info(self, name: str) -> dict[str, object]:
        return address_info(self.bindings, name)

    def queue_info(self, name: str) -> dict[str, object]:
        return queue_info(self.bindings, name)

    def address_figures(self, name: str) -> dict[str, int | bool]:
        return address_figures(self.bindings, name)

    def queue_pages(self, name: str) -> dict[str, object]:
        return queue_pages(self.bindings, name)

    def address_pages(self, name: str) -> dict[str, object]:
        return address_pages(self.bindings, name)

    def totals(self) -> dict[str, int]:
        return broker_totals(self.bindings)


__all__ = [
    "ANYCAST", "DROP", "MEMORY", "MULTICAST", "ORIGINAL_DESTINATION", "PAGE", "Blocked", "Broker",
]

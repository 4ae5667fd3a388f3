"""The broker core: addresses and queues, routing a send, settling deliveries.

It knows nothing of STOMP: protocol sessions call `send`, `subscribe`, `acknowledge` and
friends with plain values, and get plain values or `BrokerError`s back. Everything about a
message's lifetime that spans queues lives here: the shared copy's reference counts, memory
accounting, persistence of messages and acks, address-full policies, expiry and dead letters.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST, MULTICAST, Address
from pagemq.core.consumer import AckMode, Consumer, DeliverySink, MessageRef
from pagemq.core.errors import (
    AddressFull,
    BrokerError,
    InvalidDestination,
    InvalidSelector,
    NotFound,
    StorageFailure,
    SubscriptionError,
    TransactionError,
)
from pagemq.core.memory import MemoryAccountant
from pagemq.core.message import Message
from pagemq.core.paging import AddressPager, PageCursor
from pagemq.core.queue import Queue
from pagemq.core.selector.summary import PageSummary
from pagemq.storage.api import (
    AddressRecord,
    MemoryStore,
    MessageStore,
    QueueRecord,
    Recovered,
    StoreAck,
    StoreMessage,
    StoreOp,
)
from pagemq.storage.paging.file_queue_store import FilePagedQueueStore
from pagemq.storage.paging.queue_store import AckWriter, CursorRecords, PagedQueueStore

if TYPE_CHECKING:
    from pagemq.core.settings import AddressSettings, AddressSettingsRepository
    from pagemq.core.transactions import PendingSend, Transaction
    from pagemq.storage.paging.page_store import PageStore

log = logging.getLogger("pagemq.broker")

ORIGINAL_DESTINATION = "original-destination"


PageStoreFactory = Callable[[str, "AddressSettings"], "PageStore"]
"""Opens (creating if needed) and starts the page store of an address."""

QueueStoreFactory = Callable[[str, "AddressSettings", CursorRecords], PagedQueueStore]
"""Opens the paged-queue store of an address (one in memory, for tests, in place of files)."""

MEMORY, PAGE, DROP = "memory", "page", "drop"


class Blocked(Exception):
    """BLOCK policy: the address is full; retry the same send once memory is released."""

    def __init__(self, address: Address) -> None:
        super().__init__(address.name)
        self.address = address


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
        self._page_stores = page_stores
        self._queue_stores = queue_stores or (self._file_queue_store if page_stores else None)
        self.store: MessageStore = store or MemoryStore()
        self.memory = memory or MemoryAccountant()
        self.addresses: dict[str, Address] = {}
        self.queues: dict[str, Queue] = {}
        self._queues_by_id: dict[int, Queue] = {}
        self._next_id = int(time.time() * 1_000_000)
        self.paging_directory: Path = Path("data/paging")
        # Cursor records found at start-up whose page no longer exists; see forget_stale().
        self.stale_records: list[int] = []
        # Paged-queue stores holding acks not yet written; see acks_to_write().
        self._unwritten_acks: dict[AckWriter, None] = {}
        # Address/queue records written since the last paged send; see _after_bindings().
        self._bindings_dirty = False
        self._bindings_durable: asyncio.Future[None] | None = None
        # The last journal write batch watched for failure; see _watch_write.
        self._watched_write: asyncio.Future[None] | None = None

    # -- ids ------------------------------------------------------------------------------

    def new_id(self) -> int:
        """Broker-wide increasing ids for messages, queues and addresses, unique across restarts."""
        self._next_id += 1
        return self._next_id

    # -- durability -----------------------------------------------------------------------

    def flush(self) -> asyncio.Future[None]:
        """Resolves once everything done so far is durable, gathered cursor acks included:
        what a RECEIPT for an ACK or a COMMIT waits for."""
        self.write_acks()
        return self.store.flush()

    def acks_to_write(self, writer: AckWriter) -> None:
        """`writer` gathered acks of paged messages: write them at the end of this loop turn
        (at once when no loop runs), one record per page for all of the turn's ACKs."""
        first = not self._unwritten_acks
        self._unwritten_acks[writer] = None
        if first:
            try:
                asyncio.get_running_loop().call_soon(self.write_acks)
            except RuntimeError:
                self.write_acks()

    def write_acks(self) -> None:
        writers, self._unwritten_acks = self._unwritten_acks, {}
        for writer in writers:
            writer.write_acks()

    # -- start-up -------------------------------------------------------------------------

    def recover(self) -> int:
        """Rebuild durable addresses, queues and their messages from the store."""
        recovered = self.store.load()
        self._next_id = max(self._next_id, recovered.max_id + 1)
        for record in recovered.addresses:
            self._create_address(record.name, record.routing_type, record.address_id)
        for queue_record in recovered.queues:
            address = self.addresses.get(queue_record.address)
            if address is None:
                address = self._create_address(queue_record.address, queue_record.routing_type, 0)
            self._create_queue(
                address, queue_record.name, queue_record.routing_type,
                queue_id=queue_record.queue_id, filter_text=queue_record.filter,
                durable=True, temporary=False,
            )
        count = 0
        for item in recovered.messages:
            message = item.message
            queues = [self._queues_by_id[qid] for qid in item.queue_ids if qid in self._queues_by_id]
            if not queues:
                continue
            self._hold(message, queues, durable=len(queues))
            for queue in queues:
                queue.add_recovered(MessageRef(message))
            count += 1
        if self._page_stores is not None:
            count += self._recover_paging(recovered)
        return count

    def _recover_paging(self, recovered: Recovered) -> int:
        from pagemq.storage.paging.page_store import PageStore

        paged = 0
        read: set[str] = set()
        for name in sorted(PageStore.discover(self.paging_directory)):
            address = self.addresses.get(name)
            if address is None:
                log.warning("page folder for unknown address %r: kept, not read", name)
                continue
            pager = self.pager(address)
            # Ids stay above every paged message too (the journal may no longer hold the
            # newest): the order of a queue across a restart is the order of its ids.
            self._next_id = max(self._next_id, pager.store.last_message_id() + 1)
            self.stale_records.extend(pager.recover(
                recovered.cursor_acks, recovered.cursor_completes, recovered.page_tx_commits))
            paged += pager.messages_paged
            read.add(name)
        # Commit records of page transactions whose address pages no more: nothing to commit.
        self.stale_records.extend(
            record.record_id for record in recovered.page_tx_commits if record.address not in read
        )
        # Cursor records of queues that no longer exist belong to no pager: forget them.
        self.stale_records.extend(
            record.record_id for record in [*recovered.cursor_acks, *recovered.cursor_completes]
            if record.queue_id not in self._queues_by_id
        )
        return paged

    def forget_record(self, record_id: int) -> None:
        """Delete a cursor record; after shutdown began, the next start-up finds it stale."""
        try:
            self.store.delete_record(record_id)
        except (OSError, LookupError) as exc:
            log.debug("cursor record %d kept for the next start-up: %s", record_id, exc)

    def forget_stale(self) -> int:
        """Delete the stale cursor records found by recovery (the journal must be running)."""
        stale, self.stale_records = self.stale_records, []
        for record_id in stale:
            self.forget_record(record_id)
        return len(stale)

    def pager(self, address: Address) -> AddressPager:
        """The address's pager, its page store opened on first use."""
        pager = address.pager
        if pager is None:
            if self._queue_stores is None:
                raise StorageFailure("paging is not configured on this broker")
            records = CursorRecords(self.store, self.new_id, self.acks_to_write)
            store = self._queue_stores(address.name, address.settings, records)
            pager = address.pager = AddressPager(address, store, self.memory)
        return pager  # type: ignore[return-value]

    def _file_queue_store(self, name: str, settings: AddressSettings, records: CursorRecords
                          ) -> PagedQueueStore:
        assert self._page_stores is not None
        return FilePagedQueueStore(self._page_stores(name, settings), records,
                                   summaries=PageSummary.from_bytes)

    # -- addresses and queues -------------------------------------------------------------

    def _create_address(self, name: str, routing_type: str, address_id: int) -> Address:
        address = Address(name, routing_type, self.settings.match(name), address_id=address_id)
        self.addresses[name] = address
        return address

    def ensure_address(self, name: str, routing_type: str, *, auto: bool = True) -> Address:
        """The address `name`, created (durably) if it does not exist and creation is allowed."""
        address = self.addresses.get(name)
        if address is not None:
            return address
        if not name:
            raise InvalidDestination("destination names an empty address")
        if auto and not self.settings.match(name).auto_create_addresses:
            raise NotFound(f"address {name!r} does not exist and auto-create-addresses is off")
        address = self._create_address(name, routing_type, self.new_id())
        self.store.add_address(AddressRecord(address.address_id, name, routing_type))
        self._bindings_dirty = True
        return address

    def _create_queue(
        self,
        address: Address,
        name: str,
        routing_type: str,
        *,
        queue_id: int,
        filter_text: str | None,
        durable: bool,
        temporary: bool,
    ) -> Queue:
        selector = compile_filter(filter_text)
        queue = Queue(
            self, address, queue_id, name,
            filter_text=filter_text, filter_selector=selector, routing_type=routing_type,
            durable=durable, temporary=temporary,
        )
        address.queues[name] = queue
        if routing_type == ANYCAST:
            address.anycast_queues += 1
        self.queues[name] = queue
        self._queues_by_id[queue_id] = queue
        return queue

    def ensure_queue(
        self,
        address: Address,
        name: str,
        routing_type: str,
        *,
        filter_text: str | None = None,
        durable: bool = True,
        temporary: bool = False,
    ) -> Queue:
        existing = self.queues.get(name)
        if existing is not None:
            if existing.address is not address:
                raise SubscriptionError(
                    f"queue {name!r} already exists on address {existing.address.name!r}"
                )
            return existing
        queue = self._create_queue(
            address, name, routing_type, queue_id=self.new_id(), filter_text=filter_text,
            durable=durable, temporary=temporary,
        )
        if durable:
            self.store.add_queue(
                QueueRecord(queue.queue_id, name, address.name, routing_type, filter_text)
            )
            self._bindings_dirty = True
        return queue

    def delete_queue(self, queue: Queue) -> None:
        """Remove a queue with every message it holds (temporary or unsubscribed durable)."""
        refs = queue.remove_pending()
        for consumer in list(queue.consumers):
            consumer.closed = True
            queue.consumers.remove(consumer)
            refs.extend(consumer.take_all())
        cursor = queue.cursor
        for ref in refs:
            if ref.page_pos is not None and cursor is not None:
                cursor.settle(ref, acked=False)  # type: ignore[attr-defined]
            else:
                self._release_ref(queue, ref)
        if cursor is not None:
            cursor.drop()  # type: ignore[attr-defined]
        queue.deleted = True
        if queue.address.queues.pop(queue.name, None) is not None and queue.routing_type == ANYCAST:
            queue.address.anycast_queues -= 1
        self.queues.pop(queue.name, None)
        self._queues_by_id.pop(queue.queue_id, None)
        if queue.durable:
            self.store.delete_queue(queue.queue_id)

    # -- sending --------------------------------------------------------------------------

    def make_message(
        self,
        address: Address,
        headers: dict[str, str],
        body: bytes,
        *,
        persistent: bool,
        priority: int,
        expiration: int,
    ) -> Message:
        return Message(
            self.new_id(), address.name, headers, body,
            persistent=persistent, priority=priority, expiration=expiration,
            timestamp=int(time.time() * 1000),
        )

    def send(
        self,
        address_name: str,
        routing_type: str,
        headers: dict[str, str],
        body: bytes,
        *,
        persistent: bool = False,
        priority: int = 4,
        expiration: int = 0,
        internal: bool = False,
    ) -> asyncio.Future[None] | None:
        """Route and store one message (page file or journal) and hand it to its queues;
        the future resolves when it is durable.

        Raises `AddressFull` (FAIL policy), `Blocked` (BLOCK policy: retry later) or another
        `BrokerError`. A DROP policy returns None, as does a send nobody subscribes to.
        `internal`: a message the broker moves (dead letter, expiry); see `admit`.
        """
        routed = self._route(address_name, routing_type, headers, body, persistent, priority, expiration,
                             internal=internal)
        if routed is None:
            return None
        address, message, queues, decision = routed
        if decision is PAGE:
            return self._after_bindings(self.pager(address).page([(message, queues)]))
        durable = [q.queue_id for q in queues if q.durable] if message.persistent else []
        future = None
        if durable:
            future = self.store.store_message(message, tuple(durable), sync=True)
        self._deliver_new(message, queues, len(durable))
        if future is not None:
            message.write = future
            if future is not self._watched_write:
                self._watched_write = future
                future.add_done_callback(self._writes_done)
        return future

    def _writes_done(self, future: asyncio.Future[None]) -> None:
        """A journal write batch is done. If it failed, its messages still pending leave
        their queues (the clients get an ERROR and may send them again; one delivered
        already stays with its consumer). Each message names its batch (`Message.write`)
        rather than the broker keeping a list per batch: that costs nothing per SEND, and
        the scan of pending refs is only paid when a write fails."""
        if future is self._watched_write:
            self._watched_write = None
        if future.cancelled() or future.exception() is None:
            return
        for queue in list(self.queues.values()):
            for ref in [r for r in queue if r.message.write is future]:
                if not queue.remove_pending_ref(ref):
                    continue
                queue.counters.added -= 1
                self._durable_release(queue, ref.message)
                self._unhold(queue, ref.message)

    def _route(
        self, address_name: str, routing_type: str, headers: dict[str, str], body: bytes,
        persistent: bool, priority: int, expiration: int, *, internal: bool = False,
    ) -> tuple[Address, Message, list[Queue], str] | None:
        """A new message, its queues and where it goes (MEMORY or PAGE); None when it is not
        stored at all (no queue takes it, or the DROP policy). FAIL and BLOCK raise.
        `internal` (a dead-letter or expiry move) pages where a policy would refuse."""
        address = self.ensure_address(address_name, routing_type)
        if routing_type == ANYCAST and not address.anycast_queues:
            self.ensure_queue(address, address_name, ANYCAST)
        message = self.make_message(
            address, headers, body, persistent=persistent, priority=priority, expiration=expiration
        )
        queues = address.route(message, routing_type)
        if not queues:
            return None
        decision = self.admit(address, message, internal=internal)
        if decision is DROP:
            return None
        return address, message, queues, decision

    def _after_bindings(self, future: asyncio.Future[None] | None) -> asyncio.Future[None] | None:
        """A paged message's durability also needs its address and queue records, which are
        in the journal, not the page file: its future waits for them too while they are
        unsynced (one journal flush covers every record written before it)."""
        if future is None:
            return None
        if self._bindings_dirty:
            self._bindings_dirty = False
            self._bindings_durable = self.store.flush()
        bindings = self._bindings_durable
        if bindings is None:
            return future
        if bindings.done() and not bindings.cancelled() and bindings.exception() is None:
            self._bindings_durable = None
            return future
        return all_of([future, bindings])

    def admit(self, address: Address, message: Message, *, internal: bool = False) -> str:
        """Apply the address-full policy: MEMORY, PAGE or DROP (FAIL and BLOCK raise).

        An `internal` message (moved by the broker) is paged where the policy would drop,
        fail or block it, and ignores page limits: the broker never destroys what it moves.
        """
        if address.paging:
            return PAGE if internal else self._page_limit(address, message)
        size = message.memory_size
        if not (address.is_full(size) or self.memory.would_exceed(size)):
            return MEMORY
        if internal:
            if self._queue_stores is None:
                return MEMORY
            address.paging = True
            log.info("address %r entered page mode", address.name)
            return PAGE
        policy = address.settings.address_full_policy
        if policy == "DROP":
            address.dropped_messages += 1
            return DROP
        if policy == "FAIL":
            raise AddressFull(
                f"address {address.name!r} is full (address-full-policy FAIL): message not stored"
            )
        if policy == "BLOCK":
            raise Blocked(address)
        address.paging = True
        log.info("address %r entered page mode", address.name)
        return self._page_limit(address, message)

    def _page_limit(self, address: Address, message: Message) -> str:
        """page-limit-bytes / page-limit-messages with page-full-policy, counted on disk now."""
        settings = address.settings
        pager = address.pager
        if pager is None or (settings.page_limit_bytes < 0 and settings.page_limit_messages < 0):
            return PAGE
        over_messages = 0 <= settings.page_limit_messages <= pager.records_on_disk + address.staged_records
        over_bytes = 0 <= settings.page_limit_bytes <= pager.bytes_on_disk + address.staged_bytes
        if not (over_messages or over_bytes):
            return PAGE
        if settings.page_full_policy == "DROP":
            address.dropped_messages += 1
            return DROP
        raise AddressFull(
            f"address {address.name!r} reached its page limit (page-full-policy FAIL): "
            "message not stored"
        )

    def wait_for_memory(self, address: Address, resume: Callable[[], None]) -> Callable[[], bool]:
        """Call `resume` once `address` can take a message again (BLOCK policy)."""

        def retry() -> bool:
            if address.is_full(0) or self.memory.is_full():
                return False
            resume()
            return True

        self.memory.wait(retry)
        return retry

    def _hold(self, message: Message, queues: list[Queue], *, durable: int) -> None:
        """Charge one shared copy to the address and the global budget; count its holders."""
        message.refs = len(queues)
        message.durable_refs = durable
        size = message.memory_size
        queues[0].address.charge(size)
        self.memory.charge(size)

    def _deliver_new(self, message: Message, queues: list[Queue], durable: int) -> list[MessageRef]:
        self._hold(message, queues, durable=durable)
        refs = []
        for queue in queues:
            ref = MessageRef(message)
            refs.append(ref)
            queue.add(ref)
        return refs

    # -- settling -------------------------------------------------------------------------

    def acknowledge(self, queue: Queue, refs: Iterable[MessageRef]) -> None:
        for ref in refs:
            self.settle(queue, ref)
        queue.dispatch()

    def settle(self, queue: Queue, ref: MessageRef) -> None:
        """Acknowledge one ref during dispatch (auto ack); the dispatch loop goes on by itself."""
        queue.counters.acknowledged += 1
        self._release_ref(queue, ref)

    def _release_ref(self, queue: Queue, ref: MessageRef) -> None:
        """One queue is done with a message: drop its durable record and memory when last."""
        if ref.page_pos is not None:
            queue.cursor.settle(ref, acked=True)  # type: ignore[union-attr]
            return
        message = ref.message
        last = self._durable_release(queue, message)
        if last is not None:
            self.store.acknowledge(message.message_id, queue.queue_id, last=last)
        self._unhold(queue, message)

    def _durable_release(self, queue: Queue, message: Message) -> bool | None:
        """Count `queue`'s durable hold on `message` off: whether it was the last one, or
        None when the queue held no durable record of it."""
        if message.persistent and queue.durable and message.durable_refs > 0:
            message.durable_refs -= 1
            return message.durable_refs == 0
        return None

    def _unhold_all(self, address: Address, message: Message) -> None:
        """Undo `_hold` of a message that never reached its queues (a refused commit)."""
        message.refs = 0
        size = message.memory_size
        address.release(size)
        self.memory.release(size)

    def _unhold(self, queue: Queue, message: Message) -> None:
        """Count `queue`'s hold on `message` off; the last one frees its memory."""
        message.refs -= 1
        if message.refs == 0:
            size = message.memory_size
            queue.address.release(size)
            self.memory.release(size)

    def exhausted(self, queue: Queue, ref: MessageRef) -> bool:
        """Dead-letter a ref returned unacknowledged once too often; True if it was moved.

        False (the ref goes back to its queue) when the dead-letter address cannot take it
        at all: a message is never destroyed because its dead-letter address is unusable.
        """
        limit = queue.address.settings.max_delivery_attempts
        if limit <= 0 or ref.delivery_count < limit:
            return False
        if not self._move(queue, ref, queue.address.settings.dead_letter_address):
            return False
        queue.counters.killed += 1
        return True

    def expire(self, queue: Queue, ref: MessageRef) -> None:
        """Move an expired ref to the expiry address; with none usable it is discarded
        (it has expired: as Artemis without an expiry address), with a warning."""
        queue.counters.expired += 1
        if not self._move(queue, ref, queue.address.settings.expiry_address):
            self._release_ref(queue, ref)

    def _move(self, queue: Queue, ref: MessageRef, target: str) -> bool:
        """Send a copy to `target` (an anycast address), then settle the original once the
        copy is durable; False, with the original untouched, if `target` cannot take it.

        The copy is admitted past the target's full policy (DROP, FAIL and BLOCK page it
        instead), so a full dead-letter queue never destroys what is moved into it.
        """
        message = ref.message
        if not target or target == queue.address.name:
            self._release_ref(queue, ref)
            return True
        headers = dict(message.headers)
        headers.setdefault(ORIGINAL_DESTINATION, message.headers.get("destination", message.address))
        headers["destination"] = target
        try:
            future = self.send(target, ANYCAST, headers, message.body, persistent=message.persistent,
                               priority=message.priority, internal=True)
        except (BrokerError, Blocked, OSError) as exc:
            log.warning("message %s stays in queue %r: it cannot be moved to %r: %s",
                        message.message_id, queue.name, target, exc)
            return False
        if future is None:
            self._release_ref(queue, ref)
            return True

        def copied(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is None:
                self._release_ref(queue, ref)
                if not queue.deleted:
                    queue.dispatch()  # room under the read limits: read on
                return
            log.warning("message %s stays in queue %r: its copy to %r was not stored",
                        message.message_id, queue.name, target)
            if not queue.deleted:
                queue.return_refs([ref], dead_letter=False)
                queue.dispatch()

        future.add_done_callback(copied)
        return True

    def expire_scan(self) -> int:
        """Expire pending refs whose time has passed (queues without consumers see no dispatch)."""
        now_ms = int(time.time() * 1000)
        expired = 0
        for queue in list(self.queues.values()):
            stale = [ref for ref in chain(queue, queue.held) if ref.message.expired(now_ms)]
            if not stale:
                continue
            queue.take_pending(stale)
            for ref in stale:
                self.expire(queue, ref)
                expired += 1
        return expired

    # -- consuming ------------------------------------------------------------------------

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
            queue, sink, key=key, ack_mode=ack_mode, selector=compile_filter(selector),
            prefetch=prefetch, window_bytes=window_bytes,
        )
        queue.add_consumer(consumer)
        return consumer

    def close_consumer(self, consumer: Consumer) -> None:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.temporary and not queue.consumers and not queue.deleted:
            self.delete_queue(queue)

    def nack(self, consumer: Consumer, refs: list[MessageRef], *, transacted: bool = False) -> None:
        """Return refs for redelivery; `transacted`: they were held by a transaction."""
        if transacted:
            consumer.queue.transacted -= len(refs)
        consumer.queue.return_refs(refs)
        consumer.queue.dispatch()

    def hold_for_transaction(self, consumer: Consumer, refs: list[MessageRef]) -> None:
        """Deliveries ACKed or NACKed inside a transaction: no longer in flight, not settled
        until COMMIT or ABORT, and still counted by their queue (as Artemis counts them
        delivering)."""
        consumer.queue.transacted += len(refs)

    # -- transactions ---------------------------------------------------------------------

    def stage(self, tx: Transaction, send: PendingSend) -> None:
        """Hold a transactional SEND until COMMIT, charged to the one memory budget.

        Pending sends are memory like any other: they count toward `global-max-size` (so
        other traffic pages sooner), and the pending sends of all open transactions together
        may not pass it: the SEND that would is refused and the rest of the broker goes on.
        """
        size = send.memory_size
        limit = self.memory.max_bytes
        if limit >= 0 and self.memory.staged_bytes + size > limit:
            raise TransactionError(
                f"transaction {tx.name!r} cannot hold this send: pending transactional sends "
                f"would pass global-max-size ({limit} bytes); commit in smaller transactions"
            )
        tx.sends.append(send)
        tx.staged_bytes += size
        self.memory.stage(size)

    def _unstage(self, tx: Transaction) -> None:
        if tx.staged_bytes:
            self.memory.unstage(tx.staged_bytes, len(tx.sends))
            tx.staged_bytes = 0

    def commit(self, tx: Transaction) -> asyncio.Future[None] | None:
        """Apply a transaction's sends and acks atomically; the future says when it is durable.

        Every send is admitted before anything is stored, each against what the earlier
        ones of the transaction already take (memory held, page-limit room), so a commit
        of 100 sends to an address holding 10 pages 90 of them, and a FAIL (or BLOCK)
        policy refuses (or delays) the whole commit, leaving nothing behind.

        One journal transaction is the commit point. A commit that pages to one address and
        writes nothing else is a single page batch instead. Any other commit that pages
        first writes its page batches marked with a transaction id (cursors do not read past
        them) and waits for their fsync; then the journal transaction holds its messages,
        acks, cursor acks and a commit record per paged batch, and only then do sends reach
        their queues. A crash before that record voids the batches at start-up, as Artemis'
        page transaction records do. `tx.applied` resolves when the commit has taken effect:
        the sender's connection holds its later frames until then.
        """
        self._unstage(tx)
        routed, paged, ops = self._route_sends(tx)
        if not paged:
            return self._apply(tx, routed, ops, [], 0)
        if len(paged) == 1 and not ops and not tx.acks:
            ((address, items),) = paged.items()
            written = self._after_bindings(self.pager(address).page(items))
            self._apply(tx, routed, ops, [], 0)
            return written
        txid = self.new_id()
        writes = [(self.pager(address), address.pager.page(items, txid=txid))  # type: ignore[union-attr]
                  for address, items in paged.items()]
        pending = [future for _pager, future in writes if future is not None]
        if not pending:  # nothing persistent was paged: nothing to wait for
            return self._apply(tx, routed, ops, [pager for pager, _f in writes], txid)
        loop = pending[0].get_loop()
        durable: asyncio.Future[None] = loop.create_future()
        tx.applied = loop.create_future()
        left = len(pending)

        def written(_future: asyncio.Future[None]) -> None:
            nonlocal left
            left -= 1
            if left:
                return
            failures = [_failure(f) for _p, f in writes]
            try:
                if any(failures):
                    stored = [(p, e is None) for (p, _f), e in zip(writes, failures, strict=True)]
                    self._abandon(tx, routed, stored, txid)
                    durable.set_exception(next(e for e in failures if e is not None))
                else:
                    _chain(self._apply(tx, routed, ops, [p for p, _f in writes], txid), durable)
            except BaseException as exc:  # the commit's client must hear of it
                if not durable.done():
                    durable.set_exception(exc)
            finally:
                tx.applied.set_result(None)  # type: ignore[union-attr]

        for future in pending:
            future.add_done_callback(written)
        return durable

    def _apply(
        self, tx: Transaction, routed: list[tuple[Message, list[Queue], int]], ops: list[StoreOp],
        pagers: list[AddressPager], txid: int,
    ) -> asyncio.Future[None] | None:
        """The commit point: one journal transaction, then the effects (see `commit`)."""
        paged_acks: dict[PageCursor, list[MessageRef]] = {}
        for consumer, ref in tx.acks:
            queue = consumer.queue
            if ref.page_pos is not None:
                paged_acks.setdefault(queue.cursor, []).append(ref)  # type: ignore[arg-type]
                continue
            last = self._durable_release(queue, ref.message)
            if last is not None:
                ops.append(StoreAck(ref.message.message_id, queue.queue_id, last))
        for cursor, refs in paged_acks.items():
            ops.extend(cursor.ack_records(refs))
        ops.extend(pager.commit_tx(txid) for pager in pagers)
        future = self.store.transaction(ops, sync=True) if ops else None
        for message, queues, _durable in routed:
            for queue in queues:
                queue.add(MessageRef(message))
        touched: set[Queue] = set()
        for consumer, ref in tx.acks:
            queue = consumer.queue
            queue.counters.acknowledged += 1
            queue.transacted -= 1
            touched.add(queue)
            if ref.page_pos is not None:
                queue.cursor.settle(ref, acked=True, journaled=True)  # type: ignore[union-attr]
                continue
            self._unhold(queue, ref.message)
        for pager in pagers:  # after the in-memory sends: they were admitted first
            pager.release_tx(txid)
        for queue in touched:
            queue.dispatch()
        return future

    def _abandon(
        self, tx: Transaction, routed: list[tuple[Message, list[Queue], int]],
        writes: list[tuple[AddressPager, bool]], txid: int,
    ) -> None:
        """A page batch of the commit was not stored: nothing of it takes effect."""
        for message, queues, _durable in routed:
            self._unhold_all(queues[0].address, message)
        for pager, written in writes:
            pager.abandon_tx(txid, written=written)
        self._return_acks(tx)

    def _route_sends(self, tx: Transaction) -> tuple[
        list[tuple[Message, list[Queue], int]], dict[Address, list[tuple[Message, list[Queue]]]],
        list[StoreOp],
    ]:
        """A transaction's sends: (held in memory, with their durable queue count), (to page,
        per address), and the store ops of the held ones."""
        routed: list[tuple[Message, list[Queue], int]] = []
        paged: dict[Address, list[tuple[Message, list[Queue]]]] = {}
        ops: list[StoreOp] = []
        try:
            for send in tx.sends:
                routed_send = self._route(send.address, send.routing_type, send.headers, send.body,
                                          send.persistent, send.priority, send.expiration)
                if routed_send is None:
                    continue
                address, message, queues, decision = routed_send
                if decision is PAGE:
                    paged.setdefault(address, []).append((message, queues))
                    address.staged_records += 1
                    address.staged_bytes += len(message.body)
                    continue
                durable = [q.queue_id for q in queues if q.durable] if send.persistent else []
                if durable:
                    ops.append(StoreMessage(message, tuple(durable)))
                # Held (charged) now, so the next send of the transaction is admitted
                # against it; the refs are added once the store transaction is written.
                self._hold(message, queues, durable=len(durable))
                routed.append((message, queues, len(durable)))
        except BaseException:
            for message, queues, _durable in routed:
                self._unhold_all(queues[0].address, message)
            raise
        finally:
            for address in paged:
                address.staged_records = address.staged_bytes = 0
        return routed, paged, ops

    def rollback(self, tx: Transaction) -> None:
        """Discard the sends; acknowledged deliveries go back to their queues, in order."""
        self._unstage(tx)
        self._return_acks(tx)

    def _return_acks(self, tx: Transaction) -> None:
        by_queue: dict[Queue, list[MessageRef]] = {}
        for consumer, ref in tx.acks:
            by_queue.setdefault(consumer.queue, []).append(ref)
        for queue, refs in by_queue.items():
            queue.transacted -= len(refs)
            queue.return_refs(refs)
            queue.dispatch()

    # -- management views -----------------------------------------------------------------

    def address_info(self, name: str) -> dict[str, object]:
        address = self.addresses.get(name)
        if address is None:
            raise NotFound(f"no address named {name!r}")
        pager = address.pager
        paged = pager.messages_paged if pager is not None else 0  # type: ignore[attr-defined]
        messages = sum(q.pending + q.delivering for q in address.queues.values()) + paged
        return {
            "name": address.name,
            "routing_type": address.routing_type,
            "queues": sorted(address.queues),
            "paging": address.paging,
            "messages": messages,
            "messages_in_memory": address.messages_in_memory,
            "messages_paged": paged,
            "bytes_in_memory": address.bytes_in_memory,
            "page_files": pager.page_files() if pager is not None else 0,  # type: ignore[attr-defined]
            "dropped_messages": address.dropped_messages,
            "settings": address.settings.to_config_dict(),
        }

    def queue_info(self, name: str) -> dict[str, object]:
        queue = self.queues.get(name)
        if queue is None:
            raise NotFound(f"no queue named {name!r}")
        delivering = queue.delivering
        counters = queue.counters
        paged = queue.cursor.unread if queue.cursor is not None else 0  # type: ignore[attr-defined]
        return {
            "name": queue.name,
            "address": queue.address.name,
            "routing_type": queue.routing_type,
            "filter": queue.filter_text,
            "durable": queue.durable,
            "messages": queue.pending + delivering + paged,
            "messages_in_memory": queue.pending + delivering,
            "messages_paged": paged,
            "messages_delivering": delivering,
            "consumers": len(queue.consumers),
            "messages_added": counters.added,
            "messages_acknowledged": counters.acknowledged,
            "messages_expired": counters.expired,
            "messages_killed": counters.killed,
        }


def all_of(futures: list[asyncio.Future[None]]) -> asyncio.Future[None] | None:
    """One future for several durable writes (a commit touching the journal and page files)."""
    if not futures:
        return None
    if len(futures) == 1:
        return futures[0]
    return asyncio.ensure_future(_gather(futures))


async def _gather(futures: list[asyncio.Future[None]]) -> None:
    await asyncio.gather(*futures)


def _failure(future: asyncio.Future[None] | None) -> BaseException | None:
    if future is None:
        return None
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()


def _chain(source: asyncio.Future[None] | None, target: asyncio.Future[None]) -> None:
    """Settle `target` as `source` settles (at once for None: nothing to wait for)."""
    if source is None:
        target.set_result(None)
        return

    def settle(done: asyncio.Future[None]) -> None:
        if target.done():
            return
        failure = _failure(done)
        if failure is None:
            target.set_result(None)
        else:
            target.set_exception(failure)

    source.add_done_callback(settle)


def compile_filter(text: str | None):
    """Compile a selector or queue filter; a bad one is the client's error, not ours."""
    if text is None or not text.strip():
        return None
    from pagemq.selector import SelectorError, compile

    try:
        return compile(text)
    except SelectorError as exc:
        raise InvalidSelector(f"invalid selector {text!r}: {exc}") from exc


__all__ = ["ANYCAST", "MULTICAST", "Blocked", "Broker"]

"""The broker's addresses and queues: creating them (durably), finding them, deleting them.

Address and queue records go to the journal as they are created; `dirty` tells the router
that records were written since the last paged send, whose receipt must then also wait for
them (a page file does not hold them; see `Router.after_bindings`). Each address that has
paged has an `AddressPager`, opened on first use through the page-store factory.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST, Address
from pagemq.core.errors import InvalidDestination, NotFound, StorageFailure, SubscriptionError
from pagemq.core.paging import AddressPager
from pagemq.core.queue import Queue, QueueOwner
from pagemq.core.selector import compile_filter
from pagemq.core.selector.summary import PageSummary
from pagemq.storage.api import AddressRecord, QueueRecord
from pagemq.storage.paging.file_queue_store import FilePagedQueueStore
from pagemq.storage.paging.queue_store import CursorRecords, PagedQueueStore

if TYPE_CHECKING:
    from pagemq.core.ids import Ids
    from pagemq.core.ledger import Ledger
    from pagemq.core.memory import MemoryAccountant
    from pagemq.core.settings import AddressSettings, AddressSettingsRepository
    from pagemq.storage.api import MessageStore
    from pagemq.storage.paging.page_store import PageStore

PageStoreFactory = Callable[[str, "AddressSettings"], "PageStore"]
"""Opens (creating if needed) and starts the page store of an address."""

QueueStoreFactory = Callable[[str, "AddressSettings", CursorRecords], PagedQueueStore]
"""Opens the paged-queue store of an address (one in memory, for tests, in place of files)."""


class Bindings:
    def __init__(
        self,
        settings: AddressSettingsRepository,
        store: MessageStore,
        ids: Ids,
        ledger: Ledger,
        owner: QueueOwner,
        memory: MemoryAccountant,
        page_stores: PageStoreFactory | None,
        queue_stores: QueueStoreFactory | None,
        addresses: dict[str, Address],
    ) -> None:
        self.settings = settings
        self.store = store
        self.ids = ids
        self.ledger = ledger
        self.owner = owner
        self.page_stores = page_stores
        self.queue_stores = queue_stores or (self._file_queue_store if page_stores else None)
        self.memory = memory
        self.addresses = addresses  # shared with the ledger, which charges them
        self.queues: dict[str, Queue] = {}
        self.queues_by_id: dict[int, Queue] = {}
        self.pagers: dict[str, AddressPager] = {}
        # Address/queue records written since the last paged send; see Router.after_bindings.
        self.dirty = False
        # What deleted queues had counted (added, acknowledged): broker-wide totals keep them,
        # so a rate computed from the totals does not drop when a queue goes.
        self.retired_added = 0
        self.retired_acknowledged = 0

    # -- addresses ------------------------------------------------------------------------

    def create_address(self, name: str, routing_type: str, address_id: int) -> Address:
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
        address = self.create_address(name, routing_type, self.ids.new_id())
        self.store.add_address(AddressRecord(address.address_id, name, routing_type))
        self.dirty = True
        return address

    def pager(self, address: Address) -> AddressPager:
        """The address's pager, its page store opened on first use."""
        pager = self.pagers.get(address.name)
        if pager is not None and pager.address is not address:
            pager.address = address  # the address was deleted and made again: same page folder
        if pager is None:
            if self.queue_stores is None:
                raise StorageFailure("paging is not configured on this broker")
            records = CursorRecords(self.store, self.ids.new_id, self.ledger.acks_to_write)
            store = self.queue_stores(address.name, address.settings, records)
            pager = self.pagers[address.name] = AddressPager(address, store, self.memory)
        return pager

    def _file_queue_store(self, name: str, settings: AddressSettings, records: CursorRecords
                          ) -> PagedQueueStore:
        assert self.page_stores is not None
        return FilePagedQueueStore(self.page_stores(name, settings), records,
                                   summaries=PageSummary.from_bytes)

    # -- queues ---------------------------------------------------------------------------

    def create_queue(
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
        queue = Queue(
            self.owner, address.name, address.settings, queue_id, name,
            filter_text=filter_text, filter_selector=compile_filter(filter_text),
            routing_type=routing_type, durable=durable, temporary=temporary,
        )
        address.queues[name] = queue
        if routing_type == ANYCAST:
            address.anycast_queues += 1
        self.queues[name] = queue
        self.queues_by_id[queue_id] = queue
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
            if existing.address_name != address.name:
                raise SubscriptionError(
                    f"queue {name!r} already exists on address {existing.address_name!r}"
                )
            return existing
        queue = self.create_queue(
            address, name, routing_type, queue_id=self.ids.new_id(), filter_text=filter_text,
            durable=durable, temporary=temporary,
        )
        if durable:
            self.store.add_queue(
                QueueRecord(queue.queue_id, name, address.name, routing_type, filter_text)
            )
            self.dirty = True
        return queue

    def address_of(self, queue: Queue) -> Address:
        return self.addresses[queue.address_name]

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
                cursor.settle(ref, acked=False)
            else:
                self.ledger.release(queue, ref)
        pager = self.pagers.get(queue.address_name)
        if pager is not None and queue.queue_id in pager.cursors:
            pager.cursors[queue.queue_id].drop()
        queue.deleted = True
        self.retired_added += queue.counters.added
        self.retired_acknowledged += queue.counters.acknowledged
        address = self.address_of(queue)
        if address.queues.pop(queue.name, None) is not None and queue.routing_type == ANYCAST:
            address.anycast_queues -= 1
        self.queues.pop(queue.name, None)
        self.queues_by_id.pop(queue.queue_id, None)
        if queue.durable:
            self.store.delete_queue(queue.queue_id)
        if pager is not None:  # its backlog may have been the last one: new messages stay in memory
            pager.maybe_leave_paging()

    def delete_address(self, address: Address) -> None:
        """Remove an address whose queues are deleted, with its durable record. Its pager,
        if it paged, stays open (its page folder is the same if the address comes back)."""
        assert not address.queues, "delete the address's queues first"
        if self.addresses.get(address.name) is address:
            del self.addresses[address.name]
        if address.address_id:
            self.store.delete_address(address.address_id)
            self.dirty = True

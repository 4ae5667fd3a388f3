"""Routing a send and admitting it: which queues take a message, and whether it stays in
memory, goes to the address's page files, or is dropped, refused or held back.

Admission follows Artemis' `address-full-policy` (PAGE / DROP / FAIL / BLOCK) against the
address's own `max-size-*` and the broker's `global-max-size`, then, once paging, the page
limits (`page-limit-*` with `page-full-policy`). A message the broker moves itself (dead
letter, expiry) is admitted past every policy: it pages instead, so nothing is destroyed.

A send's future resolves when it is durable: the journal write of its message, or the fsync
of its page batch plus the journal's address and queue records it depends on. A send whose
`_AMQ_DUPL_ID` the address has seen is not stored (core.duplicates); its future is the
original's, while that is not yet durable.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST
from pagemq.core.consumer import MessageRef
from pagemq.core.disk import FAIL, DiskGuard
from pagemq.core.duplicates import DUPLICATE_ID_HEADER
from pagemq.core.errors import AddressFull, SubscriptionError
from pagemq.core.futures import all_of, chain, failure
from pagemq.core.message import Message
from pagemq.storage.api import DuplicateIdRecord, StoreMessage

if TYPE_CHECKING:
    from pagemq.core.address import Address
    from pagemq.core.bindings import Bindings
    from pagemq.core.duplicates import DuplicateIds
    from pagemq.core.ids import Ids
    from pagemq.core.ledger import Ledger
    from pagemq.core.memory import MemoryAccountant
    from pagemq.core.paging import AddressPager
    from pagemq.core.queue import Queue
    from pagemq.storage.api import MessageStore

log = logging.getLogger("pagemq.broker")

MEMORY, PAGE, DROP = "memory", "page", "drop"

GROUP_BYTES = 256 * 1024
"""Paged sends appended in one write: at most this many bytes (each counted at its memory
estimate, which is more than it takes encoded), and no more than the live page has left
(or a whole page, when the first does not fit there), so pages keep to page-size-bytes."""

Routed = tuple["Address", Message, list["Queue"], str]
"""A routed send: its address, the new message, its queues, MEMORY or PAGE."""


class _PageGroup:
    """Paged sends to one address waiting to be appended in one write."""

    __slots__ = ("bytes", "future", "items", "limit", "pager")

    def __init__(self, pager: AddressPager, limit: int) -> None:
        self.pager = pager
        self.limit = limit
        self.items: list[tuple[Message, list[Queue]]] = []
        self.bytes = 0
        # Settles as the append does: at once after it when nothing in it is persistent,
        # else once its batch is fsynced; a failed append fails every send of the group.
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class Blocked(Exception):
    """BLOCK policy: the address is full; retry the same send once memory is released."""

    def __init__(self, address: Address) -> None:
        super().__init__(address.name)
        self.address = address


class Router:
    def __init__(
        self, bindings: Bindings, ledger: Ledger, memory: MemoryAccountant, store: MessageStore, ids: Ids,
        duplicates: DuplicateIds,
    ) -> None:
        self.bindings = bindings
        self.duplicates = duplicates
        self.ledger = ledger
        self.memory = memory
        self.store = store
        self.ids = ids
        # Disk limits (core/disk.py): set from outside by the server's disk monitor.
        self.disk = DiskGuard()
        self._bindings_durable: asyncio.Future[None] | None = None
        # The last journal write batch watched for failure; see _writes_done.
        self._watched_write: asyncio.Future[None] | None = None
        # Paged sends of one socket read, appended together (begin_sends/end_sends).
        self._grouping = False
        self._group: _PageGroup | None = None
        # Addresses whose BLOCK policy lets the COMMIT being routed through whole: its sends
        # to one of them are more than its max-size-bytes (core/commit.py).
        self.block_waived: frozenset[str] = frozenset()

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
        only_queue: str | None = None,
    ) -> asyncio.Future[None] | None:
        """Route and store one message (page file or journal) and hand it to its queues;
        the future resolves when it is durable.

        Raises `AddressFull` (FAIL policy), `Blocked` (BLOCK policy: retry later) or another
        `BrokerError`. A DROP policy returns None, as does a send nobody subscribes to.
        `internal`: a message the broker moves (dead letter, expiry); see `admit`.
        `only_queue`: of the queues the address routes it to, only this one (a dead letter
        retried to the subscription it came from; all of them when that queue is gone).
        """
        # What the broker moves (dead letters, expiry, an operator's move or retry) is never
        # a duplicate: the id was seen when the message first came, and dropping the copy now
        # would lose the message.
        dup_id = headers.get(DUPLICATE_ID_HEADER) if headers and not internal else None
        if dup_id is not None:
            self.flush_sends()  # stored in its turn, after the sends grouped before it
            seen, original = self.duplicates.seen(address_name, dup_id)
            if seen:
                return original
        routed = self.route(address_name, routing_type, headers, body, persistent, priority, expiration,
                            internal=internal, only_queue=only_queue)
        if dup_id is not None:
            return self._send_once(address_name, routed, dup_id, persistent)
        if routed is None:
            return None
        address, message, queues, decision = routed
        if decision is PAGE:
            pager = self.bindings.pagers.get(address.name)
            if pager is None or pager.address is not address:
                pager = self.bindings.pager(address)
            if self._grouping and not internal:
                return self._pend(pager, message, queues)
            self.flush_sends()  # a send outside the group is stored after it
            durable = pager.page([(message, queues)])
            if self.bindings.dirty or self._bindings_durable is not None:
                return self.after_bindings(durable)
            return durable
        return self._keep(message, address, queues)

    # -- the paged sends of one read ------------------------------------------------------

    def begin_sends(self) -> None:
        """From now until `end_sends`, consecutive paged sends to one address are appended
        together: one call into the page store, one write and one future for all of them,
        instead of one each (a producer's socket read carries dozens of SENDs); each is
        still its own page frame, so damage costs one message. The caller runs nothing
        but sends in between (any other frame ends the group first), so nothing else sees
        a message routed but not yet appended. Without a running loop (a tool, a test
        driving the broker by hand) there is no future to give, and nothing is grouped."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._grouping = True

    def end_sends(self) -> None:
        self._grouping = False
        self.flush_sends()

    def flush_sends(self) -> None:
        """Append the pending group now (its futures settle as the append's does)."""
        group = self._group
        if group is None:
            return
        self._group = None
        try:
            durable = self.after_bindings(group.pager.page(group.items, atomic=False))
        except Exception as exc:  # nothing of the group was stored: each send's future says so
            group.future.set_exception(exc)
            return
        chain(durable, group.future)

    def _pend(self, pager: AddressPager, message: Message, queues: list[Queue]) -> asyncio.Future[None]:
        group = self._group
        size = message.memory_size + 8 * len(queues)  # more than it takes encoded
        if group is not None and (group.pager is not pager or group.bytes + size > group.limit):
            self.flush_sends()
            group = None
        if group is None:
            group = self._group = _PageGroup(pager, min(GROUP_BYTES, pager.room(size)))
        group.items.append((message, queues))
        group.bytes += size
        return group.future

    def _keep(self, message: Message, address: Address, queues: list[Queue],
              record: DuplicateIdRecord | None = None) -> asyncio.Future[None] | None:
        """Hold a routed message in memory, journaled when persistent to a durable queue;
        `record`, its duplicate id's, in the same journal transaction (a crash keeps both or
        neither)."""
        durable = [q.queue_id for q in queues if q.durable] if message.persistent else []
        future = None
        if durable:
            future = (self.store.store_message(message, tuple(durable), sync=True) if record is None else
                      self.store.transaction([StoreMessage(message, tuple(durable)), record], sync=True))
        elif record is not None:
            self.store.add_duplicate_id(record)  # (the message itself is not journaled)
        self.ledger.hold(message, address, len(queues), durable=len(durable))
        for queue in queues:
            queue.add(MessageRef(message))
        if future is not None:
            message.write = future
            if future is not self._watched_write:
                self._watched_write = future
                future.add_done_callback(self._writes_done)
        elif record is not None:
            return self.store.flush()
        return future

    def _send_once(
        self, address_name: str, routed: Routed | None, dup_id: str, persistent: bool,
    ) -> asyncio.Future[None] | None:
        """Store a send that carries a duplicate id. The id is remembered even when no queue
        took the message (or DROP did), as Artemis does: it was sent. A persistent send's id
        record is journaled with its message, or commits its page write (`_page_once`),
        and its future covers both."""
        records, remembered = self.duplicates.remember(address_name, dup_id, persistent=persistent)
        record = records[0] if records else None
        try:
            if routed is None:
                future = self._record_alone(record) if record is not None else None
            else:
                address, message, queues, decision = routed
                if decision is PAGE and record is not None:
                    future = self._page_once(self.bindings.pager(address), message, queues, record)
                elif decision is PAGE:
                    future = self.after_bindings(self.bindings.pager(address).page([(message, queues)]))
                else:
                    future = self._keep(message, address, queues, record)
        except BaseException:
            self.duplicates.failed(remembered)
            raise
        self.duplicates.written(remembered, future)
        return future

    def _record_alone(self, record: DuplicateIdRecord) -> asyncio.Future[None]:
        """The duplicate-id record of a send nothing stored (no queue took it, or DROP)."""
        self.store.add_duplicate_id(record)
        return self.store.flush()

    def _page_once(self, pager: AddressPager, message: Message, queues: list[Queue],
                   record: DuplicateIdRecord) -> asyncio.Future[None] | None:
        """A persistent paged send with a duplicate id, stored as a paged COMMIT is
        (core/commit.py): its page batch is marked with a transaction id, and the journal
        transaction that holds the id record also commits the batch. A crash keeps both or
        neither, so the producer's retry after a lost RECEIPT is stored exactly once, as
        Artemis' page transactions make it. Cursors wait at the batch until the journal
        transaction is written. The future resolves when both are durable."""
        txid = self.ids.new_id()
        written = pager.page([(message, queues)], txid=txid)

        def commit() -> asyncio.Future[None] | None:
            try:
                committed = self.store.transaction([record, pager.commit_tx(txid)], sync=True)
            except BaseException:  # no commit record: the batch is void, say so now
                pager.abandon_tx(txid, written=True)
                raise
            pager.release_tx(txid)
            return committed

        if written is None:  # no page write to wait for (as commit.py: commit at once)
            return commit()
        durable: asyncio.Future[None] = written.get_loop().create_future()

        def paged(result: asyncio.Future[None]) -> None:
            problem = failure(result)
            if problem is not None:  # the id is forgotten (DuplicateIds.written)
                pager.abandon_tx(txid, written=False)
                durable.set_exception(problem)
                return
            try:
                chain(commit(), durable)
            except BaseException as exc:
                durable.set_exception(exc)

        written.add_done_callback(paged)
        return durable

    def _writes_done(self, future: asyncio.Future[None]) -> None:
        """A journal write batch is done. If it failed, its messages still pending leave
        their queues (the clients get an ERROR and may send them again; one delivered
        already stays with its consumer). Each message names its batch (`Message.write`)
        rather than the router keeping a list per batch: that costs nothing per SEND, and
        the scan of pending refs is only paid when a write fails."""
        if future is self._watched_write:
            self._watched_write = None
        if future.cancelled() or future.exception() is None:
            return
        ledger = self.ledger
        for queue in list(self.bindings.queues.values()):
            for ref in [r for r in queue if r.message.write is future]:
                if not queue.remove_pending_ref(ref):
                    continue
                queue.counters.added -= 1
                last = ledger.durable_release(queue, ref.message)
                if last is not None:
                    self._withdraw(ref.message, queue, last)
                ledger.unhold(queue, ref.message)

    def _withdraw(self, message: Message, queue: Queue, last: bool) -> None:
        """The journal's answer to a write that failed for want of space: it keeps the
        batch and writes it once space is back (storage/group_commit.py), so a message the
        client was told is not stored also gets its acknowledgement written behind it, and
        no restart brings it back. A journal failed for good refuses this as it refused
        the message, which then was never written either."""
        try:
            self.store.acknowledge(message.message_id, queue.queue_id, last=last)
        except (OSError, LookupError):
            pass

    def route(
        self, address_name: str, routing_type: str, headers: dict[str, str], body: bytes,
        persistent: bool, priority: int, expiration: int, *, internal: bool = False,
        only_queue: str | None = None, memory_size: int = -1,
    ) -> Routed | None:
        """A new message, its queues and where it goes (MEMORY or PAGE); None when it is not
        stored at all (no queue takes it, or the DROP policy). FAIL and BLOCK raise.
        `internal` (a dead-letter or expiry move) pages where a policy would refuse.
        `memory_size`: the message's `estimate_memory`, when the caller has it already."""
        bindings = self.bindings
        if self.disk.full and not internal and self.disk.policy == FAIL:
            self.disk.admit()  # refused before an address or queue record is written
        address = bindings.addresses.get(address_name)
        if address is None:
            if routing_type == ANYCAST and address_name in bindings.queues:  # refused before anything is made
                raise SubscriptionError(f"{address_name!r} is the name of another address's queue: send to "
                                        "that address (a SEND goes to an address)")
            address = bindings.ensure_address(address_name, routing_type)
        if routing_type == ANYCAST and not address.anycast_queues:
            bindings.ensure_queue(address, address_name, ANYCAST)
        message = Message(
            self.ids.new_id(), address.name, headers, body,
            persistent=persistent, priority=priority, expiration=expiration,
            timestamp=int(time.time() * 1000), memory_size=memory_size,
        )
        queues = address.route(message, routing_type)
        if only_queue is not None and only_queue in address.queues:
            queues = [q for q in queues if q.name == only_queue]
        if not queues:
            return None
        decision = self.admit(address, message, internal=internal)
        if decision is DROP:
            return None
        return address, message, queues, decision

    def after_bindings(self, future: asyncio.Future[None] | None) -> asyncio.Future[None] | None:
        """A paged message's durability also needs its address and queue records, which are
        in the journal, not the page file: its future waits for them too while they are
        unsynced (one journal flush covers every record written before it)."""
        if future is None:
            return None
        if self.bindings.dirty:
            self.bindings.dirty = False
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
        fail or block it, and ignores page limits and disk limits: the broker never destroys
        what it moves. Any other message first meets the disk-full policy (core/disk.py).
        """
        if self.disk.full and not internal:
            self.disk.admit()  # FAIL raises DiskFull
            raise Blocked(address)
        if address.paging:
            if internal:
                return PAGE
            if self.memory.writes_behind():  # the page files' writes catch up first
                raise Blocked(address)
            settings = address.settings
            if settings.page_limit_bytes < 0 and settings.page_limit_messages < 0:
                return PAGE  # no page limit (the common case, without a call)
            return self._page_limit(address)
        size = message.memory_size
        if not (address.is_full(size) or self.memory.would_exceed(size)):
            return MEMORY
        if internal:
            if self.bindings.queue_stores is None:
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
            if address.name in self.block_waived or self._never_fits(address, size):
                return MEMORY
            raise Blocked(address)
        address.paging = True
        log.info("address %r entered page mode", address.name)
        return self._page_limit(address)

    def would_block(self, address_name: str) -> bool:
        """A SEND to `address_name` would wait now: the disk is full under disk-full-policy
        BLOCK, or the address has policy BLOCK and is at its limit or the budget is (an
        address that does not exist yet: no). For the server, which holds back a large frame
        going there while it comes in, as the SEND itself would be held."""
        if self.disk.full and self.disk.policy != FAIL:
            return True
        address = self.bindings.addresses.get(address_name)
        return address is not None and not address.paging and self._blocks(address)

    def _blocks(self, address: Address) -> bool:
        """The address has policy BLOCK and is at its limit, or the budget is."""
        return address.settings.address_full_policy == "BLOCK" and (
            address.is_full(0) or self.memory.messages_full())

    def _never_fits(self, address: Address, size: int) -> bool:
        """A message larger than the address's `max-size-bytes` or `global-max-size` by itself
        would block for ever: it goes in once usage is within those limits (Artemis blocks
        only while a limit is reached, too), the overshoot being that one message."""
        if address.is_full(0) or self.memory.messages_full():
            return False
        max_bytes, global_bytes = address.settings.max_size_bytes, self.memory.max_bytes
        return ((not address.is_full(size) or 0 <= max_bytes < size)
                and (not self.memory.would_exceed(size) or 0 <= global_bytes < size))

    def _page_limit(self, address: Address) -> str:
        """page-limit-bytes / page-limit-messages with page-full-policy: what the page files
        hold that some queue has not acknowledged yet."""
        settings = address.settings
        if settings.page_limit_bytes < 0 and settings.page_limit_messages < 0:
            return PAGE
        # No pager yet (nothing paged so far): a transaction's earlier sends, staged to page
        # at its commit, still count.
        pager = self.bindings.pagers.get(address.name)
        if pager is not None and self._group is not None and self._group.pager is pager:
            self.flush_sends()  # counted with the sends grouped before this one
        records = pager.records_held if pager is not None else 0
        size = pager.bytes_held if pager is not None else 0
        over_messages = 0 <= settings.page_limit_messages <= records + address.staged_records
        over_bytes = 0 <= settings.page_limit_bytes <= size + address.staged_bytes
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
        """Call `resume` once `address` can take a message again (BLOCK policy, the disk
        full under disk-full-policy BLOCK, or page writes behind for a paging address). The
        returned retry waits on both the memory budget and the disk; it calls `resume` once,
        whichever wakes it; cancel it with `cancel_wait`."""
        resumed = False

        def retry() -> bool:
            nonlocal resumed
            if resumed:
                return True
            if self.disk.full:
                return False
            if address.paging:
                if self.memory.writes_behind():
                    return False
            elif self._blocks(address):
                return False  # (any other policy: the send goes on, and meets it)
            resumed = True
            resume()
            return True

        self.memory.wait(retry)
        self.disk.wait(retry)
        return retry

    def cancel_wait(self, retry: Callable[[], bool]) -> None:
        """Forget a retry from `wait_for_memory` (its connection is gone)."""
        self.memory.cancel(retry)
        self.disk.cancel(retry)

"""Committing and rolling back client transactions, atomically across journal and page files.

Every send of a commit is admitted before anything is stored, each against what the earlier
ones of the transaction already take (memory held, page-limit room), so a commit of 100
sends to an address holding 10 pages 90 of them, and a FAIL (or BLOCK) policy refuses (or
delays) the whole commit, leaving nothing behind.

One journal transaction is the commit point. A commit that pages to one address and writes
nothing else is a single page batch instead. Any other commit that pages first writes its
page batches marked with a transaction id (cursors do not read past them) and waits for
their fsync; then the journal transaction holds its messages, acks, cursor acks and a commit
record per paged batch, and only then do sends reach their queues. A crash before that
record voids the batches at start-up, as Artemis' page transaction records do.
`Transaction.applied` resolves when the commit has taken effect: the sender's connection
holds its later frames until then.

Pending sends are memory like any other: they count toward `global-max-size` (so other
traffic pages sooner), and the pending sends of all open transactions together may not pass
it: the SEND that would is refused and the rest of the broker goes on.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from pagemq.core.consumer import MessageRef
from pagemq.core.duplicates import DUPLICATE_ID_HEADER
from pagemq.core.errors import TransactionError
from pagemq.core.futures import all_of, chain, failure
from pagemq.core.routing import PAGE, Blocked
from pagemq.storage.api import StoreAck, StoreMessage, StoreOp

if TYPE_CHECKING:
    from pagemq.core.address import Address
    from pagemq.core.bindings import Bindings
    from pagemq.core.duplicates import Remembered
    from pagemq.core.ids import Ids
    from pagemq.core.ledger import Ledger
    from pagemq.core.memory import MemoryAccountant
    from pagemq.core.message import Message
    from pagemq.core.paging import AddressPager, PageCursor
    from pagemq.core.queue import Queue
    from pagemq.core.routing import Router
    from pagemq.core.transactions import PendingSend, Transaction
    from pagemq.storage.api import MessageStore

Held = list[tuple["Message", list["Queue"], int]]
"""A commit's sends held in memory: message, its queues, how many of them hold it durably."""
Paged = dict["Address", list[tuple["Message", list["Queue"]]]]
"""A commit's sends to page, per address."""
Routed = tuple[Held, Paged, list[StoreOp], "Remembered", list["asyncio.Future[None]"]]
"""A commit's sends routed: held, paged, store ops, the duplicate ids remembered, and the
writes of the originals of the duplicates left out (`Transactions._route_sends`)."""


class Transactions:
    def __init__(
        self, router: Router, bindings: Bindings, ledger: Ledger, memory: MemoryAccountant,
        store: MessageStore, ids: Ids,
    ) -> None:
        self.router = router
        self.bindings = bindings
        self.ledger = ledger
        self.memory = memory
        self.store = store
        self.ids = ids

    def stage(self, tx: Transaction, send: PendingSend) -> None:
        """Hold a transactional SEND until COMMIT, charged to the one memory budget."""
        self.stage_all(tx, [send])

    def stage_all(self, tx: Transaction, sends: list[PendingSend]) -> None:
        """`stage` for several SENDs at once (a batch SEND): all of them, or none."""
        size = sum([send.memory_size for send in sends]) if len(sends) > 1 else sends[0].memory_size
        self.check_room(tx, size, len(sends))
        tx.sends += sends
        tx.staged_bytes += size
        self.memory.stage(size)

    def check_room(self, tx: Transaction, size: int, sends: int) -> None:
        """TransactionError unless `sends` more SENDs of `size` bytes fit beside every open
        transaction's within the memory budget (a batch SEND is weighed before it is decoded)."""
        limit = self.memory.max_bytes
        if limit >= 0 and self.memory.staged_bytes + size > limit:
            raise TransactionError(
                f"transaction {tx.name!r} cannot hold {'these sends' if sends > 1 else 'this send'}: "
                f"pending transactional sends would pass global-max-size ({limit} bytes); commit in "
                "smaller transactions"
            )

    def hold(self, queue: Queue, refs: list[MessageRef]) -> None:
        """Deliveries ACKed or NACKed inside a transaction: no longer in flight, not settled
        until COMMIT or ABORT, and still counted by their queue (as Artemis counts them
        delivering)."""
        queue.transacted += len(refs)

    def _unstage(self, tx: Transaction) -> None:
        if tx.staged_bytes:
            self.memory.unstage(tx.staged_bytes)
            tx.staged_bytes = 0

    def commit(self, tx: Transaction) -> asyncio.Future[None] | None:
        """Apply a transaction's sends and acks atomically; the future says when it is durable."""
        staged = tx.staged_bytes
        # Routing charges each send again as it holds it; nothing waiting is woken inside
        # (MemoryAccountant.quiet): if routing blocks, all of it is taken again at once.
        with self.memory.quiet():
            self._unstage(tx)
            try:
                held, paged, ops, dup_ids, originals = self._route_unblocking(tx)
            except Blocked:
                # The COMMIT is retried once there is room: until then its sends stay
                # charged, or every transaction waiting so would hold its sends outside
                # the budget.
                tx.staged_bytes = staged
                self.memory.stage(staged)
                raise
        self.memory.wake_waiters()
        try:
            future = self._commit(tx, held, paged, ops)
        except BaseException:
            self.router.duplicates.failed(dup_ids)
            raise
        self.router.duplicates.written(dup_ids, future)
        if originals:  # duplicates left out: durable once their originals are
            return all_of([f for f in (future, *originals) if f is not None])
        return future

    def _commit(
        self, tx: Transaction, held: Held, paged: Paged, ops: list[StoreOp],
    ) -> asyncio.Future[None] | None:
        if not paged:
            return self._apply(tx, held, ops, [], 0)
        pager = self.bindings.pager
        if len(paged) == 1 and not ops and not tx.acks:
            ((address, items),) = paged.items()
            batch = self.router.after_bindings(pager(address).page(items))
            self._apply(tx, held, ops, [], 0)
            return batch
        txid = self.ids.new_id()
        writes = [(pager(address), pager(address).page(items, txid=txid)) for address, items in paged.items()]
        pending = [future for _pager, future in writes if future is not None]
        if not pending:  # nothing persistent was paged: nothing to wait for
            return self._apply(tx, held, ops, [p for p, _future in writes], txid)
        loop = pending[0].get_loop()
        durable: asyncio.Future[None] = loop.create_future()
        applied = tx.applied = loop.create_future()
        left = len(pending)
        # The commit's sends held in memory wait for its page batches too (their pagers mark
        # the paged ones): a stream must not plan past them meanwhile (Address.undecided).
        waiting = self._undecided(held, txid)

        def written(_future: asyncio.Future[None]) -> None:
            nonlocal left
            left -= 1
            if left:
                return
            failures = [failure(f) for _p, f in writes]
            try:
                if any(failures):
                    stored = [(p, e is None) for (p, _f), e in zip(writes, failures, strict=True)]
                    self._abandon(tx, held, stored, txid)
                    durable.set_exception(next(e for e in failures if e is not None))
                else:
                    chain(self._apply(tx, held, ops, [p for p, _f in writes], txid), durable)
            except BaseException as exc:  # the commit's client must hear of it
                if not durable.done():
                    durable.set_exception(exc)
            finally:
                for address in waiting:
                    address.undecided.pop(txid, None)
                applied.set_result(None)

        for future in pending:
            future.add_done_callback(written)
        return durable

    def _apply(
        self, tx: Transaction, held: Held, ops: list[StoreOp], pagers: list[AddressPager], txid: int,
    ) -> asyncio.Future[None] | None:
        """The commit point: one journal transaction, then the effects (see the module)."""
        ledger = self.ledger
        paged_acks: dict[PageCursor, list[MessageRef]] = {}
        # A queue deleted meanwhile (its address too, maybe) took its messages and records
        # with it: its acks have nothing left to settle.
        acks = [(queue, ref) for queue, ref in tx.acks if not queue.deleted]
        for queue, ref in acks:
            if ref.page_pos is not None:
                paged_acks.setdefault(self._cursor(queue), []).append(ref)
                continue
            last = ledger.durable_release(queue, ref.message)
            if last is not None:
                ops.append(StoreAck(ref.message.message_id, queue.queue_id, last))
        for cursor, refs in paged_acks.items():
            ops.extend(cursor.ack_records(refs))
        ops.extend(pager.commit_tx(txid) for pager in pagers)
        future = self.store.transaction(ops, sync=True) if ops else None
        for message, queues, _durable in held:
            for queue in queues:
                queue.add(MessageRef(message))
        touched: set[Queue] = set()
        for queue, ref in acks:
            if not tx.move:
                queue.counters.acknowledged += 1
            queue.transacted -= 1
            touched.add(queue)
            if ref.page_pos is not None:
                self._cursor(queue).settle(ref, acked=True, journaled=True)
                continue
            ledger.unhold(queue, ref.message)
        for pager in pagers:  # after the in-memory sends: they were admitted first
            pager.release_tx(txid)
        for queue in touched:
            queue.dispatch()
        return future

    def _undecided(self, held: Held, txid: int) -> list[Address]:
        """Mark the held sends' addresses as holding undecided ids (their lowest) until the
        commit's page batches are written; the addresses marked."""
        first: dict[Address, int] = {}
        for message, queues, _durable in held:
            address = self.bindings.address_of(queues[0])
            first[address] = min(first.get(address, message.message_id), message.message_id)
        for address, message_id in first.items():
            address.undecided[txid] = min(address.undecided.get(txid, message_id), message_id)
        return list(first)

    def _cursor(self, queue: Queue) -> PageCursor:
        return self.bindings.pager(self.bindings.address_of(queue)).cursor(queue)

    def _abandon(
        self, tx: Transaction, held: Held, writes: list[tuple[AddressPager, bool]], txid: int,
    ) -> None:
        """A page batch of the commit was not stored: nothing of it takes effect."""
        for message, queues, _durable in held:
            self.ledger.unhold_all(self.bindings.address_of(queues[0]), message)
        for pager, written in writes:
            pager.abandon_tx(txid, written=written)
        self._return_acks(tx)

    def _route_unblocking(self, tx: Transaction) -> Routed:
        """Route the sends; a BLOCK address the transaction's sends to it could never fit
        (more than its max-size-bytes or max-size-messages, or more sends than
        global-max-messages) lets them in whole once it is below its limits, as one message
        larger than the limit goes in (`Router.admit`): otherwise the COMMIT would wait for
        ever."""
        router = self.router
        waived: set[str] = set()
        while True:
            try:
                router.block_waived = frozenset(waived)
                return self._route_sends(tx)
            except Blocked as blocked:
                address = blocked.address
                if address.name in waived or not self._never_fits(tx, address):
                    raise
                waived.add(address.name)
            finally:
                router.block_waived = frozenset()

    def _never_fits(self, tx: Transaction, address: Address) -> bool:
        """The transaction's sends are more than a limit could ever hold (`address`'s
        max-size-bytes or max-size-messages, or the broker's global-max-messages), and
        everything is below its limits now (the commit's earlier sends were given back when
        it blocked)."""
        if address.is_full(0) or self.memory.messages_full():
            return False
        mine = [send for send in tx.sends if send.address == address.name]
        settings = address.settings
        if 0 <= settings.max_size_bytes < sum(send.memory_size for send in mine):
            return True
        if 0 <= settings.max_size_messages < len(mine):
            return True
        return 0 <= self.memory.max_messages < len(tx.sends)

    def _route_sends(self, tx: Transaction) -> Routed:
        """A transaction's sends: (held in memory, with their durable queue count), (to page,
        per address), the store ops of the held ones, and the duplicate ids remembered (a
        send whose id its address has seen, or an earlier send of the transaction had, is
        left out, as Artemis drops a duplicate), and the writes of the originals of the
        duplicates left out that are not durable yet (the COMMIT's RECEIPT waits for them,
        as a plain duplicate SEND's does). The ids are remembered once every send is routed:
        a COMMIT refused on the way (FAIL, BLOCK) leaves the caches as they were."""
        held: Held = []
        paged: Paged = {}
        ops: list[StoreOp] = []
        duplicates = self.router.duplicates
        ids: list[tuple[str, str, bool]] = []  # (address, id, persistent) of the sends taken
        taken: set[tuple[str, str]] = set()
        originals: list[asyncio.Future[None]] = []
        # DROP counts a send it discards as it routes it: a COMMIT refused on the way (FAIL,
        # BLOCK and its retry) takes those counts back, since nothing of it happened.
        addresses = self.bindings.addresses
        dropped = {name: address.dropped_messages if (address := addresses.get(name)) is not None else 0
                   for name in {send.address for send in tx.sends}}
        try:
            for send in tx.sends:
                # A moved copy is never a duplicate (see Router.send).
                dup_id = None if send.internal else send.headers.get(DUPLICATE_ID_HEADER)
                if dup_id is not None:
                    if (send.address, dup_id) in taken:
                        continue
                    seen, original = duplicates.seen(send.address, dup_id)
                    if seen:
                        if original is not None:
                            originals.append(original)
                        continue
                    taken.add((send.address, dup_id))
                    ids.append((send.address, dup_id, send.persistent))  # even when no queue takes it
                routed = self.router.route(send.address, send.routing_type, send.headers, send.body,
                                           send.persistent, send.priority, send.expiration,
                                           internal=send.internal, memory_size=send.memory_size)
                if routed is None:
                    continue
                address, message, queues, decision = routed
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
                self.ledger.hold(message, address, len(queues), durable=len(durable))
                held.append((message, queues, len(durable)))
        except BaseException:
            for message, queues, _durable in held:
                self.ledger.unhold_all(self.bindings.address_of(queues[0]), message)
            for name, count in dropped.items():
                if (address := addresses.get(name)) is not None:
                    address.dropped_messages = count
            raise
        finally:
            for address in paged:
                address.staged_records = address.staged_bytes = 0
        records, remembered = duplicates.remember_all(ids)
        ops.extend(records)
        return held, paged, ops, remembered, originals

    def rollback(self, tx: Transaction) -> None:
        """Discard the sends; acknowledged deliveries go back to their queues, in order."""
        self._unstage(tx)
        self._return_acks(tx)

    def _return_acks(self, tx: Transaction) -> None:
        by_queue: dict[Queue, list[MessageRef]] = {}
        for queue, ref in tx.acks:
            if not queue.deleted:
                by_queue.setdefault(queue, []).append(ref)
        with contextlib.ExitStack() as held:  # every queue's refs back before any delivers
            for queue in by_queue:
                held.enter_context(queue.dispatch_held())
            for queue, refs in by_queue.items():
                queue.transacted -= len(refs)
                queue.return_refs(refs, dead_letter=not tx.move)
        for queue in by_queue:
            queue.dispatch()

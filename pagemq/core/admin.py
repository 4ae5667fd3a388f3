"""Management actions on queues and addresses: purge, delete, move, retry dead letters, browse.

What an operator does to a running broker (issue 18; Artemis' `QueueControl` and
`ActiveMQServerControl` have the same verbs). Each action is made of the steps the broker
already takes durably, so a kill -9 in the middle leaves a state a restart accepts:

- purge: every pending message of the queue is acknowledged, the in-memory ones through the
  ledger (journal deletes), the paged ones through the paged-queue store
  (`PagedQueue.purge`): a page the queue holds nothing of in memory is completed whole, with
  one "page complete" record and no read, so a million paged messages cost what their ~100
  pages cost. Messages being delivered are left alone, as Artemis' `removeAllMessages`
  does: their consumer acknowledges them or they come back (and may be purged then). A crash
  mid-way leaves some purged and some not, never a message twice.
- delete a queue: its consumers are closed (`on_queue_deleted` tells whoever drives them, the
  server, which ends those connections with an ERROR naming the queue), its messages and
  page share dropped, its durable record deleted from the journal.
- delete an address: each of its queues as above, then the address record.
- move (and retry, a move per message back to its `original-destination`): copies are routed
  to the target in queue order, in batches, each original acknowledged only once its copy is
  durable: a crash between the two leaves both (at-least-once), never neither. Paged messages
  are claimed where they lie (`PagedQueue.claim_unread`, so consumers skip them) and
  acknowledged after their copy is durable, without going through the queue's memory.

Loop-only: every method runs on the event loop thread (the async ones await durability).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST, MULTICAST
from pagemq.core.consumer import MessageRef
from pagemq.core.dead_letters import ORIGINAL_DESTINATION, ORIGINAL_QUEUE
from pagemq.core.errors import BrokerError, Conflict, InvalidDestination, NotFound
from pagemq.core.message_codec import decode_message
from pagemq.core.routing import Blocked
from pagemq.core.selector import compile_filter
from pagemq.core.selector.properties import message_view

if TYPE_CHECKING:
    from pagemq.core.bindings import Bindings
    from pagemq.core.consumer import Consumer
    from pagemq.core.ledger import Ledger
    from pagemq.core.message import Message
    from pagemq.core.paging import PageCursor
    from pagemq.core.queue import Queue
    from pagemq.core.routing import Router
    from pagemq.core.selector import Selector

log = logging.getLogger("pagemq.admin")

MOVE_BATCH = 500  # copies routed before waiting for their durability
PREVIEW_BYTES = 256
_PREFIXES = (("/queue/", ANYCAST), ("/topic/", MULTICAST))

Target = tuple[str, str, dict[str, str], str | None]
"""Where a moved message goes: address, routing type, headers to set, the one queue (or None)."""

QueueDeleted = Callable[[str, list["Consumer"]], None]
"""Told the name of a deleted queue and the consumers it had (already closed)."""


@dataclass(slots=True)
class _Item:
    """One message taken for a move: its ref in memory, or its place in the page files."""

    message: Message
    ref: MessageRef | None = None
    page_pos: tuple[int, int] | None = None


class Admin:
    def __init__(self, bindings: Bindings, ledger: Ledger, router: Router) -> None:
        self.bindings = bindings
        self.ledger = ledger
        self.router = router
        self.on_queue_deleted: list[QueueDeleted] = []
        # One action at a time per queue (a delete waits for a move in progress to finish).
        self._locks: dict[int, tuple[asyncio.Lock, list[int]]] = {}  # queue id -> lock, users

    def queue(self, name: str) -> Queue:
        queue = self.bindings.queues.get(name)
        if queue is None:
            raise NotFound(f"no queue named {name!r}")
        return queue

    def busy(self, queue: Queue) -> bool:
        """An action on the queue is in progress (or waiting)."""
        return queue.queue_id in self._locks

    @contextlib.asynccontextmanager
    async def _exclusive(self, queue: Queue) -> AsyncIterator[None]:
        entry = self._locks.get(queue.queue_id)
        if entry is None:
            entry = self._locks[queue.queue_id] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                if queue.deleted:
                    raise NotFound(f"no queue named {queue.name!r}")
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[queue.queue_id]

    def _cursor(self, queue: Queue) -> PageCursor | None:
        """The queue's page cursor, when its address has paged for it."""
        pager = self.bindings.pagers.get(queue.address_name)
        return pager.cursors.get(queue.queue_id) if pager is not None else None

    # -- purge ----------------------------------------------------------------------------

    async def purge(self, name: str) -> int:
        """Remove every message of the queue not being delivered; how many. Resolves once
        the removal is durable."""
        queue = self.queue(name)
        async with self._exclusive(queue):
            purged = await self._purge(queue)
            await self.ledger.flush()
        log.info("queue %r purged: %d message(s) removed", name, purged)
        return purged

    async def _purge(self, queue: Queue) -> int:
        purged = self._purge_pending(queue)
        cursor = self._cursor(queue)
        if cursor is not None:
            pager = cursor.pager
            while True:
                count, later = cursor.book.purge()
                purged += count
                if later is None:
                    break
                await later  # records appended just before were not readable yet
            cursor.records_changed()
            # Releasing the queue's messages freed budget: a reader waiting for it may have
            # read records in before the page files were purged (helper-4: 24 of 400 left).
            purged += self._purge_pending(queue)
            pager.maybe_leave_paging()
        return purged

    def _purge_pending(self, queue: Queue) -> int:
        refs = queue.remove_pending()
        for ref in refs:
            self.ledger.release(queue, ref)
        return len(refs)

    # -- delete ---------------------------------------------------------------------------

    async def delete_queue(self, name: str) -> None:
        queue = self.queue(name)
        async with self._exclusive(queue):
            self._delete_queue(queue)
        await self.ledger.flush()
        log.info("queue %r deleted", name)

    def delete_queue_now(self, queue: Queue) -> None:
        """Delete without waiting for durability (auto-delete; the journal syncs it soon)."""
        self._delete_queue(queue)

    def _delete_queue(self, queue: Queue) -> None:
        consumers = list(queue.consumers)
        self.bindings.delete_queue(queue)  # (leaves page mode with the last backlog)
        for listener in self.on_queue_deleted:
            listener(queue.name, consumers)

    async def delete_address(self, name: str) -> list[str]:
        """Delete the address and its queues; the names of the queues deleted."""
        address = self.bindings.addresses.get(name)
        if address is None:
            raise NotFound(f"no address named {name!r}")
        queues = sorted(address.queues)
        for queue_name in queues:
            queue = address.queues.get(queue_name)
            if queue is not None:
                async with self._exclusive(queue):
                    self._delete_queue(queue)
        if address.queues:
            raise Conflict(f"address {name!r} got new queues while it was being deleted: "
                           f"{', '.join(sorted(address.queues))}")
        if self.bindings.addresses.get(name) is address:
            self.bindings.delete_address(address)
            # Its duplicate ids go too, as docs/http-api.md says a name deleted comes back
            # empty (an address that auto-delete removes keeps them: a producer retrying
            # to it is still caught).
            self.router.duplicates.drop_address(name)
        await self.ledger.flush()
        log.info("address %r deleted with %d queue(s)", name, len(queues))
        return queues

    # -- move and retry -------------------------------------------------------------------

    async def move(self, name: str, to: str, selector_text: str | None = None) -> int:
        """Move the queue's pending messages (those matching the selector) to address `to`,
        in queue order; how many were moved."""
        queue = self.queue(name)
        selector = compile_filter(selector_text)
        if not to:
            raise InvalidDestination("move: 'to' names no address")
        if to == queue.address_name:
            raise InvalidDestination(f"move: queue {name!r} is already on address {to!r}")
        async with self._exclusive(queue):
            created = to not in self.bindings.addresses
            routing_type = self._target(to, ANYCAST)
            if created:
                # The address (and its queue) a move creates is durable before anything is
                # copied there: a move cut short keeps the target it showed.
                await self.ledger.flush()

            def destination(_message: Message) -> Target | None:
                return to, routing_type, {}, None

            return await self._transfer(queue, selector, destination)

    async def retry(self, name: str) -> int:
        """Send the queue's dead letters back to their `original-destination`; how many.
        Messages without that header stay where they are."""
        queue = self.queue(name)
        targets: dict[str, tuple[str, str]] = {}

        def destination(message: Message) -> Target | None:
            original = message.headers.get(ORIGINAL_DESTINATION)
            if not original:
                return None
            found = targets.get(original)
            if found is None:
                address, routing_type = _parse_destination(original)
                if not address or address == queue.address_name:
                    return None
                try:
                    routing_type = self._target(address, routing_type)
                except BrokerError as exc:
                    log.warning("retry: message %s stays in %r: %s", message.message_id, name, exc)
                    return None
                found = targets[original] = (address, routing_type)
            return found[0], found[1], {"destination": original}, message.headers.get(ORIGINAL_QUEUE)

        async with self._exclusive(queue):
            return await self._transfer(queue, None, destination,
                                        drop=(ORIGINAL_DESTINATION, ORIGINAL_QUEUE))

    def _target(self, name: str, routing_type: str) -> str:
        """The routing type to send to `name` with; the address (anycast: with its queue) is
        created when it does not exist and auto-create allows. An address without queues is
        refused: what is moved there would be lost."""
        address = self.bindings.addresses.get(name)
        if address is None:
            address = self.bindings.ensure_address(name, routing_type)
            if routing_type == ANYCAST:
                self.bindings.ensure_queue(address, name, ANYCAST)
        if not address.queues:
            raise InvalidDestination(f"address {name!r} has no queue: moved messages would be lost")
        return address.routing_type

    async def _transfer(
        self,
        queue: Queue,
        selector: Selector | None,
        destination: Callable[[Message], Target | None],
        *,
        drop: tuple[str, ...] = (),
    ) -> int:
        """Route copies of the wanted messages in batches, each original settled once its
        copy is durable. A copy that cannot be made stops the transfer: it and what follows
        stay in the queue, in order."""

        def wanted(message: Message) -> bool:
            return _matches(selector, message) and destination(message) is not None

        moved = 0
        for batch in self._batches(queue, wanted):
            count, complete = await self._send_batch(queue, batch, destination, drop)
            moved += count
            if not complete:
                break
        cursor = self._cursor(queue)
        if cursor is not None:
            cursor.pager.maybe_leave_paging()
        if not queue.deleted:
            queue.dispatch()
        await self.ledger.flush()
        log.info("queue %r: %d message(s) moved", queue.name, moved)
        return moved

    def _batches(self, queue: Queue, wanted: Callable[[Message], bool]) -> Iterator[list[_Item]]:
        """The queue's pending messages that are `wanted`, in queue order, in batches of up
        to MOVE_BATCH, each batch taken (off the queue in memory, claimed in the page files)
        only as it is handed out: a transfer that stops leaves nothing taken behind."""
        ready = [ref for ref in queue if wanted(ref.message)]
        for start in range(0, len(ready), MOVE_BATCH):
            taken = queue.take_pending(ready[start:start + MOVE_BATCH])
            if taken:
                yield [_Item(ref.message, ref=ref) for ref in taken]
        held = [ref for ref in queue.held if wanted(ref.message)]
        cursor = self._cursor(queue)
        if cursor is None:
            if held:
                yield [_Item(ref.message, ref=ref) for ref in queue.take_pending(held)]
            return
        batch: list[_Item] = []
        index = 0
        for page_no, ordinal, message in _paged(cursor, None):
            while index < len(held) and held[index].message.message_id < message.message_id:
                if queue.remove_pending_ref(held[index]):
                    batch.append(_Item(held[index].message, ref=held[index]))
                index += 1
            if wanted(message) and cursor.book.claim_unread(page_no, ordinal):
                batch.append(_Item(message, page_pos=(page_no, ordinal)))
            if len(batch) >= MOVE_BATCH:
                yield batch
                batch = []
        batch += [_Item(ref.message, ref=ref) for ref in held[index:] if queue.remove_pending_ref(ref)]
        if batch:
            yield batch

    async def _send_batch(self, queue: Queue, batch: list[_Item],
                          destination: Callable[[Message], Target | None],
                          drop: tuple[str, ...]) -> tuple[int, bool]:
        """(how many moved, whether all were)."""
        sent: list[tuple[_Item, asyncio.Future[None] | None]] = []
        failed: list[_Item] = []
        for item in batch:
            message = item.message
            target = None if failed else destination(message)
            if target is None:
                failed.append(item)  # keep the order: nothing goes after a copy that failed
                continue
            address, routing_type, extra, only_queue = target
            headers = {k: v for k, v in message.headers.items() if k not in drop}
            headers["destination"] = address
            headers.update(extra)
            try:
                future = self.router.send(address, routing_type, headers, message.body,
                                          persistent=message.persistent, priority=message.priority,
                                          expiration=message.expiration, internal=True,
                                          only_queue=only_queue)
            except (BrokerError, Blocked, OSError) as exc:
                log.warning("message %s stays in queue %r: it cannot be moved to %r: %s",
                            message.message_id, queue.name, address, exc)
                failed.append(item)
                continue
            sent.append((item, future))
        futures = {f for _, f in sent if f is not None}
        if futures:
            await asyncio.wait(futures)
        moved = 0
        for item, future in sent:
            if future is not None and (future.cancelled() or future.exception() is not None):
                failed.append(item)
                continue
            self._settle(queue, item)
            moved += 1
        if failed:
            place = {id(item): n for n, item in enumerate(batch)}
            self._give_back(queue, sorted(failed, key=lambda item: place[id(item)]))
        cursor = self._cursor(queue)
        if cursor is not None:  # the batch's paged originals are gone: still a reader?
            cursor.records_changed()
        return moved, not failed

    def _settle(self, queue: Queue, item: _Item) -> None:
        """The copy is durable: the original goes."""
        if item.ref is not None:
            self.ledger.release(queue, item.ref)
            return
        cursor = self._cursor(queue)
        assert item.page_pos is not None and cursor is not None
        cursor.book.acknowledge(*item.page_pos, journal=item.message.persistent)

    def _give_back(self, queue: Queue, items: list[_Item]) -> None:
        """Messages taken but not moved: back where they were."""
        cursor = self._cursor(queue)
        refs = []
        for item in items:
            if item.ref is not None:
                refs.append(item.ref)
            elif item.page_pos is not None and cursor is not None:
                ref = cursor.give_back(*item.page_pos, item.message)
                if ref is not None:
                    refs.append(ref)
        if refs:
            queue.return_refs(refs, dead_letter=False)

    # -- browse ---------------------------------------------------------------------------

    def browse(self, name: str, *, limit: int = 100, after: int | None = None,
               selector_text: str | None = None) -> tuple[list[dict[str, object]], bool]:
        """Up to `limit` messages of the queue in queue order (delivering ones, then pending,
        then paged), after the message with id `after`; and whether more follow. Nothing is
        taken. When `after` has left the queue meanwhile (a consumer acknowledged it), the
        listing goes on with the messages with a higher id, in memory and paged."""
        queue = self.queue(name)
        selector = compile_filter(selector_text)
        shown: list[dict[str, object]] = []
        for view in self._browsed(queue, selector, after):
            if len(shown) >= limit:
                return shown, True
            shown.append(view)
        return shown, False

    def _browsed(self, queue: Queue, selector: Selector | None, after: int | None
                 ) -> Iterator[dict[str, object]]:
        delivering = [ref for c in queue.consumers for ref in c.in_flight.values()]
        memory = [(ref, True) for ref in delivering] + [(ref, False) for ref in queue]
        if after is not None:
            ids = [ref.message.message_id for ref, _ in memory]
            if after in ids:
                memory = memory[ids.index(after) + 1:]
            else:  # acknowledged (or moved) meanwhile: go on with what came after it
                memory = [(ref, in_flight) for ref, in_flight in memory if ref.message.message_id > after]
        for ref, in_flight in memory:
            if _matches(selector, ref.message):
                yield _view(ref.message, paged=ref.page_pos is not None, delivering=in_flight)
        held = [ref for ref in queue.held if _matches(selector, ref.message)
                and (after is None or ref.message.message_id > after)]
        cursor = self._cursor(queue)
        index = 0
        if cursor is not None:
            for _page_no, _ordinal, message in _paged(cursor, selector, after):
                while index < len(held) and held[index].message.message_id < message.message_id:
                    yield _view(held[index].message, paged=False, delivering=False)
                    index += 1
                yield _view(message, paged=True, delivering=False)
        for ref in held[index:]:
            yield _view(ref.message, paged=False, delivering=False)


def _paged(cursor: PageCursor, selector: Selector | None, after: int | None = None
           ) -> Iterator[tuple[int, int, Message]]:
    """(page, ordinal, message) of the queue's paged messages on disk only, from its read
    position, in order; records with an id up to `after` are skipped undecoded."""
    book = cursor.book
    pager = cursor.pager
    address = pager.address.name
    page_no, ordinal = book.position()
    for number in book.pages_from(page_no):
        if selector is not None and not pager.may_match(number, selector):
            continue
        if after is not None and 0 < pager.store.last_id(number) <= after:
            continue  # every message of the page is before `after`: not read
        for index, record in book.read(number, ordinal if number == page_no else 0):
            if record.txid and pager.store.is_pending(record.txid):
                continue  # not committed (yet): not in the queue
            if after is not None and record.message_id <= after:
                continue
            message = decode_message(record.message, address)
            if _matches(selector, message):
                yield number, index, message


def _matches(selector: Selector | None, message: Message) -> bool:
    return selector is None or selector.matches_headers(message_view(message))


def _parse_destination(text: str) -> tuple[str, str]:
    for prefix, routing_type in _PREFIXES:
        if text.startswith(prefix):
            return text[len(prefix):], routing_type
    return text, ANYCAST


def _view(message: Message, *, paged: bool, delivering: bool) -> dict[str, object]:
    body = message.body
    return {
        "message_id": message.message_id,
        "headers": dict(message.headers),
        "body_preview": body[:PREVIEW_BYTES].decode("utf-8", errors="replace"),
        "body_truncated": len(body) > PREVIEW_BYTES,
        "size": len(body),
        "priority": message.priority,
        "timestamp": message.timestamp,
        "expiration": message.expiration,
        "persistent": message.persistent,
        "paged": paged,
        "delivering": delivering,
    }

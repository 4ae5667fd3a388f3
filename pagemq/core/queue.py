"""A queue: the refs it holds in memory by priority, its consumers and their dispatch.

Ordering: refs of one priority leave in arrival order; a ref returned unacknowledged goes
back to the head of its level, so one producer's messages stay in order across redelivery.
Dispatch is round-robin over consumers with credit. Consumers with selectors take the first
pending ref they match; refs nobody matches wait without blocking the others.

Selective dispatch costs what changed, not what is pending. Every pending ref has a
position (`MessageRef.pos`: arrivals count up from the tail, returned refs down from the
head, so each level is sorted by it and a position is never reused), and every consumer
remembers per level the span of positions it has already rejected (`Consumer.scanned`).
A walk offers a consumer only the refs outside its span, and only while it has credit: a
SEND with ten thousand unmatched refs pending and an idle selective consumer evaluates
the selector once, on the new message; a consumer getting credit back resumes where it
stopped.

After a restart, refs recovered from the journal that are newer than messages the queue
still has in page files wait in `held` (in message-id order) and are let into the queue by
its page cursor as it reads past those older messages: the queue delivers in the order it
would have without the restart. They are pending: counted, browsed, expired and deleted
with the queue like the others.

What a queue does *not* do: persistence and memory accounting belong to the broker (it
knows whether a message is shared by other queues), paging to the address's cursor. It does
not call into the broker either: what it cannot settle itself (auto acks, expiry, dead
letters) goes to the narrow `QueueOwner` it is handed, expiry after a dispatch round.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from pagemq.core.consumer import Consumer, MessageRef
from pagemq.core.selector.properties import message_view

if TYPE_CHECKING:
    from pagemq.core.message import Message
    from pagemq.core.selector import Selector
    from pagemq.core.settings import AddressSettings
    from pagemq.core.stream_reader import StreamReader
    from pagemq.storage.paging.page_format import PagedRecord
    from pagemq.storage.paging.queue_store import PageFrames, PageSpan

    # A range read's view of the page files (core.stream.PagedRange): pages from the read
    # position with their first ordinal, the reading of one page, "is this transaction
    # undecided", each page as counted without reading it (None: read it), and one page's
    # frames as bytes (None: read its records).
    StreamPlan = tuple[tuple[tuple[int, int], ...], Callable[[int, int], Iterator[tuple[int, PagedRecord]]],
                       Callable[[int], bool], tuple[PageSpan | None, ...],
                       Callable[[int, int], PageFrames | None]]

PRIORITIES = 10
_FEW = 64  # take_pending: up to this many refs are removed one by one


class QueueOwner(Protocol):
    """What a queue hands back to whoever owns it (the broker) instead of calling into it:
    the message lifetime beyond one queue (shared copies, persistence, moves to other
    addresses) is not the queue's business."""

    def settle(self, queue: Queue, ref: MessageRef) -> None:
        """A delivery was auto-acknowledged as it went out."""

    def expired(self, queue: Queue, refs: list[MessageRef]) -> None:
        """Refs taken off the queue because they expired; called after a dispatch round,
        never inside one (their move to an expiry address routes to other queues)."""

    def dead_letter(self, queue: Queue, refs: list[MessageRef]) -> list[MessageRef]:
        """Refs returned unacknowledged once too often: moved to the dead-letter address;
        returns those that could not be moved (they go back to the queue)."""

    def expires(self, queue: Queue, ref: MessageRef) -> None:
        """A ref of a message with an expiration became pending: note when it is due."""

    def given_back(self, queue: Queue, refs: list[MessageRef]) -> None:
        """Delivered refs came back unacknowledged (kept by the queue): their delivery
        counts are to outlive a restart."""


class PagedWalk(Protocol):
    """A browse of the paged part of a queue (core.paging.PagedBrowse): iterating stops with
    `pending` set while a page chunk is read off the loop; `close` gives it up."""

    pending: bool

    def __iter__(self) -> Iterator[MessageRef]: ...
    def __next__(self) -> MessageRef: ...
    def close(self) -> None: ...


class PagedSource(Protocol):
    """The queue's side of its page cursor (core.paging.PageCursor): what the queue and its
    owner ask of the part of the queue that lives in page files."""

    @property
    def unread(self) -> int: ...

    # The last fill read one message past a read limit or the budget, for a consumer that
    # holds nothing: it goes to such a consumer, not round-robin.
    past_limit: bool

    def fill(self, queue: Queue) -> None: ...
    def look_ahead(self, consumer: Consumer) -> None: ...
    def is_ahead(self, ref: MessageRef) -> bool: ...
    def put_back(self, ref: MessageRef) -> None: ...
    def takes_back(self, ref: MessageRef) -> bool: ...
    def forget(self, consumer: Consumer) -> None: ...
    def settle(self, ref: MessageRef, *, acked: bool, journaled: bool = False) -> None: ...
    def browse(self, selector: Selector | None, arrived: Callable[[], None] | None = None) -> PagedWalk: ...
    def stream_plan(self) -> StreamPlan: ...
    def acknowledge_through(self, offset: int, served: Callable[[int], bool], selector: Selector | None,
                            budget: int) -> tuple[int, int, str]: ...
    def complete_served(self, pages: Iterable[tuple[int, Collection[int]]]) -> int: ...


class QueueCounters:
    __slots__ = ("acknowledged", "added", "expired", "killed")

    def __init__(self) -> None:
        self.added = 0
        self.acknowledged = 0
        self.expired = 0
        self.killed = 0


class Queue:
    """In-memory part of a queue; paged refs are fed in by the address's page cursor."""

    def __init__(
        self,
        owner: QueueOwner,
        address_name: str,
        settings: AddressSettings,
        queue_id: int,
        name: str,
        *,
        filter_text: str | None = None,
        filter_selector: Selector | None = None,
        routing_type: str = "anycast",
        durable: bool = True,
        temporary: bool = False,
    ) -> None:
        self.owner = owner
        self.routing_type = routing_type
        self.address_name = address_name
        self.settings = settings
        self.queue_id = queue_id
        self.name = name
        self.filter_text = filter_text
        self.filter = filter_selector
        self.durable = durable
        self.temporary = temporary
        self.counters = QueueCounters()
        self.consumers: list[Consumer] = []
        self._levels: list[deque[MessageRef]] = [deque() for _ in range(PRIORITIES)]
        self._pending = 0
        # Recovered refs newer than paged messages not yet read back, by message id; the
        # cursor lets them in as it reads past those (see PageCursor.hold_back).
        self.held: deque[MessageRef] = deque()
        # Streaming readers by name (core.stream): their committed offsets, what they were served.
        self.stream_readers: dict[str, StreamReader] = {}
        self._top = -1
        self._first = 0  # lowest position given (to a returned ref, at a level's head)
        self._last = 0  # highest position given (to an arrival, at a level's tail)
        self._next_consumer = 0
        self._dispatching = False
        self._selective = 0
        self.cursor: PagedSource | None = None  # the address's page cursor for this queue
        self._expired: list[MessageRef] = []  # taken off in this dispatch round
        self.transacted = 0  # deliveries ACKed/NACKed in an open transaction (see Broker)
        self.deleted = False

    # -- counts ---------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Waiting in memory for a consumer: ready for dispatch, or held back (see `held`)."""
        return self._pending + len(self.held)

    @property
    def ready(self) -> int:
        """Pending refs dispatch may hand out now (the held-back ones not included)."""
        return self._pending

    @property
    def delivering(self) -> int:
        """In flight to consumers, and settled by a transaction not yet committed."""
        return sum(len(c.in_flight) for c in self.consumers) + self.transacted

    def __iter__(self) -> Iterator[MessageRef]:
        """Ready refs in delivery order (highest priority first), for browsers and stats;
        the held-back ones are in `held`."""
        for level in range(PRIORITIES - 1, -1, -1):
            yield from self._levels[level]

    # -- adding and returning -----------------------------------------------------------------

    def add(self, ref: MessageRef) -> None:
        """A newly routed ref: counted, and dispatched at once if anyone consumes."""
        self.add_depaged(ref)
        self.counters.added += 1
        if self.consumers:
            self.dispatch()

    def add_depaged(self, ref: MessageRef) -> None:
        """A ref read back from page files by this queue's cursor (already counted as added)."""
        message = ref.message
        priority = message.priority
        self._last += 1
        ref.pos = self._last
        self._levels[priority].append(ref)
        ref.queued = True
        self._pending += 1
        if priority > self._top:
            self._top = priority
        if message.expiration:
            self.owner.expires(self, ref)

    def add_recovered(self, ref: MessageRef) -> None:
        """A ref rebuilt from storage at start-up: counted as added, nothing dispatched yet."""
        self.add_depaged(ref)
        self.counters.added += 1

    def return_refs(self, refs: list[MessageRef], *, dead_letter: bool = True) -> None:
        """Put unacknowledged refs back at the head, oldest first; those delivered
        `max-delivery-attempts` times go to the owner to be dead-lettered (any it cannot
        move come back like the others)."""
        # Nothing is delivered until every ref is back (the caller dispatches): giving one
        # back (or dead-lettering it) frees memory, which may wake this queue's reading, and
        # it would deliver newer ones before the older ones still to come back.
        with self.dispatch_held():
            limit = self.settings.max_delivery_attempts
            if dead_letter and limit > 0:
                spent = [ref for ref in refs if ref.delivery_count >= limit]
                if spent:
                    kept = {id(ref) for ref in self.owner.dead_letter(self, spent)}
                    moved = {id(ref) for ref in spent if id(ref) not in kept}
                    refs = [ref for ref in refs if id(ref) not in moved]
            self.owner.given_back(self, refs)
            self._return_in_order(refs)

    @contextlib.contextmanager
    def dispatch_held(self) -> Iterator[None]:
        """No delivery while the caller changes the queue (it dispatches after): freeing
        memory wakes readers waiting for the budget at once, this queue's own among them,
        and its reading must not run in the middle of the change."""
        dispatching, self._dispatching = self._dispatching, True
        try:
            yield
        finally:
            self._dispatching = dispatching

    def _return_in_order(self, refs: list[MessageRef]) -> None:
        cursor = self.cursor
        for ref in reversed(refs):
            if cursor is not None:
                if ref.page_pos is not None and cursor.is_ahead(ref):
                    cursor.put_back(ref)
                    continue
                if ref.page_pos is None and cursor.takes_back(ref):
                    if ref.message.expiration:
                        self.owner.expires(self, ref)
                    continue
            message = ref.message
            priority = message.priority
            self._first -= 1
            ref.pos = self._first
            self._levels[priority].appendleft(ref)
            ref.queued = True
            self._pending += 1
            if priority > self._top:
                self._top = priority
            if message.expiration:
                self.owner.expires(self, ref)  # its earlier entry may have gone while in flight

    def _pop_head(self) -> MessageRef:
        levels = self._levels
        top = self._top
        while not levels[top]:
            top -= 1
        ref = levels[top].popleft()
        ref.queued = False
        self._pending -= 1
        if not levels[top]:
            while top >= 0 and not levels[top]:
                top -= 1
        self._top = top
        return ref

    def remove_pending(self) -> list[MessageRef]:
        """Take every pending ref out, held-back ones included (queue delete / purge)."""
        refs = [*self, *self.held]
        for ref in refs:
            ref.queued = False
        for level in self._levels:
            level.clear()
        self.held.clear()
        self._pending = 0
        self._top = -1
        return refs

    def remove_pending_ref(self, ref: MessageRef) -> bool:
        """Take one ref out if it is still pending (not delivered); whether it was. The
        search runs from the head, where the oldest (the first to expire) wait."""
        if not ref.queued:
            return False
        level = self._levels[ref.message.priority]
        try:
            level.remove(ref)
        except ValueError:
            if ref in self.held:
                self.held.remove(ref)
                ref.queued = False
                return True
            return False
        ref.queued = False
        self._pending -= 1
        if not level and self._top == ref.message.priority:
            self._top = max((i for i in range(PRIORITIES) if self._levels[i]), default=-1)
        return True

    def take_pending(self, refs: list[MessageRef]) -> list[MessageRef]:
        """Take those of `refs` still pending out (held-back ones too) and return them; the
        caller settles them. Refs delivered meanwhile are left alone. A few are looked for
        one by one from the head; many cost one pass over the queue."""
        if len(refs) <= _FEW:
            return [ref for ref in refs if self.remove_pending_ref(ref)]
        doomed = {id(ref) for ref in refs if ref.queued}
        if not doomed:
            return []
        taken: list[MessageRef] = []
        if self.held:
            kept = [r for r in self.held if id(r) not in doomed]
            if len(kept) != len(self.held):
                taken.extend(r for r in self.held if id(r) in doomed)
                self.held.clear()
                self.held.extend(kept)
        for index, level in enumerate(self._levels):
            if level:
                before = len(taken)
                taken.extend(r for r in level if id(r) in doomed)
                if len(taken) != before:
                    self._levels[index] = deque(r for r in level if id(r) not in doomed)
                    self._pending -= len(taken) - before
        self._top = max((i for i in range(PRIORITIES) if self._levels[i]), default=-1)
        for ref in taken:
            ref.queued = False
        return taken

    # -- consumers ------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        if consumer.selector is not None:
            self._selective += 1
            if self._selective == 1:  # spans were not kept while dispatch was plain FIFO
                for each in self.consumers:
                    each.scanned = self._unscanned()
        consumer.scanned = self._unscanned()
        self.dispatch()

    def _unscanned(self) -> list[tuple[int, int]]:
        """An empty span per level: every ref pending now and later is still to be offered."""
        return [(self._last + 1, self._last)] * PRIORITIES

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach; its unacknowledged deliveries come back for redelivery."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            if consumer.selector is not None:
                self._selective -= 1
        consumer.closed = True
        if self.cursor is not None:
            self.cursor.forget(consumer)
        refs = consumer.take_all()
        if refs:
            self.return_refs(refs)
        self.dispatch()

    # -- dispatch -------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Deliver pending refs to consumers with credit until one side runs out.

        Refs found expired on the way are handed to the owner after each round, not while
        walking the queue; settling them makes room under the cursor's read limits, so
        another round follows."""
        if self._dispatching or not self.consumers:
            return
        self._dispatching = True
        try:
            while True:
                if self.cursor is not None:
                    self.cursor.fill(self)
                if self._selective:
                    self._dispatch_selective()
                else:
                    self._dispatch_fifo()
                if not self._expired:
                    return
                expired, self._expired = self._expired, []
                self.owner.expired(self, expired)
                if not self.consumers:
                    return
        finally:
            self._dispatching = False

    def _next_ready(self, *, idle: bool = False) -> Consumer | None:
        """The next consumer with credit, round-robin. `idle`: one holding nothing (no
        selector) first, else any: a message read past a limit for an idle consumer must not
        go to one holding a full window (it would grow that window past the limit, one
        message per read)."""
        consumers = self.consumers
        count = len(consumers)
        start = self._next_consumer
        for step in range(count):
            index = (start + step) % count
            consumer = consumers[index]
            if consumer.has_credit() and not (idle and not _holds_nothing(consumer)):
                self._next_consumer = index + 1
                return consumer
        return self._next_ready() if idle else None

    def _dispatch_fifo(self) -> None:
        """Deliver in order; whenever the pending refs run out (delivered or expired, each
        making room under the cursor's read limits), read more from the page files."""
        now_ms = 0
        cursor = self.cursor
        while True:
            if not self._pending:
                if cursor is None:
                    return
                cursor.fill(self)
                if not self._pending:
                    return
            consumer = self._next_ready(idle=cursor is not None and cursor.past_limit)
            if consumer is None:
                return
            ref = self._pop_head()
            message = ref.message
            if message.expiration:
                now_ms = now_ms or int(time.time() * 1000)
                if message.expired(now_ms):
                    self._expired.append(ref)
                    continue
            consumer.deliver(ref)

    def _dispatch_selective(self) -> None:
        """Walk pending refs in order; each goes to the next ready consumer that accepts it.

        Deliveries make room under the cursor's read limits (an auto-acked one at once), so
        the walk repeats while the cursor reads more in: nothing else would ask it to.
        """
        cursor = self.cursor
        while True:
            delivered = self._offer_pending()
            if cursor is None:
                return
            before = self._pending
            for consumer in self.consumers:
                if consumer.selector is not None:
                    cursor.look_ahead(consumer)
            if self._pending > before:
                continue  # the look-ahead let held-back refs in: offer them
            if not delivered or cursor.unread <= 0:
                return
            before = self._pending
            cursor.fill(self)
            if self._pending == before:
                return

    def _offer_pending(self) -> int:
        """Offer pending refs, in order, to the consumers with credit that have not yet
        rejected them (each ref to the next such consumer that accepts it); how many left
        (delivered, or expired: either makes room under the cursor's read limits)."""
        ready = [consumer for consumer in self.consumers if consumer.has_credit()]
        if self.cursor is not None and self.cursor.past_limit:
            # Read past a limit for a consumer holding nothing: as in `_next_ready`, not for
            # one holding a window (a hog would grow its window past the limit, a message a read).
            idle = [consumer for consumer in ready if _holds_nothing(consumer)]
            ready = idle or ready
        moved = 0
        for level in range(self._top, -1, -1):
            if not ready:
                break
            if self._levels[level]:
                moved += self._offer_level(level, ready)
                ready = [consumer for consumer in ready if consumer.has_credit()]
        self._top = max((i for i in range(PRIORITIES) if self._levels[i]), default=-1)
        return moved

    def _offer_level(self, level: int, ready: list[Consumer]) -> int:
        """One level's walk. Only its head (refs returned since some ready consumer's span
        began) and tail (refs newer than some ready consumer's span) are taken off the deque
        and walked; the middle, which every ready consumer has rejected, stays put."""
        refs = self._levels[level]
        low = max(consumer.scanned[level][0] for consumer in ready)
        high = min(consumer.scanned[level][1] for consumer in ready)
        head: list[MessageRef] = []
        while refs and refs[0].pos < low:
            head.append(refs.popleft())
        tail: list[MessageRef] = []
        while refs and refs[-1].pos > high:
            tail.append(refs.pop())
        if not head and not tail:
            return 0
        tail.reverse()
        first, last = self._first, self._last
        walking = set(ready)
        stopped: dict[Consumer, MessageRef | None] = {}  # out of credit at this ref (None: in the head)
        kept_head = [ref for ref in head if not self._offer(ref, level, walking, stopped, in_head=True)]
        kept_tail = [ref for ref in tail if not self._offer(ref, level, walking, stopped, in_head=False)]
        moved = len(head) + len(tail) - len(kept_head) - len(kept_tail)
        self._pending -= moved
        for consumer in ready:
            if consumer not in stopped:
                consumer.scanned[level] = (first, last)  # rejected all it was offered
            elif (at := stopped[consumer]) is not None:
                consumer.scanned[level] = (first, at.pos - 1)  # the head, and the tail up to `at`
        if refs and (refs[0].pos < first or refs[-1].pos > last):
            # refs came in or back while delivering (not seen so far): positions say the order
            merged = sorted([*kept_head, *refs, *kept_tail], key=_position)
            refs.clear()
            refs.extend(merged)
        else:
            refs.extendleft(reversed(kept_head))
            refs.extend(kept_tail)
        return moved

    def _offer(self, ref: MessageRef, level: int, walking: set[Consumer],
               stopped: dict[Consumer, MessageRef | None], *, in_head: bool) -> bool:
        """Give one ref to the next ready consumer (round-robin) that has not rejected it
        yet and accepts it; whether it left the queue (delivered or expired)."""
        message = ref.message
        if message.expiration and message.expired(int(time.time() * 1000)):
            ref.queued = False
            self._expired.append(ref)  # handed to the owner after the round
            return True
        consumers = self.consumers
        count = len(consumers)
        start = self._next_consumer
        pos = ref.pos
        for step in range(count):
            index = (start + step) % count
            consumer = consumers[index]
            if consumer not in walking or consumer in stopped:
                continue
            low, high = consumer.scanned[level]
            if low <= pos <= high:
                continue  # rejected it before
            if not consumer.has_credit():
                stopped[consumer] = None if in_head else ref
                continue
            if consumer.accepts(message):
                self._next_consumer = index + 1
                ref.queued = False
                consumer.deliver(ref)
                return True
        return False

    def accepts(self, message: Message) -> bool:
        """The queue's own filter (applied at routing time; None accepts everything)."""
        if self.filter is None:
            return True
        return self.filter.matches_headers(message_view(message))



def _position(ref: MessageRef) -> int:
    return ref.pos


def _holds_nothing(consumer: Consumer) -> bool:
    """A consumer a message read past a read limit is for: no selector, nothing in flight."""
    return consumer.selector is None and not consumer.in_flight


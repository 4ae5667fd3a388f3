"""The reference model: what the broker may and may not do with the messages a program sent.

Pure bookkeeping, no I/O; the runner tells it what happened (a RECEIPT arrived, a MESSAGE was
received, the broker was killed) and asks it what must hold. Everything it asserts follows
from the user contract (docs: interface.md, docs/stomp.md), and it is deliberately
conservative where the contract promises nothing.

Each queue holds one `Copy` per message routed to it, with a status saying how sure we are
that it is there:

- MUST: a persistent message whose SEND (or COMMIT) was receipted, not yet acknowledged with
  a receipt. It must be delivered (eventually) and is counted by the HTTP API.
- MUST_SOFT: known to be in the broker (a later receipt on the same connection proves the
  frame was carried out) but never promised durable: unreceipted or non-persistent sends.
  A kill -9 may lose it; a graceful restart keeps a persistent one.
- MAY: may or may not exist (a frame whose effect is unknown, a kill in the way, an auto-ack
  subscriber that went away with deliveries in flight). Delivering it is fine, losing it too.
- GONE_SOFT: acknowledged and the ACK carried out, without a receipt (or auto-acked at
  delivery): it must not come back unless the broker is killed.
- GONE: acknowledged with a receipt (or GONE_SOFT across a graceful restart), or never sent
  to this queue. Delivering it is a bug: a resurrection or a phantom.

A copy may also be held: delivered and not yet settled (by a subscription, or by an ACK inside
an open transaction), or have an ACK in flight (sent without receipt, not yet known carried
out). Held copies are counted but not deliverable; delivering one again is a duplicate.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from model_program import selector_accepts


class Violation(AssertionError):
    """An invariant the broker broke. `kind` groups violations for shrinking: a shrunk
    program must fail with the same kind as the original."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind = kind
        self.message = message


class Status(enum.Enum):
    MUST = "must"
    MUST_SOFT = "must-unless-killed"
    MAY = "may"
    GONE_SOFT = "gone-unless-killed"
    GONE = "gone"


PRESENT = (Status.MUST, Status.MUST_SOFT)
DELIVERABLE = (Status.MUST, Status.MUST_SOFT, Status.MAY)


@dataclass(eq=False)
class Message:
    """A message the program sent (or sent inside a transaction)."""

    mid: str
    slot: int
    dest: str
    color: str
    persistent: bool = True
    seq: int = -1  # routing order among this slot's messages (FIFO is per producer)


@dataclass(eq=False)
class Tx:
    name: str
    slot: int
    sends: list[Message] = field(default_factory=list)
    acks: list[Copy] = field(default_factory=list)
    nacks: list[Copy] = field(default_factory=list)


@dataclass(eq=False)
class Copy:
    message: Message
    queue: QueueModel
    status: Status
    holder: Sub | Tx | None = None
    ack_in_flight: bool = False
    unsynced: bool = False  # routed by a frame not yet known to be carried out
    taken_by: Sub | None = None  # the subscription it was ACKed from inside a transaction
    seen: bool = False  # the model saw it delivered on this queue
    maybe_seen: bool = False  # it may have been delivered without the model seeing it
    history: list[str] = field(default_factory=list)

    def note(self, event: str) -> None:
        self.history.append(event)

    @property
    def deliverable(self) -> bool:
        return self.status in DELIVERABLE and self.holder is None and not self.ack_in_flight


@dataclass(eq=False)
class QueueModel:
    key: str  # unique per instance in the model
    name: str | None  # the broker's queue name (None for a non-durable subscription's queue)
    address: str  # '/queue/q0' or '/topic/t0'
    kind: str  # 'anycast' | 'durable' | 'temporary'
    filter: str | None = None
    copies: dict[str, Copy] = field(default_factory=dict)
    subs: list[Sub] = field(default_factory=list)
    alive: bool = True

    def count_range(self) -> tuple[int, int]:
        """(least, most) messages the HTTP API may count: everything not acknowledged."""
        low = sum(1 for c in self.copies.values() if c.status in PRESENT)
        high = low + sum(1 for c in self.copies.values() if c.status is Status.MAY)
        return low, high

    def held(self) -> int:
        return sum(1 for c in self.copies.values() if c.holder is not None or c.ack_in_flight)


@dataclass(eq=False)
class Sub:
    uid: int
    slot: int
    sub_id: str
    queue: QueueModel
    ack: str
    prefetch: int
    selector: str | None  # the consumer's selector (a topic subscription's is its queue filter)
    held: list[tuple[Copy, str]] = field(default_factory=list)  # (copy, ack id), delivery order
    fifo_off: bool = False  # another consumer shared the queue: no FIFO promise
    last: dict[int, tuple[int, str]] = field(default_factory=dict)  # producer -> (seq, mid)
    open: bool = True
    received: int = 0

    @property
    def credit(self) -> float:
        """Deliveries the consumer may still take. A message it ACKed inside a transaction
        still counts against its prefetch until COMMIT/ABORT: the contract does not say it
        frees credit, so the model does not insist on deliveries that would need it."""
        if self.ack == "auto":
            return math.inf
        in_tx = sum(1 for c in self.queue.copies.values()
                    if isinstance(c.holder, Tx) and c.taken_by is self)
        return self.prefetch - len(self.held) - in_tx

    def accepts(self, copy: Copy) -> bool:
        return selector_accepts(self.selector, copy.message.color)

    def describe(self) -> str:
        extra = f" selector {self.selector!r}" if self.selector else ""
        return (f"slot {self.slot} {self.sub_id} on {self.queue.key} "
                f"({self.ack}, prefetch {self.prefetch}{extra})")


@dataclass(eq=False)
class _Unsynced:
    """An effect of a frame sent without receipt, settled by the next receipt on its connection."""

    copies: list[Copy] = field(default_factory=list)  # routed by it: MAY until then
    acks: list[Copy] = field(default_factory=list)  # acknowledged by it: in flight until then


class Model:
    def __init__(self, max_read_page_messages: int, budget: bool = False) -> None:
        self.max_read = max_read_page_messages
        # A global-max-size is set: reading back stops while the budget is full, as long as
        # the queue holds a message read back (each queue may always hold one).
        self.budget = budget
        self.messages: dict[str, Message] = {}
        self.queues: dict[str, QueueModel] = {}  # live instances by key
        self.dead_queues: list[QueueModel] = []
        self.durables: dict[str, QueueModel] = {}  # broker queue name -> live durable queue
        self.subs: dict[int, Sub] = {}  # open subscriptions by slot
        self.txs: dict[int, Tx] = {}
        self.unsynced: dict[int, list[_Unsynced]] = {}
        # Topic messages whose SEND was not yet carried out for sure: a subscription made
        # meanwhile may or may not get them.
        self.limbo: list[Message] = []
        self._seq: dict[int, int] = {}
        self._uids = iter(range(1, 1_000_000))
        self._temp_ids = iter(range(1, 1_000_000))

    # -- queues ---------------------------------------------------------------------------

    def anycast(self, dest: str) -> QueueModel:
        name = dest.removeprefix("/queue/")
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = QueueModel(name, name, dest, "anycast")
        return queue

    def durable_name(self, slot: int, dest: str, durable: str) -> str:
        return f"c{slot}.{dest.removeprefix('/topic/')}-{durable}"

    def _kill_queue(self, queue: QueueModel, why: str) -> None:
        """The queue is deleted: its messages are gone for good."""
        queue.alive = False
        for copy in queue.copies.values():
            copy.status = Status.GONE
            copy.holder = None
            copy.ack_in_flight = False
            copy.note(why)
        self.queues.pop(queue.key, None)
        if queue.name is not None and self.durables.get(queue.name) is queue:
            del self.durables[queue.name]
        self.dead_queues.append(queue)

    def purged(self, queue: QueueModel, why: str) -> None:
        """An operator purged the queue (every frame sent before was carried out): what was
        in it and not held is gone for good (the purge is durable when it answers), unless
        a consumer may have had it in flight unseen (then it may come, or not)."""
        consumed = any(sub.open for sub in queue.subs)
        for copy in queue.copies.values():
            if copy.holder is not None or copy.ack_in_flight or copy.status not in DELIVERABLE:
                continue
            if consumed or copy.unsynced or copy.status is Status.MAY:
                copy.status = Status.MAY
            else:
                copy.status = Status.GONE
            copy.note(why)

    def destroy_durable(self, name: str) -> None:
        queue = self.durables.get(name)
        if queue is not None:
            self._kill_queue(queue, "its durable subscription was removed")

    def topic_queues(self, dest: str) -> Iterator[QueueModel]:
        for queue in self.queues.values():
            if queue.address == dest and queue.kind != "anycast":
                yield queue

    # -- sending --------------------------------------------------------------------------

    def new_message(self, mid: str, slot: int, dest: str, color: str, persistent: bool = True) -> Message:
        message = Message(mid, slot, dest, color, persistent)
        self.messages[mid] = message
        return message

    def route(self, message: Message, *, receipted: bool, slot: int | None = None) -> list[Copy]:
        """The broker carried out (receipted) or may carry out (not yet) this SEND/COMMIT:
        one copy per queue it reaches. Sequence numbers follow the connection's frame order."""
        message.seq = self._seq.get(message.slot, 0)
        self._seq[message.slot] = message.seq + 1
        if message.dest.startswith("/queue/"):
            targets = [self.anycast(message.dest)]
        else:
            targets = [q for q in self.topic_queues(message.dest)
                       if selector_accepts(q.filter, message.color)]
        copies = []
        for queue in targets:
            status = Status.MUST if receipted and message.persistent else Status.MUST_SOFT
            copy = Copy(message, queue, status if receipted else Status.MAY, unsynced=not receipted)
            copy.note("routed" if receipted else "routed by a frame without receipt")
            queue.copies[message.mid] = copy
            copies.append(copy)
        if not receipted:
            assert slot is not None
            self.unsynced.setdefault(slot, []).append(_Unsynced(copies=copies))
            if message.dest.startswith("/topic/"):
                self.limbo.append(message)
        return copies

    def sync(self, slot: int) -> None:
        """A RECEIPT arrived on this slot's connection: every frame before it was carried out.
        A message it routed is then there, unless it may have gone meanwhile without the model
        seeing it (`maybe_seen`: to an auto-ack subscriber that vanished, or by an ACK lost
        with its connection, not known undone): that one stays a MAY (seed 504)."""
        for effect in self.unsynced.pop(slot, []):
            for copy in effect.copies:
                if copy.unsynced:
                    copy.unsynced = False
                    if copy.status is Status.MAY and not copy.maybe_seen:
                        copy.status = Status.MUST_SOFT
                        copy.note("its frame was carried out (a later receipt)")
            for copy in effect.acks:
                if copy.ack_in_flight:
                    copy.ack_in_flight = False
                    copy.status = Status.GONE_SOFT
                    copy.note("its ACK was carried out (a later receipt)")
        self.limbo = [m for m in self.limbo if m.slot != slot]

    # -- subscribing ----------------------------------------------------------------------

    def subscribe(self, slot: int, sub_id: str, dest: str, ack: str, prefetch: int,
                  selector: str | None, durable: str | None) -> Sub:
        """The SUBSCRIBE was receipted: the subscription (and its queue) exist."""
        if dest.startswith("/queue/"):
            queue = self.anycast(dest)
            consumer_selector = selector
        else:
            consumer_selector = None
            if durable is not None:
                name = self.durable_name(slot, dest, durable)
                queue = self.durables.get(name)
                if queue is not None and queue.filter != selector:
                    # JMS: a new selector makes a new subscription; the old one's messages go.
                    self._kill_queue(queue, "its durable subscription was re-made with a new selector")
                    queue = None
                if queue is None:
                    key = f"{name}#{len(self.dead_queues)}"
                    queue = QueueModel(key, name, dest, "durable", selector)
                    self.queues[key] = queue
                    self.durables[name] = queue
                    self._late_route(queue)
            else:
                key = f"{dest.removeprefix('/topic/')}.sub{next(self._temp_ids)}"
                queue = QueueModel(key, None, dest, "temporary", selector)
                self.queues[key] = queue
                self._late_route(queue)
        sub = Sub(next(self._uids), slot, sub_id, queue, ack, max(prefetch, 1), consumer_selector)
        if queue.subs:
            sub.fifo_off = True
            for other in queue.subs:
                other.fifo_off = True
        queue.subs.append(sub)
        self.subs[slot] = sub
        return sub

    def _late_route(self, queue: QueueModel) -> None:
        """A new topic subscription may get messages whose SEND was not yet carried out."""
        for message in self.limbo:
            if message.dest == queue.address and selector_accepts(queue.filter, message.color):
                copy = Copy(message, queue, Status.MAY)
                copy.note("sent without receipt before this subscription was made")
                queue.copies[message.mid] = copy

    def close_sub(self, sub: Sub, why: str, *, lost_possible: bool = True) -> None:
        """The subscription is gone (UNSUBSCRIBE, DISCONNECT, socket closed, broker stopped):
        what it held goes back to its queue; a non-durable subscription's queue goes with it.
        Unless its end was receipted (`lost_possible` False: every delivery came before the
        RECEIPT), an auto-ack one may have taken more than we saw."""
        if not sub.open:
            return
        sub.open = False
        queue = sub.queue
        if sub in queue.subs:
            queue.subs.remove(sub)
        if self.subs.get(sub.slot) is sub:
            del self.subs[sub.slot]
        for copy, _ack_id in sub.held:
            if copy.holder is sub:
                copy.holder = None
                copy.note(f"returned: {why}")
        sub.held.clear()
        if sub.ack == "auto" and lost_possible:
            self.auto_may_have_taken(sub, why)
        if queue.kind == "temporary":
            self._kill_queue(queue, "its non-durable subscription closed")

    def auto_may_have_taken(self, sub: Sub, why: str) -> None:
        """An auto-ack subscription ends with deliveries possibly in flight: every message it
        would accept may have been delivered (and so acknowledged) without our seeing it."""
        for copy in sub.queue.copies.values():
            if copy.deliverable and sub.accepts(copy):
                copy.maybe_seen = True
                if copy.status in PRESENT:
                    copy.status = Status.MAY
                    copy.note(f"may have gone to auto-ack {sub.sub_id} unseen: {why}")

    # -- deliveries -----------------------------------------------------------------------

    def delivered(self, sub: Sub, mid: str, ack_id: str, redelivered: bool) -> Copy:
        """A MESSAGE frame for `sub` arrived. Raises Violation for anything it may not be."""
        queue = sub.queue
        label = f"{mid} on {queue.key} to {sub.describe()}"
        if mid not in self.messages:
            raise Violation("phantom", f"{label}: no such message was ever sent")
        copy = queue.copies.get(mid)
        if copy is None:
            raise Violation("phantom", f"{label}: the message was never routed to this queue "
                            f"(sent to {self.messages[mid].dest})")
        if copy.status is Status.GONE:
            raise Violation("resurrected", f"{label}: delivered after it was gone "
                            f"({'; '.join(copy.history)})")
        if copy.status is Status.GONE_SOFT:
            raise Violation("resurrected", f"{label}: delivered again after its acknowledgement "
                            f"was carried out, with no crash since ({'; '.join(copy.history)})")
        if copy.holder is not None or copy.ack_in_flight:
            held_by = copy.holder.describe() if isinstance(copy.holder, Sub) else (
                f"transaction {copy.holder.name}" if copy.holder is not None else "an ACK in flight")
            raise Violation("duplicate", f"{label}: delivered while still held by {held_by}")
        if not sub.accepts(copy):
            raise Violation("selector", f"{label}: color {copy.message.color} does not match the "
                            f"subscription's selector")
        first = not copy.seen and not copy.maybe_seen and not redelivered
        copy.seen = True
        sub.received += 1
        if first and not sub.fifo_off:
            self._check_fifo(sub, copy, label)
        if sub.ack == "auto":
            copy.status = Status.GONE_SOFT
            copy.note(f"delivered to auto-ack {sub.sub_id}")
        else:
            copy.holder = sub
            sub.held.append((copy, ack_id))
            copy.note(f"delivered to {sub.sub_id}")
        return copy

    def _check_fifo(self, sub: Sub, copy: Copy, label: str) -> None:
        message = copy.message
        last = sub.last.get(message.slot)
        if last is not None and message.seq < last[0]:
            raise Violation("order", f"{label}: first delivered after {last[1]}, which slot "
                            f"{message.slot} sent later (FIFO per producer for a single consumer)")
        sub.last[message.slot] = (message.seq, message.mid)

    # -- acknowledging --------------------------------------------------------------------

    def take(self, sub: Sub, pick: float) -> tuple[list[Copy], str] | None:
        """The deliveries an ACK/NACK of the `pick`-th held message settles (client mode:
        that one and every one before it), and the ack id to send; None if nothing is held."""
        if sub.ack == "auto" or not sub.held:
            return None
        index = min(int(pick * len(sub.held)), len(sub.held) - 1)
        ack_id = sub.held[index][1]
        if sub.ack == "client":
            taken = sub.held[: index + 1]
            del sub.held[: index + 1]
        else:
            taken = [sub.held.pop(index)]
        copies = [copy for copy, _ in taken]
        for copy in copies:
            copy.holder = None
        return copies, ack_id

    def acked(self, copies: Iterable[Copy], *, receipted: bool, slot: int, how: str) -> None:
        for copy in copies:
            if receipted:
                copy.status = Status.GONE
                copy.ack_in_flight = False
                copy.note(f"{how} (receipted)")
            else:
                copy.ack_in_flight = True
                copy.note(f"{how} without receipt")
        if not receipted:
            self.unsynced.setdefault(slot, []).append(_Unsynced(acks=list(copies)))

    def nacked(self, copies: Iterable[Copy]) -> None:
        for copy in copies:
            copy.note("NACKed")  # back to its queue (max-delivery-attempts is out of reach)

    # -- transactions ---------------------------------------------------------------------

    def begin(self, slot: int, name: str) -> None:
        self.txs[slot] = Tx(name, slot)

    def tx_ack(self, tx: Tx, sub: Sub, copies: list[Copy], *, nack: bool = False) -> None:
        """ACK (or NACK) inside a transaction: held by it until COMMIT or ABORT. A NACK
        returns the messages to their queue either way (ABORT undoes it as it undoes an ACK)."""
        for copy in copies:
            copy.holder = tx
            copy.taken_by = sub
            copy.note(f"{'NACKed' if nack else 'ACKed'} in transaction {tx.name}")
        (tx.nacks if nack else tx.acks).extend(copies)

    def commit(self, slot: int, *, receipted: bool) -> None:
        tx = self.txs.pop(slot)
        for message in tx.sends:
            self.route(message, receipted=receipted, slot=slot)
        live = [copy for copy in tx.acks if copy.holder is tx]
        for copy in live:
            copy.holder = None
        self.acked(live, receipted=receipted, slot=slot, how=f"committed in {tx.name}")
        self._return(tx, tx.nacks, f"NACK committed in {tx.name}")

    @staticmethod
    def _return(tx: Tx, copies: list[Copy], why: str) -> None:
        for copy in copies:
            if copy.holder is tx:
                copy.holder = None
                copy.note(why)

    def rollback(self, slot: int, why: str) -> None:
        """ABORT, or the connection closed with the transaction open: its sends never
        happened, its ACKed messages go back to their queues."""
        tx = self.txs.pop(slot, None)
        if tx is None:
            return
        self._return(tx, tx.acks + tx.nacks, f"transaction {tx.name} rolled back: {why}")

    # -- connections and the broker -------------------------------------------------------

    def connection_closed(self, slot: int, why: str) -> None:
        sub = self.subs.get(slot)
        if sub is not None:
            self.close_sub(sub, why)
        self.rollback(slot, why)
        # Frames sent without receipt may or may not have been carried out: an ACK in flight
        # may be lost (the message comes back) or not (it does not).
        for effect in self.unsynced.pop(slot, []):
            for copy in effect.copies:
                copy.unsynced = False
            for copy in effect.acks:
                if copy.ack_in_flight:
                    copy.ack_in_flight = False
                    if copy.status in DELIVERABLE:
                        copy.status = Status.MAY
                        copy.maybe_seen = True
                    copy.note(f"ACK without receipt may be lost: {why}")
        # `limbo` keeps this slot's unsynced topic sends until the next restart: a dropped
        # connection's last frames may still be carried out after later subscriptions.

    def broker_stopped(self, *, killed: bool) -> None:
        """Every connection is gone; then what survives a graceful restart or a kill -9."""
        why = "broker killed" if killed else "broker restarted"
        for slot in sorted(set(self.subs) | set(self.txs) | set(self.unsynced)):
            self.connection_closed(slot, why)
        self.limbo.clear()
        for queue in list(self.queues.values()):
            for copy in queue.copies.values():
                self._survive(copy, killed, why)

    @staticmethod
    def _survive(copy: Copy, killed: bool, why: str) -> None:
        status = copy.status
        if not copy.message.persistent and status in DELIVERABLE:
            copy.status = Status.MAY  # a non-persistent message need not survive any restart
        elif status is Status.MUST_SOFT:
            copy.status = Status.MAY if killed else Status.MUST
        elif status is Status.GONE_SOFT:
            copy.status = Status.MAY if killed else Status.GONE
        else:
            return
        if copy.status is Status.MAY:
            copy.maybe_seen = True
        copy.note(f"{why}: now {copy.status.value}")

    # -- what must hold -------------------------------------------------------------------

    def read_blocked(self, queue: QueueModel) -> bool:
        """max-read-page-messages counts every paged message read into memory and not yet
        acknowledged: while that many are held, a paging queue may legitimately wait. With a
        global-max-size, one held is enough: the budget may be full (the model does not
        track it), and then a queue holding a message read back reads no more."""
        held = queue.held()
        return (self.max_read >= 0 and held >= self.max_read) or (self.budget and held >= 1)

    def stalls(self, queues: Iterable[QueueModel] | None = None,
               only: Sub | None = None) -> list[tuple[Copy, Sub]]:
        """Messages that must be delivered now: present, not held, and a consumer of their
        queue with free credit accepts them (and no read limit stands in the way, or the
        consumer holds nothing: it gets one past the limits)."""
        found = []
        for queue in self.queues.values() if queues is None else queues:
            subs = [only] if only is not None else queue.subs
            if not subs or not queue.alive:
                continue
            blocked = self.read_blocked(queue)
            for copy in queue.copies.values():
                if copy.status not in PRESENT or not copy.deliverable:
                    continue
                for sub in subs:
                    if sub.open and sub.credit > 0 and sub.accepts(copy) and (
                            (sub.selector is not None and not self.budget) or not blocked
                            or (sub.selector is None and self._idle(sub))):
                        found.append((copy, sub))
                        break
        return found

    def _idle(self, sub: Sub) -> bool:
        """A consumer holding nothing (no delivery unacknowledged, none in a transaction or
        an ACK in flight): past any read limit or budget it still gets one message."""
        return not sub.held and not any(
            copy.ack_in_flight or (copy.taken_by is sub and isinstance(copy.holder, Tx))
            for copy in sub.queue.copies.values())

    def expected(self, queue: QueueModel) -> tuple[set[str], set[str]]:
        """(must be there, may be there) for a drain of this queue."""
        must = {mid for mid, c in queue.copies.items() if c.status in PRESENT}
        may = {mid for mid, c in queue.copies.items() if c.status is Status.MAY}
        return must, may

    def queues_with_names(self) -> list[QueueModel]:
        return [q for q in self.queues.values() if q.name is not None]

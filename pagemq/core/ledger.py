"""Who holds each message: reference counts, durable releases, memory charges, ack batching.

A message routed to several queues is one shared object (multicast: one copy per address).
The ledger counts its holders (`Message.refs`) and its durable holders
(`Message.durable_refs`: queues whose journal record of it is still live), charges it once
to its address and to the one memory budget, and when the last holder lets go frees the
memory and, for a persistent message, writes the journal's final acknowledgement. A ref read
back from a page file is settled by its queue's page cursor instead (its record is in the
page file, its ack a cursor record).

Acks of paged messages are gathered per cursor and written once per loop turn
(`acks_to_write`), so a burst of ACK frames costs one journal record per page; `flush` writes
what is gathered before asking the journal for durability, so a receipt covers them.

The room acknowledgements make is filled after a burst of them (`begin_acks`/`end_acks`: the
frames of one socket read), one dispatch per queue. Dispatching after each ACK sent one
message per ACK: the consumer, getting small batches, acknowledged in small batches, and a
drain settled into reads, writes and journal records of a dozen messages each. A long burst
is also filled every `DISPATCH_EVERY` acknowledged messages as it goes: filling is most of
what an ACK costs (a paged message read back and sent for each), and the frames' caller
bounds its time per frame (the server's turn budget), which only sees a dispatch done
between frames. With one dispatch per read, those refills were 43 % of the loop's time
(py-spy, a 4+4 run beside a paged drain), all of it past the slices; with one every 64, a
drain's callback still ran 3.05 ms on a 1.45 ms slice and the drain's four connections took
~57 % of the loop; every 16: 1.76 ms on 1.36, but a plain paged drain did ~12 % worse (its
consumers, sent smaller batches, acknowledged in twice as many reads). Every 32, and what a
callback still runs past its slice taken off its next ones (`TurnBudget.debt`), keeps both
(benchmarks/README.md, issue 14).

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pagemq.core.memory import JOURNAL_PART

if TYPE_CHECKING:
    from pagemq.core.address import Address
    from pagemq.core.consumer import MessageRef
    from pagemq.core.memory import MemoryAccountant
    from pagemq.core.message import Message
    from pagemq.core.queue import Queue
    from pagemq.storage.api import MessageStore
    from pagemq.storage.paging.queue_store import AckWriter

DISPATCH_EVERY = 32
"""Messages acknowledged within a burst after which the room they made is filled, without
waiting for the burst's end (see the module)."""

JOURNAL_ENTRY_BYTES = 384
"""The journal's in-memory index entry of one stored message (storage/journal.py: its live
record and location, the data file's id set: ~380 bytes by tracemalloc, CPython 3.11),
charged while an in-memory persistent message for durable queues is held. Paged messages
have no journal record."""


class Ledger:
    def __init__(self, store: MessageStore, memory: MemoryAccountant, addresses: dict[str, Address]) -> None:
        self.store = store
        self.memory = memory
        self._addresses = addresses
        # Cursors holding acks of paged messages not yet written; see acks_to_write().
        self._unwritten_acks: dict[AckWriter, None] = {}
        # Between `begin_acks` and `end_acks`: queues whose acks made room, dispatched at the end.
        self._batching = 0
        self._to_dispatch: dict[Queue, None] = {}
        self._settled_in_burst = 0  # since the burst's last dispatch
        self._burst_failure: Exception | None = None  # a dispatch's within the burst, raised at its end

    # -- holding ------------------------------------------------------------------------------

    def hold(self, message: Message, address: Address, holders: int, *, durable: int) -> None:
        """Charge one shared copy to `address` and the global budget; count its holders."""
        message.refs = holders
        message.durable_refs = durable
        size = message.memory_size
        address.charge(size)
        self.memory.charge(size)
        if durable and message.persistent:  # its journal record's index entry, while held
            message.journal_charge = JOURNAL_ENTRY_BYTES
            self.memory.charge_part(JOURNAL_PART, JOURNAL_ENTRY_BYTES)

    def unhold_all(self, address: Address, message: Message) -> None:
        """Undo `hold` of a message that never reached its queues (a refused commit)."""
        message.refs = 0
        size = message.memory_size
        address.release(size)
        self.memory.release(size)
        self._release_journal_entry(message)

    def unhold(self, queue: Queue, message: Message) -> None:
        """Count `queue`'s hold on `message` off; the last one frees its memory."""
        message.refs -= 1
        if message.refs == 0:
            size = message.memory_size
            self._addresses[queue.address_name].release(size)
            self.memory.release(size)
            if message.journal_charge:
                self._release_journal_entry(message)

    def _release_journal_entry(self, message: Message) -> None:
        if message.journal_charge:
            self.memory.charge_part(JOURNAL_PART, -message.journal_charge)
            message.journal_charge = 0

    def durable_release(self, queue: Queue, message: Message) -> bool | None:
        """Count `queue`'s durable hold on `message` off: whether it was the last one, or
        None when the queue held no durable record of it."""
        if message.persistent and queue.durable and message.durable_refs > 0:
            message.durable_refs -= 1
            return message.durable_refs == 0
        return None

    # -- settling -------------------------------------------------------------------------

    def acknowledge(self, queue: Queue, refs: Iterable[MessageRef]) -> None:
        settled = 0
        for ref in refs:
            self.settle(queue, ref)
            settled += 1
        self.room_made(queue, settled)

    def room_made(self, queue: Queue, deliveries: int) -> None:
        """`deliveries` left their consumers' windows (acknowledged, or held by a
        transaction): the room is filled now, or with the burst's (see begin_acks)."""
        if not self._batching:
            queue.dispatch()
            return
        self._to_dispatch[queue] = None
        self._settled_in_burst += deliveries
        if self._settled_in_burst >= DISPATCH_EVERY:
            self._dispatch_burst()

    def begin_acks(self) -> None:
        """A burst of acknowledgements follows (the frames of one socket read): the room
        they make is filled every `DISPATCH_EVERY` of them and when `end_acks` is called,
        rather than once per ACK. (A consumer whose subscription the burst ends is closed
        by its session before the burst: no refill, from this burst or any other, sends
        it what it would hand back unseen.)"""
        self._batching += 1

    def end_acks(self) -> None:
        """The burst is over: the room made since its last dispatch is filled; the first
        dispatch failure of the burst is raised (the acknowledgements stand)."""
        self._batching -= 1
        if self._batching:
            return
        self._dispatch_burst()
        failure, self._burst_failure = self._burst_failure, None
        if failure is not None:
            raise failure

    def _dispatch_burst(self) -> None:
        self._settled_in_burst = 0
        if not self._to_dispatch:
            return
        queues, self._to_dispatch = self._to_dispatch, {}
        for queue in queues:  # one queue's failing dispatch leaves no other queue unfilled
            try:
                queue.dispatch()
            except Exception as exc:
                self._burst_failure = self._burst_failure or exc

    def given_back(self, queue: Queue, refs: list[MessageRef]) -> None:
        """The delivery counts of journaled messages given back unacknowledged, written to
        their records (as Artemis updates a durable message's delivery count when a delivery
        is cancelled): a restart resumes them, so `redelivered` and max-delivery-attempts
        hold across it. A paged ref's count is not kept (its record is in a page file).
        Only counts that matter are written, so a message given back for ever (no
        max-delivery-attempts) does not grow the journal for ever: each up to the limit, or
        the first alone (what makes `redelivered` true) when there is none."""
        if not queue.durable:
            return
        limit = max(queue.settings.max_delivery_attempts, 1)
        for ref in refs:
            message = ref.message
            if ref.page_pos is None and message.persistent and 0 < ref.delivery_count <= limit:
                self.store.delivery_count(message.message_id, queue.queue_id, ref.delivery_count)

    def settle(self, queue: Queue, ref: MessageRef) -> None:
        """Acknowledge one ref (also during dispatch: an auto ack; the dispatch goes on)."""
        queue.counters.acknowledged += 1
        self.release(queue, ref)

    def release(self, queue: Queue, ref: MessageRef) -> None:
        """One queue is done with a message: drop its durable record and memory when last."""
        if ref.page_pos is not None:
            assert queue.cursor is not None
            queue.cursor.settle(ref, acked=True)
            return
        message = ref.message
        last = self.durable_release(queue, message)
        if last is not None:
            self.store.acknowledge(message.message_id, queue.queue_id, last=last)
        self.unhold(queue, message)

    # -- durability -----------------------------------------------------------------------

    def flush(self) -> asyncio.Future[None]:
        """Resolves once everything done so far is durable, gathered cursor acks included:
        what a RECEIPT for an ACK or a COMMIT waits for."""
        self.write_acks()
        return self.store.flush()

    def acks_to_write(self, cursor: AckWriter) -> None:
        """`cursor` gathered acks of paged messages: write them at the end of this loop turn
        (at once when no loop runs), one record per page for all of the turn's ACKs."""
        first = not self._unwritten_acks
        self._unwritten_acks[cursor] = None
        if first:
            try:
                asyncio.get_running_loop().call_soon(self.write_acks)
            except RuntimeError:
                self.write_acks()

    def write_acks(self) -> None:
        cursors, self._unwritten_acks = self._unwritten_acks, {}
        for cursor in cursors:
            cursor.write_acks()

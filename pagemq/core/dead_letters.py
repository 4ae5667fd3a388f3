"""Moving messages a queue cannot keep: dead letters and expired messages.

A ref returned unacknowledged `max-delivery-attempts` times goes to the address's
`dead-letter-address`, an expired one to its `expiry-address`, as Artemis does, each as a copy
sent there (with `original-destination`) in one transaction with the original's settlement.
A message is never destroyed because its target cannot take it: a dead letter that cannot be
moved stays in its queue, and the copy is admitted past the target's full policy (it pages).
An expired message with no usable expiry address is discarded (it has expired), as Artemis
discards it without one.

Queues hand their refs over after a dispatch round, never from inside one (`QueueOwner`), so
a move, which routes to other queues, never runs in the middle of another queue's walk.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST
from pagemq.core.errors import BrokerError
from pagemq.core.futures import failure
from pagemq.core.routing import Blocked
from pagemq.core.transactions import PendingSend, Transaction

if TYPE_CHECKING:
    from pagemq.core.commit import Transactions
    from pagemq.core.consumer import MessageRef
    from pagemq.core.expiry import ExpiryTimers
    from pagemq.core.ledger import Ledger
    from pagemq.core.queue import Queue

log = logging.getLogger("pagemq.broker")

ORIGINAL_DESTINATION = "original-destination"
ORIGINAL_QUEUE = "original-queue"  # the queue it left (Artemis' _AMQ_ORIG_QUEUE): a retry goes back there
ACTUAL_EXPIRY = "_AMQ_ACTUAL_EXPIRY"  # when it expired (ms since the epoch), as Artemis stamps it


class DeadLetters:
    def __init__(self, transactions: Transactions, ledger: Ledger, timers: ExpiryTimers) -> None:
        self.transactions = transactions
        self.ledger = ledger
        self.timers = timers
        self._moving: set[asyncio.Future[None]] = set()  # moves not durable yet

    async def settled(self, timeout: float) -> None:
        """Wait (bounded) for the moves under way: each is a transaction whose page batches
        may still be written, and a stop that closed the journal first would void it half
        done (`BrokerServer.stop`)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._moving:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                log.warning("%d moves to a dead-letter or expiry address not settled at stop",
                            len(self._moving))
                return
            await asyncio.wait(list(self._moving), timeout=left)
            await asyncio.sleep(0)  # their callbacks run: the originals' acknowledgements

    def exhausted(self, queue: Queue, refs: list[MessageRef]) -> list[MessageRef]:
        """Dead-letter refs delivered too often; returns those that could not be moved."""
        kept = []
        target = queue.settings.dead_letter_address
        for ref in refs:
            if not self._move(queue, ref, target, expired_at=0):
                kept.append(ref)
        return kept

    def expired(self, queue: Queue, refs: list[MessageRef]) -> None:
        """Move expired refs (already off their queue) to the expiry address, or discard them."""
        target = queue.settings.expiry_address
        now_ms = int(time.time() * 1000)
        for ref in refs:
            if not self._move(queue, ref, target, expired_at=now_ms):
                self.ledger.release(queue, ref)
                queue.counters.expired += 1

    def expire_due(self) -> int:
        """Take the refs whose time has passed off their queues and move them on (queues
        nobody consumes see no dispatch that would); how many expired."""
        now_ms = int(time.time() * 1000)
        expired = 0
        for queue, refs in self.timers.due(now_ms).items():
            taken = [ref for ref in queue.take_pending(refs) if ref.message.expired(now_ms)]
            if taken:
                self.expired(queue, taken)
                expired += len(taken)
        return expired

    def _move(self, queue: Queue, ref: MessageRef, target: str, *, expired_at: int) -> bool:
        """Send a copy to `target` (an anycast address) and settle the original, atomically:
        one broker transaction (core.commit) writes both, as Artemis moves a message in a
        transaction, so a crash leaves the one or the other, never both. False, with the
        original untouched, if `target` cannot take it.

        The copy never expires, as Artemis resets a moved copy's expiration: its `expires`
        header says 0, or a consumer of the dead-letter or expiry queue would be told a time
        already past. An expired one (`expired_at` > 0) gains `_AMQ_ACTUAL_EXPIRY`."""
        message = ref.message
        if not target or target == queue.address_name:
            if target:  # e.g. a dead letter of the dead-letter queue itself: no loop
                log.warning("message %s of queue %r discarded: it would be moved to its own address %r",
                            message.message_id, queue.name, target)
            self.ledger.release(queue, ref)
            _count(queue, expired_at)
            return True
        headers = dict(message.headers)
        headers.setdefault(ORIGINAL_DESTINATION, message.headers.get("destination", message.address))
        headers.setdefault(ORIGINAL_QUEUE, queue.name)
        headers["destination"] = target
        if "expires" in headers:
            headers["expires"] = "0"
        if expired_at:
            headers[ACTUAL_EXPIRY] = str(expired_at)
        tx = Transaction(f"move of message {message.message_id} to {target}", move=True)
        tx.sends.append(PendingSend(target, ANYCAST, headers, message.body, message.persistent,
                                    message.priority, 0, internal=True))
        tx.acks.append((queue, ref))
        self.transactions.hold(queue, [ref])
        try:
            future = self.transactions.commit(tx)
        except (BrokerError, Blocked, OSError) as exc:
            queue.transacted -= 1
            log.warning("message %s stays in queue %r: it cannot be moved to %r: %s",
                        message.message_id, queue.name, target, exc)
            return False
        if future is None:
            _count(queue, expired_at)
            return True

        def moved(done: asyncio.Future[None]) -> None:
            self._moving.discard(done)
            if done.cancelled() or done.exception() is not None:  # its refs came back (commit)
                log.warning("message %s stays in queue %r: its move to %r was not stored: %s",
                            message.message_id, queue.name, target, failure(done))
            else:  # counted once moved: a failed move is tried again, and counted then
                _count(queue, expired_at)
            if not queue.deleted:
                queue.dispatch()  # room under the read limits, or the ref back: read on

        self._moving.add(future)
        future.add_done_callback(moved)
        return True


def _count(queue: Queue, expired_at: int) -> None:
    """A message left `queue` for good: expired (`expired_at` > 0) or dead-lettered."""
    if expired_at:
        queue.counters.expired += 1
    else:
        queue.counters.killed += 1

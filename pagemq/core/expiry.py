"""When pending messages expire: a heap of due times, not a scan of every message.

A queue reports each ref of a message with an expiration as it becomes pending (routed, read
back from a page, recovered, returned unacknowledged; `QueueOwner.expires`). The broker's
periodic tick pops what is due and takes those refs off their queues, so a queue nobody
consumes still sends its expired messages on; a queue being consumed also skips expired
refs as it dispatches them. Messages without an expiration cost nothing here.

Entries are not removed when their ref is delivered (a heap cannot find them cheaply): a
popped entry whose ref is no longer pending is dropped. An entry refers to its ref weakly,
so an acknowledged message is not kept alive until it would have expired; the entries of
refs that are gone are counted as they die and swept out in one rebuild once they are half
of the heap (O(entries), paid for by the pushes that made it due).

Each entry costs about `ENTRY_BYTES` (a 4-tuple, its due time, a sequence number and a weak
reference, measured with tracemalloc), charged to the memory budget while it is in the heap
(`MemoryAccountant.charge_part`): at most twice the entries of the pending refs with an
expiration (dead ones are swept at half), and those refs are in memory, so in the budget too.

Loop-only: every method runs on the event loop thread (the weakref callbacks too: refs are
only dropped there).
"""

from __future__ import annotations

import heapq
import weakref
from itertools import count
from typing import TYPE_CHECKING

from pagemq.core.memory import EXPIRY_PART

if TYPE_CHECKING:
    from pagemq.core.consumer import MessageRef
    from pagemq.core.memory import MemoryAccountant
    from pagemq.core.queue import Queue

COMPACT_FLOOR = 1024  # a heap this small is never rebuilt
ENTRY_BYTES = 224  # one heap entry (tracemalloc, CPython 3.11)

_Entry = tuple[int, int, "Queue", "weakref.ref[MessageRef]"]


class ExpiryTimers:
    """Due times of pending refs, earliest first."""

    __slots__ = ("_dead", "_died", "_heap", "_memory", "_seq")

    def __init__(self, memory: MemoryAccountant | None = None) -> None:
        self._memory = memory
        self._heap: list[_Entry] = []
        self._seq = count()  # ties broken by arrival: entries never compare queues or refs
        self._dead = 0  # entries whose ref is gone

        def died(_ref: weakref.ref[MessageRef]) -> None:
            self._dead += 1

        self._died = died

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, queue: Queue, ref: MessageRef) -> None:
        heapq.heappush(
            self._heap, (ref.message.expiration, next(self._seq), queue, weakref.ref(ref, self._died))
        )
        if self._memory is not None:
            self._memory.charge_part(EXPIRY_PART, ENTRY_BYTES)

    def due(self, now_ms: int) -> dict[Queue, list[MessageRef]]:
        """Pop the entries due by `now_ms`, per queue (deleted queues' and dead refs'
        entries dropped); a ref may have left its queue since: `Queue.take_pending` sorts
        that out."""
        heap = self._heap
        by_queue: dict[Queue, list[MessageRef]] = {}
        before = len(heap)
        while heap and heap[0][0] <= now_ms:
            _due, _seq, queue, weak = heapq.heappop(heap)
            ref = weak()
            if ref is None:
                self._dead -= 1
            elif not queue.deleted:
                by_queue.setdefault(queue, []).append(ref)
        self._compact()
        if self._memory is not None and len(self._heap) != before:
            self._memory.charge_part(EXPIRY_PART, (len(self._heap) - before) * ENTRY_BYTES)
        return by_queue

    def _compact(self) -> None:
        heap = self._heap
        if len(heap) <= COMPACT_FLOOR or 2 * self._dead <= len(heap):
            return
        self._heap = [entry for entry in heap if entry[3]() is not None and not entry[2].deleted]
        heapq.heapify(self._heap)
        self._dead = 0

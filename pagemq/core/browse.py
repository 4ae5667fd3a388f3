"""A browser's walk over a queue: what it shows, read without taking, and off the event loop.

A browser (`browser:true`) sees the queue in order without taking anything: the in-memory
refs (delivering, then pending) as a snapshot taken when it starts, then the page files from
the queue's read position at that moment (pages whose selector summary proves no match are
skipped unread), with refs held back at start-up shown at their place among them.

A page file is up to `page-size-bytes`: read on the loop it stalled every connection, so a
browser reads its pages in the page-I/O worker a chunk ahead (`PagedQueue.read_ahead`), as a
queue's own reading does (the paged part is `core.paging.PagedBrowse`). While the next chunk
is being read (or a batch of the page is still being written) the walk stops with `pending`
set, and `arrived` (given by whoever drives it) is called on the loop when it is in; the
same iterator then goes on. Its chunks are sized like a reader's (`PageCursor.chunk_bytes`:
the reader share of the memory budget / 8, 16-256 KiB), and the ranges of page file it may
hold (one being decoded, two read ahead) are charged to the budget while the walk is open
(`browse_read_ahead_bytes`); `close` releases them (the walk closes itself once done).

Without `arrived` (a management count of a filtered queue) the pages are read at once, on
the caller's thread: nothing is charged, nothing is pending.

Loop-only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pagemq.core.selector.properties import message_view

if TYPE_CHECKING:
    from pagemq.core.consumer import MessageRef
    from pagemq.core.queue import PagedWalk, Queue
    from pagemq.core.selector import Selector

__all__ = ["QueueBrowse"]


class QueueBrowse:
    """The whole queue in order without taking anything: delivering, pending, then paged.

    The in-memory part is a snapshot taken now; the paged part is read from the page files
    from the queue's read position at this moment, so no message is seen twice.
    """

    __slots__ = ("_memory", "_paged")

    def __init__(self, queue: Queue | None, selector: Selector | None,
                 arrived: Callable[[], None] | None = None) -> None:
        self._paged: PagedWalk | None = None
        if queue is None:
            self._memory: Iterator[MessageRef] = iter(())
            return
        cursor = queue.cursor
        in_memory = [ref for c in queue.consumers for ref in c.in_flight.values()] + list(queue)
        if cursor is not None:
            # Refs a selective consumer claimed ahead are shown at their place in the page files.
            in_memory = [ref for ref in in_memory if not cursor.is_ahead(ref)]
            self._paged = cursor.browse(selector, arrived)
        snapshot = sorted(in_memory, key=lambda ref: ref.message.message_id)  # arrival order
        self._memory = (ref for ref in snapshot
                        if selector is None or selector.matches_headers(message_view(ref.message)))

    @property
    def pending(self) -> bool:
        """Stopped until `arrived` (a page chunk is being read), not done."""
        return self._paged is not None and self._paged.pending

    def __iter__(self) -> QueueBrowse:
        return self

    def __next__(self) -> MessageRef:
        for ref in self._memory:
            return ref
        if self._paged is None:
            raise StopIteration
        return next(self._paged)

    def close(self) -> None:
        if self._paged is not None:
            self._paged.close()

"""One memory accountant for the whole broker (seed 003: caches sharing one RAM budget).

Every cache that holds message objects charges it here: addresses for the messages they hold
in memory, page cursors for what they read back from page files (queued, or in flight to a
consumer until acknowledged), pending transactional sends. `global-max-size` and
`global-max-messages` are checked against the sum, so the broker's RSS is bounded by one
figure whatever mix of caches fills it. Producers blocked by a BLOCK policy wait here and
are woken when memory is released.

Reading back from page files shares the budget fairly: a queue whose cursor holds messages
read back is a *reader*, and while readers hold any, each may hold at most an equal share
of the budget (`read_share`), and none reads more while the budget is full; a reader
holding nothing may always read one message, so every consumer makes progress. A cursor
stopped by a full budget waits in `read_waiters` and is woken, oldest first, once usage
falls below `RESUME_READING` of the limit (hysteresis: one acknowledgement does not wake
hundreds of readers to read one message each). The budget readers stop at is
`global-max-size`, in bytes: what RSS is. Messages read back are in `used_messages` (they
are held, and the view shows them) but play no part in `global-max-messages`, as in
Artemis, where they are in no address's size: they do not stop reading (how many are read
back is for `max-read-page-*` and the bytes; stopped by the count, a client-ack consumer
waiting for more messages than it before acknowledging waited for ever), and they do not
count when a send is admitted (a queue draining a deep backlog read back as fast as its
consumers acknowledged, and took each freed place from producers that BLOCK, FAIL or DROP
on other addresses until its pages were empty).

What is held besides messages draws from the same budget as *parts* (`charge_part`):
connections' buffers (what a socket has not taken yet, held input, a partial frame; measured
by the server layer), browsers' page read-ahead, the expiry heap's entries. Readers see
them (`is_full`), so read-back and consumers' windows shrink while they are large.
Producers' admission (`would_exceed`, `messages_full`) counts messages only: a blocked
producer's own held input could otherwise keep the budget full and the producer blocked for
good. One part holds producers back too: records paged but not yet written to their page
files (`page_writes`). Producers faster than the disk would otherwise grow the page
writers' queues without bound (a paged send takes no other memory); past a quarter of the
budget (`writes_behind`) paged sends wait, as under BLOCK, until writes catch up.

Structures bounded by a count and not charged (duplicate-id caches) are registered in
`counted` for the view, with their per-entry cost.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator

from pagemq.core.waiters import Waiters

RESUME_READING = 0.9  # readers stopped by a full budget read again below this share of it
# What is held besides messages, by its name in the budget's parts (GET /api/broker memory).
CONNECTION_BUFFER_PART = "connection_buffer_bytes"  # sockets' write buffers, held input, partial frames
BROWSE_PART = "browse_read_ahead_bytes"  # browsers' page read-ahead chunks
PAGE_READ_PART = "page_read_ahead_bytes"  # reading queues' page chunks (raw records read ahead)
EXPIRY_PART = "expiry_timer_bytes"  # entries of the expiry heap
JOURNAL_PART = "journal_index_bytes"  # the journal's index entries of in-memory persistent messages
PAGE_WRITE_PART = "page_write_bytes"  # paged records queued for, or being written to, page files
PARTS = (CONNECTION_BUFFER_PART, BROWSE_PART, PAGE_READ_PART, EXPIRY_PART, JOURNAL_PART, PAGE_WRITE_PART)
WRITES_BEHIND_SHARE = 0.25  # of global-max-size: past it in page writes, paged sends wait
WRITES_BEHIND_UNLIMITED = 64 << 20  # the same bound without a global-max-size


class MemoryAccountant:
    """Global usage counters plus the waiters that want to hear when usage falls."""

    __slots__ = (
        "_quiet", "_read_waiters", "_resume_bytes", "_waiters", "_writes_limit", "counted",
        "depaged_bytes", "depaged_messages", "max_bytes", "max_messages", "part_bytes", "parts",
        "readers", "staged_bytes", "used_bytes", "used_messages",
    )

    def __init__(self, max_bytes: int = -1, max_messages: int = -1) -> None:
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.used_bytes = 0
        self.used_messages = 0
        self.staged_bytes = 0  # pending transactional sends (also in used_bytes)
        self._quiet = 0  # inside `quiet`: waiters are not retried
        self.depaged_bytes = 0  # read back from page files (also in used_bytes)
        self.depaged_messages = 0  # read back from page files (also in used_messages)
        self.readers = 0  # page cursors holding messages read back
        # Held besides messages, by name (in used_bytes; `part_bytes` is their sum): see PARTS.
        self.parts: dict[str, int] = dict.fromkeys(PARTS, 0)
        self.part_bytes = 0
        # Bounded by a count, not charged: name -> (entries now, estimated bytes per entry).
        self.counted: dict[str, tuple[Callable[[], int], int]] = {}
        self._waiters = Waiters()
        self._read_waiters: deque[Callable[[], bool]] = deque()
        # Below it (an unset limit is no bar), stopped readers read again: see _resumes.
        self._resume_bytes = int(max_bytes * RESUME_READING) if max_bytes >= 0 else None
        self._writes_limit = (int(max_bytes * WRITES_BEHIND_SHARE) if max_bytes >= 0
                              else WRITES_BEHIND_UNLIMITED)

    def would_exceed(self, size: int) -> bool:
        """True if holding one more message of `size` bytes would pass a global limit (the
        messages held count, connections' buffers do not: see the module)."""
        if self.max_bytes >= 0 and self.used_bytes - self.part_bytes + size > self.max_bytes:
            return True
        return self.max_messages >= 0 and self.admitted_messages() + 1 > self.max_messages

    def admitted_messages(self) -> int:
        """What `global-max-messages` counts: the messages held, less those read back."""
        return self.used_messages - self.depaged_messages

    def messages_full(self) -> bool:
        """The messages held are at or over a limit: new ones go through their full policy."""
        return self._at_limit(self.used_bytes - self.part_bytes)

    def reading_full(self) -> bool:
        """At or over `global-max-size`, connections' buffers included: readers read
        nothing more (not the message count: see the module)."""
        return 0 <= self.max_bytes <= self.used_bytes

    def _at_limit(self, used_bytes: int) -> bool:
        if self.max_bytes >= 0 and used_bytes >= self.max_bytes:
            return True
        return self.max_messages >= 0 and self.admitted_messages() >= self.max_messages

    def charge(self, size: int, messages: int = 1) -> None:
        self.used_bytes += size
        self.used_messages += messages

    def release(self, size: int, messages: int = 1) -> None:
        self.used_bytes -= size
        self.used_messages -= messages
        self.wake_waiters()

    def wake_waiters(self) -> None:
        """Retry what waits for room: blocked producers, then stopped readers."""
        if self._quiet:
            return
        if self._waiters:
            self._waiters.wake()
        if self._read_waiters and self._resumes():
            self._wake_readers()

    def _resumes(self) -> bool:
        """Usage is below where stopped readers read again."""
        return self._resume_bytes is None or self.used_bytes < self._resume_bytes

    # -- reading back from page files -------------------------------------------------------

    def read_share(self) -> int:
        """Bytes one reader may hold read back from page files; -1: no global limit."""
        if self.max_bytes < 0:
            return -1
        return self.max_bytes // max(1, self.readers)

    def charge_depaged(self, size: int) -> None:
        self.depaged_bytes += size
        self.depaged_messages += 1
        self.charge(size)

    def release_depaged(self, size: int) -> None:
        self.depaged_bytes -= size
        self.depaged_messages -= 1
        self.release(size)

    def wait_to_read(self, retry: Callable[[], bool]) -> None:
        """A reader stopped by the full budget: `retry` is called once usage has fallen (see
        the module); it returns False when it found the budget full again."""
        self._read_waiters.append(retry)

    def _wake_readers(self) -> None:
        waiters = self._read_waiters
        while waiters and self._resumes():
            retry = waiters.popleft()
            if not retry():
                return

    def charge_part(self, part: str, delta: int) -> None:
        """A part held besides messages (one of PARTS) grew (`delta` > 0) or shrank: no
        message count changes, and only readers are woken (producers' admission does not
        count parts)."""
        self.parts[part] += delta
        self.part_bytes += delta
        self.used_bytes += delta
        if delta < 0 and self._read_waiters and self._resumes():
            self._wake_readers()

    def page_writes(self, delta: int) -> None:
        """Bytes queued for page files grew (on a paged send) or shrank (a batch was written,
        or failed): a shrink wakes the producers `writes_behind` held."""
        self.charge_part(PAGE_WRITE_PART, delta)
        if delta < 0 and self._waiters:
            self.wake_waiters()

    def writes_behind(self) -> bool:
        """Page writes are this far behind: paged sends wait (see the module)."""
        return self.parts[PAGE_WRITE_PART] > self._writes_limit

    def count_part(self, name: str, entries: Callable[[], int], bytes_per_entry: int) -> None:
        """Register a structure bounded by a count (not charged) for the view."""
        self.counted[name] = (entries, bytes_per_entry)

    def stage(self, size: int) -> None:
        """Transactional sends held until commit: their bytes count against global-max-size,
        not against global-max-messages, which counts messages held (queued or delivering).
        Counted there, the sends of open transactions made a waiting COMMIT wait on the
        others' for ever (BLOCK: each only goes in once the count is below the limit)."""
        self.staged_bytes += size
        self.charge(size, 0)

    def unstage(self, size: int) -> None:
        self.staged_bytes -= size
        self.release(size, 0)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Nothing waiting for room is retried inside: a COMMIT gives its sends' charge back
        and takes it again send by send, and if it blocks, all of it again at once; two
        COMMITs waking each other from inside those steps would retry forever. The caller
        calls `wake_waiters` once the room it gave back is really free."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def wait(self, retry: Callable[[], bool]) -> None:
        """Register `retry`; it is called after releases and removed once it returns True."""
        self._waiters.add(retry)

    def cancel(self, retry: Callable[[], bool]) -> None:
        self._waiters.cancel(retry)

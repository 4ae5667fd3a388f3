"""One memory accountant for the whole broker (seed 003: caches sharing one RAM budget).

Every cache that holds message objects charges it here: addresses for the messages they hold
in memory, page cursors for what they read ahead from page files. `global-max-size` and
`global-max-messages` are checked against the sum, so the broker's RSS is bounded by one
figure whatever mix of caches fills it. Producers blocked by a BLOCK policy wait here and
are woken when memory is released.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

from collections.abc import Callable

from pagemq.core.waiters import Waiters


class MemoryAccountant:
    """Global usage counters plus the waiters that want to hear when usage falls."""

    __slots__ = ("_waiters", "max_bytes", "max_messages", "staged_bytes", "used_bytes", "used_messages")

    def __init__(self, max_bytes: int = -1, max_messages: int = -1) -> None:
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.used_bytes = 0
        self.used_messages = 0
        self.staged_bytes = 0  # pending transactional sends (also in used_bytes)
        self._waiters = Waiters()

    def would_exceed(self, size: int) -> bool:
        """True if holding one more message of `size` bytes would pass a global limit."""
        if self.max_bytes >= 0 and self.used_bytes + size > self.max_bytes:
            return True
        return self.max_messages >= 0 and self.used_messages + 1 > self.max_messages

    def is_full(self) -> bool:
        """At or over a limit already: new messages go through their full policy."""
        if self.max_bytes >= 0 and self.used_bytes >= self.max_bytes:
            return True
        return self.max_messages >= 0 and self.used_messages >= self.max_messages

    def charge(self, size: int, messages: int = 1) -> None:
        self.used_bytes += size
        self.used_messages += messages

    def release(self, size: int, messages: int = 1) -> None:
        self.used_bytes -= size
        self.used_messages -= messages
        if self._waiters:
            self._waiters.wake()

    def stage(self, size: int) -> None:
        """A transactional send held until commit: counted like a held message."""
        self.staged_bytes += size
        self.charge(size)

    def unstage(self, size: int, messages: int) -> None:
        self.staged_bytes -= size
        self.release(size, messages)

    def wait(self, retry: Callable[[], bool]) -> None:
        """Register `retry`; it is called after releases and removed once it returns True."""
        self._waiters.add(retry)

    def cancel(self, retry: Callable[[], bool]) -> None:
        self._waiters.cancel(retry)

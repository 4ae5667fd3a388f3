"""Callbacks waiting for room (memory released, the disk no longer full): each is retried
when its owner says room was made, and dropped once it returns True.

Every waiter is retried, not only the first: one may still be held by its own address's
limit while the next can go; the ones still waiting keep their arrival order.

Loop-only.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Waiters"]

Retry = Callable[[], bool]


class Waiters(list[Retry]):
    """The waiting callbacks in arrival order; a list, so `if waiters:` (asked on every
    release of memory) costs no Python call."""

    __slots__ = ()

    def add(self, retry: Retry) -> None:
        self.append(retry)

    def cancel(self, retry: Retry) -> None:
        try:
            self.remove(retry)
        except ValueError:
            pass

    def wake(self) -> None:
        waiting = self[:]
        del self[:]
        still = [retry for retry in waiting if not retry()]
        self[:0] = still  # before any added while waking

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


class Waiters:
    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[Retry] = []

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, retry: Retry) -> None:
        self._waiting.append(retry)

    def cancel(self, retry: Retry) -> None:
        try:
            self._waiting.remove(retry)
        except ValueError:
            pass

    def wake(self) -> None:
        waiting, self._waiting = self._waiting, []
        still = [retry for retry in waiting if not retry()]
        self._waiting = still + self._waiting

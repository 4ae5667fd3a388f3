"""Pipelined appends for the storage benchmarks: how a broker drives a store under load."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable


async def pipelined(count: int, window: int, append: Callable[[int], asyncio.Future[None] | None]) -> None:
    """Issue `count` appends, awaiting the oldest batch future whenever `window` are outstanding."""
    pending: collections.deque[tuple[asyncio.Future[None], int]] = collections.deque()
    outstanding = 0
    for i in range(count):
        future = append(i)
        assert future is not None
        if pending and pending[-1][0] is future:
            pending[-1] = (future, pending[-1][1] + 1)
        else:
            pending.append((future, 1))
        outstanding += 1
        while outstanding >= window:
            oldest, covered = pending.popleft()
            await oldest
            outstanding -= covered
        if i % 256 == 255:
            await asyncio.sleep(0)  # let resolved futures' callbacks run, as a broker would
    await asyncio.gather(*(future for future, _ in pending))

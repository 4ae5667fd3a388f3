"""Small helpers over the durability futures the store hands back (journal writes, page
fsyncs): one future for several, the failure of one, one settling another."""

from __future__ import annotations

import asyncio


def all_of(futures: list[asyncio.Future[None]]) -> asyncio.Future[None] | None:
    """One future for several durable writes (a commit touching the journal and page files)."""
    if not futures:
        return None
    if len(futures) == 1:
        return futures[0]
    return asyncio.ensure_future(_gather(futures))


async def _gather(futures: list[asyncio.Future[None]]) -> None:
    await asyncio.gather(*futures)


def failure(future: asyncio.Future[None] | None) -> BaseException | None:
    """Why `future` failed (a cancellation counts), or None: it succeeded or there was none."""
    if future is None:
        return None
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()


def chain(source: asyncio.Future[None] | None, target: asyncio.Future[None]) -> None:
    """Settle `target` as `source` settles (at once for None: nothing to wait for)."""
    if source is None:
        target.set_result(None)
        return

    def settle(done: asyncio.Future[None]) -> None:
        if target.done():
            return
        error = failure(done)
        if error is None:
            target.set_result(None)
        else:
            target.set_exception(error)

    source.add_done_callback(settle)

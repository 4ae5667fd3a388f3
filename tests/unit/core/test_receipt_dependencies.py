"""A paged message's future (what its RECEIPT waits for) also waits for the journal records
it depends on: the address and queue records written for it. Page file and journal are two
files; a crash between their fsyncs must not leave a receipted message whose queue is
unknown at recovery."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_paging_acks import close, paging_broker, run

from pagemq.core.address import ANYCAST


def test_paged_send_to_a_new_address_waits_for_the_address_and_queue_records(tmp_path: Path) -> None:
    async def body() -> None:
        broker, store, pages = await paging_broker(tmp_path)
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        real_flush = store.flush
        flushes: list[asyncio.Future[None]] = []

        def held_flush() -> asyncio.Future[None]:
            inner = real_flush()
            gate = asyncio.ensure_future(_after(inner, held))
            flushes.append(gate)
            return gate

        store.flush = held_flush  # type: ignore[method-assign]
        future = broker.send("fresh", ANYCAST, {}, b"x", persistent=True)
        assert future is not None
        await asyncio.wait_for(pages[0].flush(), 5)  # the page record is on disk
        await asyncio.sleep(0.05)
        assert flushes, "the journal was never asked to sync the new address and queue"
        assert not future.done(), "receipt would precede the address/queue records' fsync"
        held.set_result(None)
        await asyncio.wait_for(future, 5)

        # Once the records are durable, later paged sends wait for the page file alone.
        later = broker.send("fresh", ANYCAST, {}, b"y", persistent=True)
        assert later is not None
        await asyncio.wait_for(later, 5)
        assert len(flushes) == 1
        store.flush = real_flush  # type: ignore[method-assign]
        await close(broker, store, pages)

    run(body)


async def _after(first: asyncio.Future[None], gate: asyncio.Future[None]) -> None:
    await first
    await gate

"""A RECEIPT for a persistent SEND is sent only once the message is durable on disk.

Fault: fsync held (`FaultyFileIO.hold_fsync`) under a whole in-process broker (the same
`BrokerServer` as `pagemq serve`), driven over a real STOMP socket: while the fsync that
covers the message is held no RECEIPT comes; once it is released the RECEIPT follows. Both
stores are covered: the journal (a message held in memory) and the page store (an address
that pages everything). A non-persistent SEND is receipted without waiting.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from inprocess_stomp import StompSocket, broker_config

from pagemq.server.app import BrokerServer
from pagemq.storage.fileio import FaultyFileIO

HELD = 0.3  # how long the test watches for a RECEIPT that must not come


@pytest.mark.parametrize("paged", [False, True], ids=["journal", "page-store"])
def test_receipt_of_a_persistent_send_waits_for_the_fsync(tmp_path: Path, paged: bool) -> None:
    config = broker_config(tmp_path, paged=paged)
    fio = FaultyFileIO()

    async def body() -> None:
        server = BrokerServer(config, fileio=fio)
        await server.start()
        client = await StompSocket.connect(config)
        try:
            # the queue's records made durable first, so only the message's fsync is held
            await client.send("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r0"},
                              "first")
            assert (await client.frame(5))[:2] == ("RECEIPT", {"receipt-id": "r0"})

            fio.hold_fsync()
            await client.send("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r1"},
                              "held")
            assert await asyncio.to_thread(fio.fsync_waiting.wait, 5), "no fsync was attempted"
            with pytest.raises(asyncio.TimeoutError):
                await client.frame(HELD)  # the fsync is held: no RECEIPT
            fio.release_fsync()
            assert (await client.frame(5))[:2] == ("RECEIPT", {"receipt-id": "r1"})

            fio.hold_fsync()  # a non-persistent SEND does not wait for any fsync
            await client.send("SEND", {"destination": "/queue/q", "receipt": "r2"}, "transient")
            assert (await client.frame(5))[:2] == ("RECEIPT", {"receipt-id": "r2"})
            fio.release_fsync()
        finally:
            fio.release_fsync()
            client.close()
            await server.stop()

    asyncio.run(body())

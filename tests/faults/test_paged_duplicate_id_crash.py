"""A paged SEND with `_AMQ_DUPL_ID` is stored exactly once across a crash and a retry.

Fault: the journal write that follows the message's page write is torn (`tear_write`: the
process dies there), then the power goes (`crash`: only fsynced bytes stay). The page
record is on disk, fsynced; its duplicate-id record is not. The producer got no RECEIPT, so
it sends the message again after the restart, as any client that retries does. Stored once
each way: the page batch counts only with the journal record that commits it, as Artemis'
page transactions. (Before: the page record stood alone, the id was forgotten, and the
retry stored a second copy.)
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from inprocess_stomp import StompSocket, broker_config

from pagemq.server.app import BrokerServer
from pagemq.storage.fileio import FaultyFileIO


def _send_headers(dup_id: str, receipt: str) -> dict[str, str]:
    return {"destination": "/queue/orders", "persistent": "true", "_AMQ_DUPL_ID": dup_id,
            "receipt": receipt}


def test_a_paged_send_torn_before_its_id_is_journaled_is_stored_once_by_its_retry(tmp_path: Path) -> None:
    config = broker_config(tmp_path, paged=True)
    fio = FaultyFileIO()

    async def crash_in_the_window() -> None:
        server = BrokerServer(config, fileio=fio)
        await server.start()
        client = await StompSocket.connect(config)
        try:
            # the address, queue and page file made durable first
            await client.send("SEND", _send_headers("first", "r0"), "first")
            assert (await client.frame())[:2] == ("RECEIPT", {"receipt-id": "r0"})
            (page,) = (tmp_path / "data" / "paging").rglob("*.page")
            before = page.stat().st_size
            fio.tear_write(2, 0)  # the 1st write is the page frame's, the 2nd the journal's
            await client.send("SEND", _send_headers("X", "r1"), "x")
            command, headers, _body = await client.frame()
            assert command == "ERROR" and headers.get("receipt-id") == "r1", (command, headers)
        finally:
            client.close()
            fio.crash()  # the power goes: what was not fsynced is gone
            with contextlib.suppress(Exception):
                await server.stop()
        assert page.stat().st_size > before, "the message's page frame was to survive, fsynced"

    async def restart_and_retry() -> list[str]:
        server = BrokerServer(config)
        await server.start()
        client = await StompSocket.connect(config)
        try:
            await client.send("SEND", _send_headers("X", "r2"), "x")  # no RECEIPT came: send again
            assert (await client.frame())[:2] == ("RECEIPT", {"receipt-id": "r2"})
            await client.send("SUBSCRIBE", {"destination": "/queue/orders", "id": "1", "ack": "auto"})
            bodies = []
            with contextlib.suppress(asyncio.TimeoutError):
                while True:
                    command, _headers, body = await client.frame(timeout=1)
                    if command == "MESSAGE":
                        bodies.append(body)
            return bodies
        finally:
            client.close()
            await server.stop()

    asyncio.run(crash_in_the_window())
    assert asyncio.run(restart_and_retry()) == ["first", "x"]

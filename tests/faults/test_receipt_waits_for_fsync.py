"""A RECEIPT for a persistent SEND is sent only once the message is durable on disk.

Fault: fsync held (`FaultyFileIO.hold_fsync`) under a whole in-process broker (the same
`BrokerServer` as `pagemq serve`), driven over a real STOMP socket: while the fsync that
covers the message is held no RECEIPT comes; once it is released the RECEIPT follows. Both
stores are covered: the journal (a message held in memory) and the page store (an address
that pages everything). A non-persistent SEND is receipted without waiting.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from pagemq.server.app import BrokerServer
from pagemq.server.config import load_config
from pagemq.storage.fileio import FaultyFileIO

HELD = 0.3  # how long the test watches for a RECEIPT that must not come


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _frame(reader: asyncio.StreamReader, timeout: float) -> tuple[str, dict[str, str]]:
    raw = await asyncio.wait_for(reader.readuntil(b"\0"), timeout)
    head = raw.decode().lstrip("\r\n").split("\n\n", 1)[0].split("\n")
    return head[0], dict(line.split(":", 1) for line in head[1:] if ":" in line)


async def _send(writer: asyncio.StreamWriter, command: str, headers: dict[str, str], body: str = "") -> None:
    writer.write((command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n" + body + "\0")
                 .encode())
    await writer.drain()


@pytest.mark.parametrize("paged", [False, True], ids=["journal", "page-store"])
def test_receipt_of_a_persistent_send_waits_for_the_fsync(tmp_path: Path, paged: bool) -> None:
    config_file = tmp_path / "pagemq.toml"
    config_file.write_text('[address-settings."#"]\nmax-size-bytes = 0\npage-size-bytes = "64KiB"\n'
                           if paged else "")
    port = _free_port()
    config = load_config(config_file, data_dir=str(tmp_path / "data"), stomp=f"127.0.0.1:{port}",
                         http=f"127.0.0.1:{_free_port()}")
    fio = FaultyFileIO()

    async def body() -> None:
        server = BrokerServer(config, fileio=fio)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await _send(writer, "CONNECT", {"accept-version": "1.2", "host": "x"})
            assert (await _frame(reader, 5))[0] == "CONNECTED"
            # the queue's records made durable first, so only the message's fsync is held
            await _send(writer, "SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r0"},
                        "first")
            assert (await _frame(reader, 5)) == ("RECEIPT", {"receipt-id": "r0"})

            fio.hold_fsync()
            await _send(writer, "SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r1"},
                        "held")
            assert await asyncio.to_thread(fio.fsync_waiting.wait, 5), "no fsync was attempted"
            with pytest.raises(asyncio.TimeoutError):
                await _frame(reader, HELD)  # the fsync is held: no RECEIPT
            fio.release_fsync()
            assert (await _frame(reader, 5)) == ("RECEIPT", {"receipt-id": "r1"})

            fio.hold_fsync()  # a non-persistent SEND does not wait for any fsync
            await _send(writer, "SEND", {"destination": "/queue/q", "receipt": "r2"}, "transient")
            assert (await _frame(reader, 5)) == ("RECEIPT", {"receipt-id": "r2"})
            fio.release_fsync()
        finally:
            fio.release_fsync()
            writer.close()
            await server.stop()

    asyncio.run(body())

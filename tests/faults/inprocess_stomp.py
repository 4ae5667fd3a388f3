"""A whole broker in this process (the `BrokerServer` of `pagemq serve`, with a `FileIO`
the test scripts faults into) and a bare STOMP client over a real socket to drive it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from pagemq.server.config import Config, load_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def broker_config(tmp_path: Path, *, paged: bool) -> Config:
    """Data under `tmp_path`; `paged`: every address pages everything (64 KiB pages)."""
    config_file = tmp_path / "pagemq.toml"
    config_file.write_text('[address-settings."#"]\nmax-size-bytes = 0\npage-size-bytes = "64KiB"\n'
                           if paged else "")
    return load_config(config_file, data_dir=str(tmp_path / "data"), stomp=f"127.0.0.1:{free_port()}",
                       http=f"127.0.0.1:{free_port()}")


class StompSocket:
    """Frames written and read by hand: what the broker answers is seen exactly."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, config: Config) -> StompSocket:
        stomp = config.acceptors.stomp
        assert stomp is not None
        client = cls(*await asyncio.open_connection("127.0.0.1", stomp.port))
        await client.send("CONNECT", {"accept-version": "1.2", "host": "x"})
        assert (await client.frame())[0] == "CONNECTED"
        return client

    async def send(self, command: str, headers: dict[str, str], body: str = "") -> None:
        self.writer.write((command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n"
                           + body + "\0").encode())
        await self.writer.drain()

    async def frame(self, timeout: float = 10) -> tuple[str, dict[str, str], str]:
        """(command, headers, body) of the next frame; TimeoutError if none comes in time."""
        raw = await asyncio.wait_for(self.reader.readuntil(b"\0"), timeout)
        head, _, body = raw[:-1].decode().lstrip("\r\n").partition("\n\n")
        lines = head.split("\n")
        return lines[0], dict(line.split(":", 1) for line in lines[1:] if ":" in line), body

    def close(self) -> None:
        self.writer.close()

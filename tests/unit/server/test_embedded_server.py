"""`BrokerServer` embedded in an application, on an event loop of a thread of its own, as
examples/orders_pipeline.py runs it. (Before: start() failed there, setting the SIGHUP
handler, which only the main thread may.)"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

from pagemq.server.app import BrokerServer
from pagemq.server.config import load_config


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_broker_server_runs_on_a_thread_of_its_own_and_stops(tmp_path: Path) -> None:
    stomp = _free_port()
    server = BrokerServer(load_config(None, data_dir=str(tmp_path / "data"), stomp=f"127.0.0.1:{stomp}",
                                      http=f"127.0.0.1:{_free_port()}"))
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:
            failures.append(exc)
            return
        finally:
            started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30)
    assert not failures, failures
    with socket.create_connection(("127.0.0.1", stomp), timeout=5) as client:
        client.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
        assert client.recv(1024).startswith(b"CONNECTED")
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)
    loop.close()

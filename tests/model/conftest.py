"""The model-based test drives real broker processes with the end-to-end helpers
(tests/e2e/brokerproc.py), which live next to the e2e tests rather than in a package: their
folder goes on sys.path here, as pytest does for tests/e2e itself.

`start_broker` and `connect` serve the plain scenarios in test_found_examples.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from brokerproc import BrokerProcess, StompClient  # noqa: E402


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """A dedicated broker per call (its own data directory), killed at teardown."""
    started: list[BrokerProcess] = []

    def start(config: Mapping[str, Any] | None = None) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"broker{len(started)}", config)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture
def connect() -> Iterator[Callable[..., StompClient]]:
    """A connected stomp.py client, dropped at teardown."""
    clients: list[StompClient] = []

    def make(proc: BrokerProcess, **kwargs: Any) -> StompClient:
        client = StompClient(proc.stomp_port, **kwargs).connect()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.drop()

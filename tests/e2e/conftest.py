"""Fixtures for the end-to-end tests: real `pagemq serve` processes and real clients.

- `broker`: one broker per test module, shared by its tests (use `queue_name` for unique
  queues). A module customises it with a module-level `BROKER_CONFIG = {...}` dict (written
  as the TOML config file). At teardown it is stopped with SIGTERM and must exit 0 without
  having logged a traceback.
- `start_broker(config=None)`: a dedicated broker for one test (special config, restarts,
  kills); stopped at teardown if still running.
- `stomp_client(broker_or_port, **kwargs)`: a connected `StompClient` (stomp.py), closed at
  teardown.
- `raw_stomp(broker_or_port)`: a `RawStomp` socket, closed at teardown.
- `queue_name`: a name no other test uses.

When a test fails, the tail of the stderr log of every broker it used is added to its report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, RawStomp, StompClient, unique

_BROKERS_USED = pytest.StashKey[list[BrokerProcess]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        for proc in item.stash.get(_BROKERS_USED, []):
            report.sections.append((f"pagemq log ({proc.workdir.name})", proc.log_tail(60)))
    return report


def _used(request: pytest.FixtureRequest, proc: BrokerProcess) -> None:
    request.node.stash.setdefault(_BROKERS_USED, []).append(proc)


@pytest.fixture(autouse=True)
def _note_shared_broker(request: pytest.FixtureRequest) -> None:
    if "broker" in request.fixturenames:
        _used(request, request.getfixturevalue("broker"))


def _port(target: BrokerProcess | int) -> int:
    return target.stomp_port if isinstance(target, BrokerProcess) else target


def _finish(broker: BrokerProcess) -> None:
    if broker.running:
        broker.stop()
    assert not broker.tracebacks(), f"the broker logged a traceback:\n{broker.log_tail(80)}"


@pytest.fixture(scope="module")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    config = getattr(request.module, "BROKER_CONFIG", None)
    proc = BrokerProcess(tmp_path_factory.mktemp("broker"), config)
    proc.start()
    yield proc
    _finish(proc)


@pytest.fixture
def start_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(config: Mapping[str, Any] | None = None, **kwargs: Any) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"broker{len(started)}", config, **kwargs)
        started.append(proc)
        _used(request, proc)
        return proc.start()

    yield start
    for proc in started:
        _finish(proc)


@pytest.fixture
def stomp_client() -> Iterator[Callable[..., StompClient]]:
    clients: list[StompClient] = []

    def connect(target: BrokerProcess | int, **kwargs: Any) -> StompClient:
        client = StompClient(_port(target), **kwargs)
        clients.append(client)
        return client.connect()

    yield connect
    for client in clients:
        client.drop()


@pytest.fixture
def raw_stomp() -> Iterator[Callable[[BrokerProcess | int], RawStomp]]:
    sockets: list[RawStomp] = []

    def open_socket(target: BrokerProcess | int) -> RawStomp:
        raw = RawStomp(_port(target))
        sockets.append(raw)
        return raw

    yield open_socket
    for raw in sockets:
        raw.close()


@pytest.fixture
def queue_name(request: pytest.FixtureRequest) -> str:
    return unique(request.node.name.removeprefix("test_"))

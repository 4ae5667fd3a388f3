"""Fixtures for the Spark tests: one SparkSession for the whole test run, real brokers.

- `spark`: a SparkSession shared by every test of the session (it takes ~5-10 s to start),
  with the pagemq data source registered. `local[2,2]`: two threads, as `local[2]`, and a
  failed task is tried once more (plain `local[N]` never retries), which the sink's
  retry test relies on. Small shuffle partitions, no UI, no progress bars.
- `broker`: one `pagemq serve` per test module (brokerproc, as tests/e2e), configured by
  the module's `BROKER_CONFIG`; stopped at teardown, which asserts it logged no traceback.
- `start_broker(config)`: a dedicated broker for one test.
- `stomp_client(broker)`: a connected stomp.py client, closed at teardown.

The modules here are skipped when PySpark or pyarrow is not installed (`pagemq[spark]`),
or there is no Java to run Spark on.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from brokerproc import BrokerProcess, StompClient

_MISSING = [name for name in ("pyspark", "pyarrow") if importlib.util.find_spec(name) is None]
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    _MISSING.append("java")
if _MISSING:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pagemq.spark import register

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("pagemq-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def _finish(proc: BrokerProcess) -> None:
    if proc.running:
        proc.stop()
    assert not proc.tracebacks(), f"the broker logged a traceback:\n{proc.log_tail(80)}"


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("broker"), getattr(request.module, "BROKER_CONFIG", None))
    proc.start()
    yield proc
    _finish(proc)


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(config: Mapping[str, Any] | None = None) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"broker{len(started)}", config)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        _finish(proc)


@pytest.fixture
def stomp_client() -> Iterator[Callable[..., StompClient]]:
    clients: list[StompClient] = []

    def connect(proc: BrokerProcess, **kwargs: Any) -> StompClient:
        client = StompClient(proc.stomp_port, **kwargs)
        clients.append(client)
        return client.connect()

    yield connect
    for client in clients:
        client.drop()

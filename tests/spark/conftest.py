"""Fixtures for the Spark tests: one SparkSession for the whole test run, real brokers.

- `spark`: a SparkSession shared by every test of the session (it takes ~5-10 s to start),
  with the pagemq data source registered. `local[2,2]`: two threads, as `local[2]`, and a
  failed task is tried once more (plain `local[N]` never retries), which the sink's
  retry test relies on. Small shuffle partitions, no UI, no progress bars.
- `broker` (one per module, configured by its `BROKER_CONFIG`), `start_broker`,
  `stomp_client`, `queue_name`: the end-to-end tests' own fixtures (tests/e2e/conftest.py,
  loaded from there, not copied), with their broker log on failure and traceback check.

The modules here are skipped when PySpark or pyarrow is not installed (`pagemq[spark]`),
or there is no Java to run Spark on.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_E2E = Path(__file__).resolve().parents[1] / "e2e"
sys.path.insert(0, str(_E2E))
_spec = importlib.util.spec_from_file_location("pagemq_e2e_fixtures", _E2E / "conftest.py")
assert _spec is not None and _spec.loader is not None
_e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_e2e)

broker = _e2e.broker
start_broker = _e2e.start_broker
stomp_client = _e2e.stomp_client
queue_name = _e2e.queue_name
_note_shared_broker = _e2e._note_shared_broker
pytest_runtest_makereport = _e2e.pytest_runtest_makereport

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

    from pagemq.spark import JAR, register

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("pagemq-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.jars", JAR if os.path.exists(JAR) else "")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()

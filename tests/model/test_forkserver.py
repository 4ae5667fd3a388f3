"""The fork server the model-based test starts brokers with (forkserver.py): a forked broker
must behave as an exec'd one where the test looks: its own process, `ready` on stderr, exit 0
on SIGTERM, killed by SIGKILL, `pagemq data check` output and exit code."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerproc import PAGEMQ, BrokerProcess, StompClient
from forkserver import ForkServer


@pytest.fixture
def server() -> Iterator[ForkServer]:
    forks = ForkServer(PAGEMQ, recycle=2)
    yield forks
    forks.close()


def test_a_forked_broker_serves_stops_cleanly_on_sigterm_and_dies_on_sigkill(
    server: ForkServer, tmp_path: Path
) -> None:
    broker = BrokerProcess(tmp_path / "b", launcher=server.popen)
    for kill in (False, True, False):  # three starts: the server is replaced after two
        broker.start()
        assert broker.proc is not None and broker.proc.pid not in (os.getpid(), None)
        client = StompClient(broker.stomp_port).connect()
        client.send("/queue/q", "x", receipt=True)
        client.drop()
        assert broker.http_get("/api/queues/q")[1]["messages"] >= 1
        if kill:
            broker.kill()
            assert broker.proc.returncode == -signal.SIGKILL
        else:
            assert broker.stop() == 0
    assert sum("ready" in line for line in broker.log_lines) == 3


def test_the_cli_runs_through_the_fork_server_with_its_output_and_exit_code(
    server: ForkServer, tmp_path: Path
) -> None:
    result = server.run([PAGEMQ, "data", "check", "--data-dir", str(tmp_path)], tmp_path, timeout=30)
    assert result.returncode == 0 and "sound" in result.stdout
    bad = server.run([PAGEMQ, "serve", "--config", str(tmp_path / "missing.toml")], tmp_path, timeout=30)
    assert bad.returncode == 2 and "configuration error" in bad.stderr

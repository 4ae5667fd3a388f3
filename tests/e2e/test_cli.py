"""The `pagemq` command line: config errors (exit 2, one line naming the key), clean
shutdown on SIGTERM/SIGINT, `pagemq data print`."""

from __future__ import annotations

import asyncio
import signal
import socket
import struct

import pytest
from brokerproc import HOST, free_port, run_cli, to_toml

from pagemq.storage.message_store import JournalMessageStore, RecordType


def _serve_with_config(tmp_path, config_text: str, *extra: str):
    config = tmp_path / "pagemq.toml"
    config.write_text(config_text)
    return run_cli(
        "serve", "--config", str(config), "--data-dir", str(tmp_path / "data"),
        "--stomp", f"{HOST}:{free_port()}", "--http", f"{HOST}:{free_port()}", *extra,
        cwd=tmp_path, timeout=20,
    )


def _one_line_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"broker": {"global-max-sise": "1MiB"}}, "global-max-sise"),
        ({"stomp": {"max-frame-sise": "1MiB"}}, "max-frame-sise"),
        ({"address-settings": {"orders.#": {"max-sise-bytes": 10}}}, "max-sise-bytes"),
        ({"bogus-section": {"a": 1}}, "bogus-section"),
    ],
    ids=["broker", "stomp", "address-settings", "section"],
)
def test_unknown_config_key_exits_2_with_one_line_naming_the_key(tmp_path, config, key):
    result = _serve_with_config(tmp_path, to_toml(config))
    assert result.returncode == 2, result.stderr
    assert key in _one_line_error(result)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"broker": {"global-max-size": "12 parsecs"}}, "global-max-size"),
        ({"stomp": {"max-frame-size": "lots"}}, "max-frame-size"),
        ({"address-settings": {"#": {"page-size-bytes": "1.5GiB"}}}, "page-size-bytes"),
    ],
    ids=["global-max-size", "max-frame-size", "page-size-bytes"],
)
def test_bad_size_exits_2_with_one_line_naming_the_key(tmp_path, config, key):
    result = _serve_with_config(tmp_path, to_toml(config))
    assert result.returncode == 2, result.stderr
    assert key in _one_line_error(result)


def test_bad_duration_exits_2_naming_the_key(tmp_path):
    result = _serve_with_config(tmp_path, to_toml({"broker": {"disk-scan-period": "soon"}}))
    assert result.returncode == 2, result.stderr
    assert "disk-scan-period" in _one_line_error(result)


@pytest.mark.parametrize(
    ("key", "value"),
    [("cleanup-period", 0), ("disk-scan-period", "100us")],
)
def test_a_period_under_1ms_exits_2_naming_the_key(tmp_path, key, value):
    result = _serve_with_config(tmp_path, to_toml({"broker": {key: value}}))
    assert result.returncode == 2, result.stderr
    line = _one_line_error(result)
    assert key in line and "at least 1ms" in line


def test_bad_policy_exits_2_naming_the_key(tmp_path):
    config = {"address-settings": {"#": {"address-full-policy": "SHRUG"}}}
    result = _serve_with_config(tmp_path, to_toml(config))
    assert result.returncode == 2, result.stderr
    assert "address-full-policy" in _one_line_error(result)


def test_invalid_toml_exits_2(tmp_path):
    result = _serve_with_config(tmp_path, "[broker\nglobal-max-size = \n")
    assert result.returncode == 2, result.stderr
    _one_line_error(result)


def test_bad_stomp_flag_exits_2_naming_it(tmp_path):
    result = run_cli("serve", "--data-dir", str(tmp_path / "data"), "--stomp", "no-port-here",
                     "--http", f"{HOST}:{free_port()}", cwd=tmp_path, timeout=20)
    assert result.returncode == 2, result.stderr
    assert "stomp" in _one_line_error(result)


@pytest.mark.parametrize("stomp_host", [HOST, "localhost"])
def test_two_listeners_on_one_port_exit_2_naming_both(tmp_path, stomp_host):
    """(Before: the config passed and the start failed binding, 'address already in use', exit 1.)"""
    port = free_port()
    result = run_cli("serve", "--data-dir", str(tmp_path / "data"), "--stomp", f"{stomp_host}:{port}",
                     "--http", f"{HOST}:{port}", cwd=tmp_path, timeout=20)
    assert result.returncode == 2, result.stderr
    assert f"--http: {HOST}:{port} is --stomp's too" in _one_line_error(result)
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_a_data_directory_that_is_a_file_exits_2_naming_the_flag(tmp_path):
    (tmp_path / "data").write_text("not a directory")
    result = run_cli("serve", "--data-dir", str(tmp_path / "data"), "--stomp", f"{HOST}:{free_port()}",
                     "--http", f"{HOST}:{free_port()}", cwd=tmp_path, timeout=20)
    assert result.returncode == 2, result.stderr
    assert "--data-dir: " in _one_line_error(result) and "is a file, not a directory" in result.stderr


def test_unknown_flag_exits_2_with_one_line_naming_it(tmp_path):
    result = run_cli("serve", "--data-dir", str(tmp_path / "data"), "--stomp-port", "61613",
                     cwd=tmp_path, timeout=20)
    assert result.returncode == 2, result.stderr
    assert "--stomp-port" in _one_line_error(result)


def test_missing_config_file_exits_2(tmp_path):
    result = run_cli("serve", "--config", str(tmp_path / "nope.toml"), "--data-dir", str(tmp_path / "data"),
                     "--stomp", f"{HOST}:{free_port()}", "--http", f"{HOST}:{free_port()}",
                     cwd=tmp_path, timeout=20)
    assert result.returncode == 2, result.stderr
    assert "nope.toml" in _one_line_error(result)


def test_listeners_accept_as_soon_as_ready_is_logged(start_broker):
    proc = start_broker()
    for port in (proc.stomp_port, proc.http_port):
        socket.create_connection((HOST, port), timeout=2).close()
    assert sum("ready" in line for line in proc.log_lines) == 1


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_with_exit_0_and_no_traceback(start_broker, stomp_client, queue_name, signum):
    proc = start_broker()
    busy = stomp_client(proc)
    busy.subscribe(f"/queue/{queue_name}", ack="client-individual")
    busy.send(f"/queue/{queue_name}", "in flight", headers={"persistent": "true"}, receipt=True)
    busy.wait_for(1)
    proc.proc.send_signal(signum)
    proc.proc.wait(15)
    assert proc.stop() == 0, proc.log_tail()
    assert not proc.tracebacks(), proc.log_tail()


def test_data_print_shows_journal_files_without_a_running_broker(start_broker, stomp_client, queue_name):
    proc = start_broker()
    producer = stomp_client(proc)
    for n in range(5):
        producer.send(f"/queue/{queue_name}", f"p{n}", headers={"persistent": "true"}, receipt=True)
    producer.drop()
    proc.kill()

    result = run_cli("data", "print", "--data-dir", str(proc.data_dir))
    assert result.returncode == 0, result.stderr
    assert "journal" in result.stdout.lower()
    journal_files = [p.name for p in (proc.data_dir / "journal").iterdir() if p.is_file()]
    assert journal_files, "no journal file on disk after persistent sends"
    assert any(name in result.stdout for name in journal_files), result.stdout

    narrowed = run_cli("data", "print", "--data-dir", str(proc.data_dir), "--address", queue_name)
    assert narrowed.returncode == 0, narrowed.stderr


def test_a_record_it_cannot_read_stops_start_up_with_a_line_naming_it(tmp_path):
    async def write_bad_record() -> None:
        store = JournalMessageStore(tmp_path / "data" / "journal", file_size=1 << 20)
        store.load()
        store.start(asyncio.get_running_loop())
        # CRC-valid, but a cursor-acks record that says 5 ordinals and carries 2.
        store.journal.add(77, RecordType.CURSOR_ACKS, struct.pack("<QQI", 1, 1, 5) + b"\0" * 8)
        await store.close()

    asyncio.run(write_bad_record())
    result = _serve_with_config(tmp_path, "")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot start: unreadable record" in last and "cursor-ack record 77" in last, result.stderr

"""What the broker logs for its operators: a line per connection opened and closed (peer,
user), page mode entered and left per address, `--log-format json`, `--log-config FILE`."""

from __future__ import annotations

import json
import re

import pytest
from brokerproc import HOST, free_port, run_cli, wait_until

PAGING = {"address-settings": {"zero.#": {"max-size-bytes": 0}}}


def _local_port(client) -> int:
    return client.conn.transport.socket.getsockname()[1]


def _lines(proc, pattern: str) -> list[str]:
    return [line for line in proc.current_log if re.search(pattern, line)]


def _wait_lines(proc, pattern: str) -> list[str]:
    return wait_until(lambda: _lines(proc, pattern), what=f"a log line matching {pattern!r}")


def test_a_connection_logs_one_line_when_opened_and_one_when_closed_naming_peer_and_user(
        start_broker, stomp_client):
    proc = start_broker()
    client = stomp_client(proc, connect_headers={"login": "alice", "passcode": "secret"})
    peer = f"{HOST}:{_local_port(client)}"
    opened = _wait_lines(proc, rf"connection opened: peer={re.escape(peer)} ")
    assert len(opened) == 1 and "user=alice" in opened[0], opened
    assert "secret" not in "\n".join(proc.current_log)  # the passcode is never logged
    client.disconnect()
    closed = _wait_lines(proc, rf"connection closed: peer={re.escape(peer)} ")
    assert len(closed) == 1 and "user=alice" in closed[0], closed


def test_a_client_without_login_is_logged_as_dash_and_a_socket_without_connect_says_so(
        start_broker, stomp_client, raw_stomp):
    proc = start_broker()
    client = stomp_client(proc)
    peer = f"{HOST}:{_local_port(client)}"
    opened = _wait_lines(proc, rf"connection opened: peer={re.escape(peer)} ")
    assert "user=-" in opened[0], opened
    raw = raw_stomp(proc)
    raw.close()
    _wait_lines(proc, r"connection closed before CONNECT: peer=")


def test_page_mode_entered_and_left_is_logged_per_address(start_broker, stomp_client):
    proc = start_broker(PAGING)
    address = "zero.logged"
    producer = stomp_client(proc)
    for n in range(3):
        producer.send(f"/queue/{address}", f"m{n}", receipt=True)
    _wait_lines(proc, rf"INFO .*address '{re.escape(address)}' entered page mode")
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{address}", ack="auto")
    consumer.listener.wait_for(3)
    _wait_lines(proc, rf"INFO .*address '{re.escape(address)}' left page mode")


def test_json_log_format_writes_one_object_per_line_with_the_connection_fields(start_broker, stomp_client):
    proc = start_broker(extra_args=["--log-format", "json"])
    client = stomp_client(proc, connect_headers={"login": "bob"})
    peer = f"{HOST}:{_local_port(client)}"
    client.disconnect()

    def closed_entry():
        entries = [json.loads(line) for line in proc.current_log if line.strip()]
        return [e for e in entries if e["message"].startswith("connection closed") and e.get("peer") == peer]

    (entry,) = wait_until(closed_entry, what="the JSON close line")
    assert entry["user"] == "bob" and entry["logger"] == "pagemq.connections" and entry["level"] == "INFO"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"]), entry["time"]
    for line in proc.current_log:  # every line, the ready line included, is one JSON object
        assert set(json.loads(line)) >= {"time", "level", "logger", "message"}, line


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_log_config_file_is_a_dictconfig_in_json_or_toml(start_broker, stomp_client, tmp_path, suffix):
    config = {
        "version": 1,
        "formatters": {"custom": {"format": "CUSTOM %(levelname)s %(name)s | %(message)s"}},
        "handlers": {"err": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                             "formatter": "custom"}},
        "root": {"level": "INFO", "handlers": ["err"]},
    }
    path = tmp_path / f"logging{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(config))
    else:
        path.write_text(
            'version = 1\n[formatters.custom]\nformat = "CUSTOM %(levelname)s %(name)s | %(message)s"\n'
            '[handlers.err]\nclass = "logging.StreamHandler"\nstream = "ext://sys.stderr"\n'
            'formatter = "custom"\n'
            '[root]\nlevel = "INFO"\nhandlers = ["err"]\n')
    proc = start_broker(extra_args=["--log-config", str(path)])
    stomp_client(proc).disconnect()
    _wait_lines(proc, r"^CUSTOM INFO pagemq.connections \| connection closed")
    assert all(line.startswith("CUSTOM ") for line in proc.current_log if line.strip()), proc.log_tail()


@pytest.mark.parametrize(("text", "problem"), [
    ("{not json", "invalid JSON"),
    ('{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}, "root": {"handlers": ["h"]}}',
     "not a usable dictConfig"),
])
def test_a_bad_log_config_is_one_line_naming_the_file_exit_2(tmp_path, text, problem):
    path = tmp_path / "logging.json"
    path.write_text(text)
    result = run_cli("serve", "--log-config", str(path), "--data-dir", str(tmp_path / "data"),
                     "--stomp", f"{HOST}:{free_port()}", "--http", f"{HOST}:{free_port()}", timeout=20)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and problem in lines[0], result.stderr

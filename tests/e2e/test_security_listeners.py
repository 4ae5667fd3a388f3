"""Listeners: safe by default (no non-loopback listener without security), max-connections,
connect-timeout, and TLS for STOMP and HTTP with a CA made by the test (docs/security.md)."""

from __future__ import annotations

import http.client
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from brokerproc import HOST, PAGEMQ, BrokerProcess, RawStomp, StompClient, free_port, to_toml, wait_until
from security_helpers import login, make_ca, start_secured

# -- safe by default ---------------------------------------------------------------------------


def _serve(tmp_path: Path, *args: str,
           config: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    command = [PAGEMQ, "serve", "--data-dir", str(tmp_path / "data"), *args]
    if config is not None:
        (tmp_path / "pagemq.toml").write_text(to_toml(config))
        command += ["--config", str(tmp_path / "pagemq.toml")]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=30)


def test_non_loopback_listener_with_security_off_is_refused_at_start(tmp_path: Path) -> None:
    result = _serve(tmp_path, "--stomp", f"0.0.0.0:{free_port()}", "--http", f"{HOST}:{free_port()}")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pagemq: configuration error: --stomp: 0.0.0.0 is not a loopback address")
    assert "security-enabled = true" in lines[0] and "allow-anonymous-remote = true" in lines[0]
    assert not (tmp_path / "data").exists(), "nothing is touched before the refusal"

    result = _serve(tmp_path, "--stomp", f"{HOST}:{free_port()}", config={
        "acceptors": {"http": f"0.0.0.0:{free_port()}"},
    })
    assert result.returncode == 2 and "acceptors.http: 0.0.0.0 is not a loopback address" in result.stderr


def test_non_loopback_listener_runs_when_explicitly_allowed_or_secured(
    tmp_path: Path, start_broker: Any
) -> None:
    port = free_port()
    allowed = start_broker({"broker": {"allow-anonymous-remote": True}},
                           extra_args=["--stomp", f"0.0.0.0:{port}"])
    StompClient(port).connect().disconnect()
    allowed.stop()
    secured = start_secured(tmp_path / "secured", extra_args=["--stomp", f"0.0.0.0:{port}"])
    try:
        StompClient(port, connect_headers=login("alice")).connect().disconnect()
    finally:
        secured.stop()


# -- connection limits -------------------------------------------------------------------------


def test_max_connections_plus_one_is_refused_while_the_others_keep_working(
    start_broker: Any, queue_name: str
) -> None:
    proc = start_broker({"acceptors": {"max-connections": 3}})
    clients = [StompClient(proc.stomp_port).connect() for _ in range(3)]
    for _ in range(4):
        with RawStomp(proc.stomp_port) as extra:
            frame = extra.read_frame(timeout=5)
            assert frame is not None and frame.command == "ERROR", frame
            assert "max-connections" in frame.headers["message"]
            assert extra.read_frame(timeout=5) is None  # closed
    consumer, producer = clients[0], clients[1]
    consumer.subscribe(f"/queue/{queue_name}")
    producer.send(f"/queue/{queue_name}", "still served", receipt=True)
    assert consumer.wait_for(1)[0].body == "still served"
    wait_until(lambda: any("max-connections 3 reached" in line for line in proc.log_lines), what="the log")
    assert sum("max-connections 3 reached" in line for line in proc.log_lines) == 1, "logged per burst"
    clients[2].disconnect()
    wait_until(lambda: _connects(proc.stomp_port), what="a free slot to be usable again")
    wait_until(lambda: any("after refusing 4" in line for line in proc.log_lines), what="the burst summary")
    for client in clients[:2]:
        client.disconnect()


def test_http_max_connections_plus_one_gets_503(start_broker: Any) -> None:
    proc = start_broker({"acceptors": {"max-connections": 2}})
    held = [http.client.HTTPConnection(HOST, proc.http_port, timeout=5) for _ in range(2)]
    try:
        for connection in held:  # two keep-alive connections
            connection.request("GET", "/api/broker")
            response = connection.getresponse()
            assert response.status == 200 and response.read()
        extra = http.client.HTTPConnection(HOST, proc.http_port, timeout=5)
        extra.request("GET", "/api/broker")
        refused = extra.getresponse()
        assert refused.status == 503 and b"max-connections" in refused.read()
        extra.close()
        held[0].request("GET", "/metrics")  # the held ones keep working
        assert held[0].getresponse().status == 200
    finally:
        for connection in held:
            connection.close()
    wait_until(lambda: proc.http_get("/api/broker")[0] == 200, what="a free HTTP slot")


def _connects(port: int) -> bool:
    raw = RawStomp(port)
    with raw:
        raw.send_frame("CONNECT", {"accept-version": "1.2", "host": HOST})
        frame = raw.read_frame(timeout=5)
        return frame is not None and frame.command == "CONNECTED"


def test_a_socket_that_sends_no_connect_is_closed_after_connect_timeout(start_broker: Any) -> None:
    proc = start_broker({"acceptors": {"connect-timeout": "400ms"}})
    idle = RawStomp(proc.stomp_port)
    talker = RawStomp(proc.stomp_port)
    with idle, talker:
        talker.connect()
        started = time.monotonic()
        assert idle.read_frame(timeout=5) is None, "an idle socket is closed"
        waited = time.monotonic() - started
        assert 0.3 <= waited < 3, waited
        time.sleep(0.5)
        talker.send_frame("DISCONNECT", {"receipt": "bye"})
        frame = talker.read_frame(timeout=5)
        assert frame is not None and frame.headers.get("receipt-id") == "bye", "a CONNECTed socket stays"


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_ca(tmp_path_factory.mktemp("ca"))


def _tls_config(ca: dict[str, Path], workdir: Path, stomp_tls: int, http_tls: int | None = None,
                **tls: Any) -> dict[str, Any]:
    """Copies of the server files in `workdir` (the reload test replaces them)."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(ca["server.pem"], workdir / "server.pem")
    shutil.copy(ca["server.key"], workdir / "server.key")
    acceptors: dict[str, Any] = {"stomp-tls": f"{HOST}:{stomp_tls}"}
    if http_tls is not None:
        acceptors["http-tls"] = f"{HOST}:{http_tls}"
    return {"acceptors": acceptors,
            "tls": {"cert-file": "server.pem", "key-file": "server.key", "ca-file": str(ca["ca.pem"]), **tls}}


def _client_context(ca: dict[str, Path], with_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca["ca.pem"]))
    if with_cert:
        context.load_cert_chain(ca["client.pem"], ca["client.key"])
    return context


class TlsStomp(RawStomp):
    def __init__(self, port: int, context: ssl.SSLContext, timeout: float = 5.0) -> None:
        super().__init__(port, timeout)
        self.sock = context.wrap_socket(self.sock, server_hostname="localhost")

    def peer_cn(self) -> str:
        cert = self.sock.getpeercert()  # type: ignore[attr-defined]
        return dict(item[0] for item in cert["subject"])["commonName"]


def _start_tls(start_broker: Any, tmp_path: Path, ca: dict[str, Path],
               **tls: Any) -> tuple[BrokerProcess, int]:
    port = free_port()
    workdir = tmp_path / "broker0"
    return start_broker(_tls_config(ca, workdir, port, **tls)), port


def test_tls_round_trip_with_stomp_py(start_broker: Any, tmp_path: Path, ca: dict[str, Path],
                                      queue_name: str) -> None:
    proc, port = _start_tls(start_broker, tmp_path, ca)
    client = StompClient(port)
    client.conn.set_ssl(for_hosts=[(HOST, port)], ca_certs=str(ca["ca.pem"]))
    client.connect()
    client.subscribe(f"/queue/{queue_name}")
    client.send(f"/queue/{queue_name}", "over TLS", headers={"persistent": "true"}, receipt=True)
    assert client.wait_for(1)[0].body == "over TLS"
    client.disconnect()
    assert any(f"stomp-tls={HOST}:{port}" in line for line in proc.log_lines if "ready" in line)


def test_plaintext_client_on_the_tls_port_is_dropped_and_the_broker_goes_on(
    start_broker: Any, tmp_path: Path, ca: dict[str, Path]
) -> None:
    proc, port = _start_tls(start_broker, tmp_path, ca)
    for _ in range(3):
        with RawStomp(port) as plain:
            plain.send_frame("CONNECT", {"accept-version": "1.2", "host": HOST})
            assert plain.read_frame(timeout=5) is None or plain.closed
    with TlsStomp(port, _client_context(ca)) as tls:
        assert tls.connect().command == "CONNECTED"
    assert _connects(proc.stomp_port)  # the plaintext listener too
    assert not proc.tracebacks()


def test_client_certificate_required_and_refused_when_missing(
    start_broker: Any, tmp_path: Path, ca: dict[str, Path]
) -> None:
    _proc, port = _start_tls(start_broker, tmp_path, ca, **{"require-client-cert": True})
    with TlsStomp(port, _client_context(ca, with_cert=True)) as good:
        assert good.connect().command == "CONNECTED"
    refused = False
    try:
        with TlsStomp(port, _client_context(ca)) as anonymous:  # TLS 1.3: the alert comes on read
            anonymous.send_frame("CONNECT", {"accept-version": "1.2", "host": HOST})
            refused = anonymous.read_frame(timeout=5) is None
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        refused = True
    assert refused, "a client without a certificate got in"


def _sighup(proc: BrokerProcess, logged: str) -> None:
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: any(logged in line for line in proc.log_lines), what=repr(logged))


def test_renewed_certificate_is_used_after_sighup_without_restart(
    start_broker: Any, tmp_path: Path, ca: dict[str, Path]
) -> None:
    proc, port = _start_tls(start_broker, tmp_path, ca)
    old = TlsStomp(port, _client_context(ca))
    with old:
        old.connect()
        assert old.peer_cn() == "pagemq-server"
        shutil.copy(ca["server2.pem"], proc.workdir / "server.pem")
        shutil.copy(ca["server2.key"], proc.workdir / "server.key")
        _sighup(proc, "TLS certificates reloaded")
        with TlsStomp(port, _client_context(ca)) as new:
            new.connect()
            assert new.peer_cn() == "pagemq-server-renewed"
        old.send_frame("DISCONNECT", {"receipt": "bye"})  # the old connection kept working
        frame = old.read_frame(timeout=5)
        assert frame is not None and frame.headers.get("receipt-id") == "bye"
    (proc.workdir / "server.key").write_text("broken")
    _sighup(proc, "TLS certificates not reloaded")  # broken files: the old ones stay
    with TlsStomp(port, _client_context(ca)) as after:
        after.connect()
        assert after.peer_cn() == "pagemq-server-renewed"


def test_http_over_tls(start_broker: Any, tmp_path: Path, ca: dict[str, Path]) -> None:
    stomp_tls, http_tls = free_port(), free_port()
    start_broker(_tls_config(ca, tmp_path / "broker0", stomp_tls, http_tls))
    with urllib.request.urlopen(f"https://localhost:{http_tls}/api/broker", timeout=10,
                                context=_client_context(ca)) as response:
        assert response.status == 200
    with socket.create_connection((HOST, http_tls), timeout=5) as plain:
        plain.sendall(b"GET /api/broker HTTP/1.1\r\nHost: x\r\n\r\n")
        assert not plain.recv(100).startswith(b"HTTP/1.1 200")


def test_sighup_without_tls_reloads_nothing_and_the_broker_goes_on(start_broker: Any) -> None:
    proc = start_broker()
    _sighup(proc, "SIGHUP: reloading")
    assert proc.running and _connects(proc.stomp_port)


def _wait_closed(sock: socket.socket, limit: float) -> None:
    """Until the broker closes `sock` (read EOF or reset); fails past `limit`."""
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        pytest.fail(f"still open after {limit}s")


def test_http_connections_that_send_no_whole_request_are_closed_after_connect_timeout(
        start_broker: Any, tmp_path: Path, ca: dict[str, Path]) -> None:
    """Idle sockets, half a request head (slowloris) and a TLS handshake never begun would
    each hold a slot of max-connections for ever: closed after connect-timeout, while a
    connection that sent its request is served (and kept alive) as before."""
    stomp_tls, http_tls = free_port(), free_port()
    config = _tls_config(ca, tmp_path / "broker0", stomp_tls, http_tls)
    config["acceptors"]["connect-timeout"] = "500ms"
    proc = start_broker(config)
    opened = time.monotonic()
    idle = socket.create_connection((HOST, proc.http_port))
    partial = socket.create_connection((HOST, proc.http_port))
    partial.sendall(b"GET /api/broker HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    no_handshake = socket.create_connection((HOST, http_tls))
    served = socket.create_connection((HOST, proc.http_port))
    served.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    with idle, partial, no_handshake, served:
        _wait_closed(idle, 10)
        assert time.monotonic() - opened >= 0.3
        for sock in (partial, no_handshake):
            _wait_closed(sock, 10)
        assert time.monotonic() - opened < 8  # (a loaded machine: the timeout is 0.5 s)
        served.settimeout(5)
        assert served.recv(4096).startswith(b"HTTP/1.1 200")
        served.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")  # kept alive past the timeout
        assert served.recv(4096).startswith(b"HTTP/1.1 200")
    # stderr is read by a thread: wait for the line rather than look once
    wait_until(lambda: any("no request within 0.5s from 127.0.0.1:" in line for line in proc.log_lines),
               timeout=5, what="the log line of the closed connection")

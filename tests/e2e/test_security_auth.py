"""Authentication over real sockets: STOMP CONNECT login/passcode and HTTP Basic, against a
users file the broker follows while it runs (docs/security.md)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import HOST, BrokerProcess, RawStomp, StompClient, wait_until
from security_helpers import USERS, login, password, start_secured, write_users_file

from pagemq.security.hashing import hash_password
from pagemq.security.users import User, load_users, write_users


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_secured(tmp_path_factory.mktemp("secured"))
    yield proc
    proc.stop()
    assert not proc.tracebacks(), proc.log_tail(80)


def _connect_raw(port: int, headers: dict[str, str]) -> tuple[RawStomp, Any]:
    raw = RawStomp(port)
    raw.send_frame("CONNECT", {"accept-version": "1.2", "host": HOST, **headers})
    return raw, raw.read_frame(timeout=10)


def _refused(port: int, headers: dict[str, str]) -> tuple[str, bytes]:
    raw, frame = _connect_raw(port, headers)
    with raw:
        assert frame is not None and frame.command == "ERROR", frame
        assert raw.read_frame(timeout=5) is None, "the connection stays open after the ERROR"
        return frame.headers["message"], frame.body


def test_wrong_password_and_unknown_user_get_the_same_error(secured: BrokerProcess) -> None:
    wrong = _refused(secured.stomp_port, {"login": "alice", "passcode": "not-it"})
    unknown = _refused(secured.stomp_port, {"login": "mallory", "passcode": "whatever"})
    missing = _refused(secured.stomp_port, {})
    assert wrong == unknown == missing
    assert wrong[0] == "Authentication failed"
    _logged(secured, "authentication failed from 127.0.0.1:")  # with the peer address
    _logged(secured, "(login 'mallory'; failure")
    assert not any("not-it" in line or "whatever" in line for line in secured.log_lines), \
        "a password reached the log"


def test_right_password_connects_and_works(secured: BrokerProcess, queue_name: str) -> None:
    client = StompClient(secured.stomp_port, connect_headers=login("alice")).connect()
    try:
        client.subscribe(f"/queue/{queue_name}")
        client.send(f"/queue/{queue_name}", "hello", receipt=True)
        assert client.wait_for(1)[0].body == "hello"
    finally:
        client.disconnect()


def test_frames_sent_right_behind_connect_wait_for_the_password_check(
    secured: BrokerProcess, queue_name: str
) -> None:
    """SEND and SUBSCRIBE pipelined after CONNECT (one write) are carried out once the
    password is verified, in order; nothing runs before."""
    raw = RawStomp(secured.stomp_port)
    with raw:
        from brokerproc import encode_frame

        user = {"login": "builder", "passcode": password("builder")}
        raw.send(
            encode_frame("CONNECT", {"accept-version": "1.2", "host": HOST, **user})
            + encode_frame("SEND", {"destination": f"/queue/{queue_name}", "receipt": "s1"}, "one")
            + encode_frame("DISCONNECT", {"receipt": "bye"})
        )
        frames = raw.read_until(lambda f: f.headers.get("receipt-id") == "bye", timeout=10)
        assert [f.command for f in frames] == ["CONNECTED", "RECEIPT", "RECEIPT"], frames
    status, _, body = _http(secured, f"/api/queues/{queue_name}", "alice")
    assert status == 200 and json.loads(body)["messages"] == 1, body


def test_repeated_failures_from_one_address_are_answered_ever_later(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    proc = start_secured(tmp_path / "slow")
    request.addfinalizer(proc.stop)
    times = []
    for _ in range(8):
        started = time.monotonic()
        _refused(proc.stomp_port, {"login": "alice", "passcode": "guess"})
        times.append(time.monotonic() - started)
    # five answered at once (a mistyped password), then 50, 100, 200 ms of delay after the hash
    assert times[7] >= 0.2 and times[6] >= 0.1, times
    _logged(proc, "failure 5 from this address; answered after 0.00s")
    _logged(proc, "failure 8 from this address; answered after 0.20s")
    # the ninth waits 0.4 s: longer than a heart-beat timeout, which does not run before CONNECTED
    message, _ = _refused(proc.stomp_port, {"login": "alice", "passcode": "guess", "heart-beat": "100,100"})
    assert message == "Authentication failed"
    # a success clears the count: the next failures are answered at once again
    StompClient(proc.stomp_port, connect_headers=login("alice")).connect().disconnect()
    _refused(proc.stomp_port, {"login": "alice", "passcode": "guess"})
    _logged(proc, "failure 1 from this address; answered after 0.00s")


def _logged(proc: BrokerProcess, text: str) -> None:
    """The broker's log gets `text` (read from its stderr by a thread: wait, bounded)."""
    wait_until(lambda: any(text in line for line in proc.log_lines), what=repr(text))


def test_a_failed_login_is_never_logged_as_that_user_connecting(secured: BrokerProcess) -> None:
    raw, frame = _connect_raw(secured.stomp_port, {"login": "producer", "passcode": "not-it"})
    with raw:
        peer = f"127.0.0.1:{raw.sock.getsockname()[1]}"
        assert frame is not None and frame.command == "ERROR"
        assert raw.read_frame(timeout=5) is None
    _logged(secured, f"connection closed before CONNECT: peer={peer} user=- ")
    assert not any(f"peer={peer} user=producer" in line for line in secured.log_lines)
    raw, frame = _connect_raw(secured.stomp_port, login("producer"))
    with raw:
        assert frame is not None and frame.command == "CONNECTED"
        _logged(secured, f"connection opened: peer=127.0.0.1:{raw.sock.getsockname()[1]} user=producer ")


def test_guesses_sent_at_once_on_many_connections_are_checked_one_after_another(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    proc = start_secured(tmp_path / "guesses")  # its own: failures count per address
    request.addfinalizer(proc.stop)
    guessers = []
    for n in range(20):
        raw = RawStomp(proc.stomp_port)
        raw.send_frame("CONNECT", {"accept-version": "1.2", "host": HOST, "login": "alice",
                                   "passcode": f"guess-{n}"})
        guessers.append(raw)
    time.sleep(2.0)
    # One check at a time, each after the previous failure's delay (five none, then 50, 100,
    # ... 1600 ms): at most 11 can have been checked in 2 s; in parallel all 20 would have been.
    failures = [line for line in proc.current_log if "authentication failed from" in line]
    assert 1 <= len(failures) <= 12, failures
    for raw in guessers:
        raw.close()  # gone: they give up their turns
    started = time.monotonic()
    client = StompClient(proc.stomp_port, connect_headers=login("alice")).connect()
    assert time.monotonic() - started < 8  # at most the last failure's delay (<= 5 s)
    client.disconnect()


def test_user_added_to_the_users_file_works_without_restart(secured: BrokerProcess) -> None:
    users_file = secured.workdir / "users.toml"
    newcomer = {"login": "newcomer", "passcode": "fresh-pw"}
    assert _refused(secured.stomp_port, newcomer)[0] == "Authentication failed"
    users = dict(load_users(users_file).by_name)
    users["newcomer"] = User("newcomer", hash_password("fresh-pw"), frozenset({"admin"}))
    write_users(users_file, users.values())
    wait_until(lambda: any("users file" in line and "reloaded" in line for line in secured.log_lines),
               timeout=10, what="the users file to be reloaded")
    StompClient(secured.stomp_port, connect_headers=newcomer).connect().disconnect()


def test_changed_password_is_the_only_one_that_works(secured: BrokerProcess) -> None:
    users_file = secured.workdir / "users.toml"
    StompClient(secured.stomp_port, connect_headers=login("consumer")).connect().disconnect()  # cached
    users = dict(load_users(users_file).by_name)
    users["consumer"] = User("consumer", hash_password("rotated"), users["consumer"].roles)
    reloads = sum("reloaded" in line for line in secured.log_lines)
    write_users(users_file, users.values())
    wait_until(lambda: sum("reloaded" in line for line in secured.log_lines) > reloads, timeout=10,
               what="the users file to be reloaded")
    assert _refused(secured.stomp_port, login("consumer"))[0] == "Authentication failed"
    StompClient(secured.stomp_port, connect_headers={"login": "consumer", "passcode": "rotated"}
                ).connect().disconnect()
    users["consumer"] = User("consumer", hash_password(password("consumer")), users["consumer"].roles)
    write_users(users_file, users.values())  # as it was, for the other tests
    wait_until(lambda: _try(secured.stomp_port, login("consumer")), timeout=10, what="the old password")


def _try(port: int, headers: dict[str, str]) -> bool:
    raw, frame = _connect_raw(port, headers)
    with raw:
        return frame is not None and frame.command == "CONNECTED"


def test_broken_users_file_keeps_the_last_good_users(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    proc = start_secured(tmp_path / "broken")
    request.addfinalizer(proc.stop)
    users_file = proc.workdir / "users.toml"
    users_file.write_text('[users.alice]\npassword = "plain text"\nroles = ["admin"]\n')
    wait_until(lambda: any(" ERROR " in line and "users file not reloaded" in line
                           for line in proc.log_lines), timeout=10, what="an ERROR about the users file")
    StompClient(proc.stomp_port, connect_headers=login("producer")).connect().disconnect()
    plain = {"login": "alice", "passcode": "plain text"}
    assert _refused(proc.stomp_port, plain)[0] == "Authentication failed"
    write_users_file(users_file, {"alice": ("admin",)})  # fixed: only alice now
    wait_until(lambda: not _try(proc.stomp_port, login("producer")), timeout=10, what="producer removed")
    assert _try(proc.stomp_port, login("alice"))


def test_spark_sink_connection_passes_user_and_password(secured: BrokerProcess, queue_name: str) -> None:
    """The sink's `user` / `password` options become CONNECT's login / passcode (the sink's
    STOMP connection, without starting Spark)."""
    from pagemq.spark.stomp_sender import StompSender, StompSendError

    with StompSender(HOST, secured.stomp_port, login="builder", passcode=password("builder")) as sender:
        sender.send(f"/queue/{queue_name}", [("persistent", "true")], b"row")
        sender.flush()
    status, _, body = _http(secured, f"/api/queues/{queue_name}", "alice")
    assert status == 200 and json.loads(body)["messages"] == 1
    with pytest.raises(StompSendError, match="broker ERROR: Authentication failed"):
        StompSender(HOST, secured.stomp_port, login="builder", passcode="wrong").connect()


# -- HTTP ----------------------------------------------------------------------------------


def _http(proc: BrokerProcess, path: str, user: str | None = None, secret: str | None = None,
          method: str = "GET") -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(f"http://{HOST}:{proc.http_port}{path}", method=method)
    if user is not None:
        token = base64.b64encode(f"{user}:{secret if secret is not None else password(user)}".encode())
        request.add_header("Authorization", f"Basic {token.decode()}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read().decode()


def test_http_api_needs_credentials(secured: BrokerProcess) -> None:
    for path in ("/api/addresses", "/metrics", "/api/broker"):
        status, headers, body = _http(secured, path)
        assert status == 401, (path, status, body)
        assert headers.get("WWW-Authenticate", "").startswith("Basic realm="), headers
        assert "error" in json.loads(body)
    status, headers, body = _http(secured, "/api/addresses", "alice", "wrong")
    assert status == 401 and json.loads(body) == {"error": "Authentication failed"}
    assert headers.get("WWW-Authenticate")


def test_http_api_needs_view_to_read_and_manage_for_the_rest(secured: BrokerProcess) -> None:
    status, _, body = _http(secured, "/api/addresses", "producer")
    assert status == 403, body
    assert json.loads(body)["error"] == "User producer lacks permission view on address pagemq.management"
    assert _http(secured, "/metrics", "producer")[0] == 403
    assert _http(secured, "/api/addresses", "alice")[0] == 200
    status, _, text = _http(secured, "/metrics", "alice")
    assert status == 200 and "pagemq_memory_used_bytes" in text
    status, _, body = _http(secured, "/api/addresses", "producer", method="DELETE")
    assert status == 403 and "lacks permission manage" in json.loads(body)["error"]


def test_http_view_role_reads_but_cannot_manage(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    proc = start_secured(tmp_path / "viewer", users={**USERS, "watcher": ("viewers",)})
    request.addfinalizer(proc.stop)
    assert _http(proc, "/api/broker", "watcher")[0] == 200
    assert _http(proc, "/metrics", "watcher")[0] == 200
    status, _, body = _http(proc, "/api/queues/x", "watcher", method="POST")
    assert status == 403 and "lacks permission manage" in body


def test_health_probes_answer_without_credentials_but_nothing_else_does(secured: BrokerProcess) -> None:
    for path in ("/health", "/health/live", "/health/ready"):
        status, _, body = _http(secured, path)
        assert status == 200 and json.loads(body)["live"] is True, (path, body)
    # every other endpoint, the admin actions and the stream endpoints included
    for method, path in (("GET", "/api/queues/jobs/messages"), ("POST", "/api/queues/jobs/purge"),
                         ("POST", "/api/queues/jobs/move"), ("DELETE", "/api/queues/jobs"),
                         ("GET", "/api/connections"), ("GET", "/api/streams/jobs/offsets"),
                         ("POST", "/api/streams/subscriptions"), ("GET", "/health/other"),
                         ("POST", "/health"), ("GET", "/nothing-here")):
        status, headers, body = _http(secured, path, method=method)
        assert status == 401 and headers.get("WWW-Authenticate"), (method, path, status, body)

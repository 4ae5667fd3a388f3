"""End-to-end test helpers: a real `pagemq serve` process, a stomp.py client, a raw socket.

Everything here talks to the broker the way a user does: a subprocess started from the
installed `pagemq` script, TCP sockets on 127.0.0.1, HTTP for the management API. Every
wait is bounded; a timeout fails the test with what was seen so far.

- `BrokerProcess`: free ports (or given ones), optional TOML config (written from a dict),
  start/stop/kill/restart on the same data directory and ports, stderr drained into
  `log_lines`, `http_get(path) -> (status, json)`; an optional `launcher` starts the process
  instead of subprocess.Popen (the model-based test's fork server).
- `StompClient`: a stomp.py connection (1.0, 1.1 or 1.2) with a `FrameCollector` listener
  (`wait_for(n, timeout)`), receipts waited for where asked, version-aware ACK/NACK.
- `RawStomp`: bytes in, frames out, for malformed input, exact headers and heart-beats.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stomp

HOST = "127.0.0.1"
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
READY_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0
WAIT = 5.0  # default bound for one expected event (a frame, a receipt, a count)


# -- small utilities ----------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def unique(prefix: str = "q") -> str:
    """A queue/address name no other test uses (letters, digits, '-' and '_' only)."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", prefix)[:40]
    return f"{cleaned}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT, interval: float = 0.05,
               what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")
        time.sleep(interval)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _emit_table(path: list[str], table: Mapping[str, Any], out: list[str], array: bool = False) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
    if path:
        dotted = ".".join(_toml_key(part) for part in path)
        if array:
            out.append(f"[[{dotted}]]")
        elif scalars or not table:
            out.append(f"[{dotted}]")
    out.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items())
    for key, value in table.items():
        if isinstance(value, dict):
            _emit_table([*path, key], value, out)
        elif _is_table_array(value):
            for item in value:
                _emit_table([*path, key], item, out, array=True)


def to_toml(config: Mapping[str, Any]) -> str:
    """A (nested) dict as TOML text: tables for dicts, `[[arrays]]` for lists of dicts."""
    out: list[str] = []
    _emit_table([], config, out)
    text = "\n".join(out) + "\n"
    assert tomllib.loads(text) == json.loads(json.dumps(config)), f"TOML writer bug:\n{text}"
    return text


# -- the broker process -------------------------------------------------------------------


class BrokerProcess:
    """One `pagemq serve` process on free ports, restartable on the same data dir and ports.

    `workdir` holds `data/` (the data directory) and `pagemq.toml` when a config is given;
    the process runs with `workdir` as its current directory.
    """

    def __init__(self, workdir: Path, config: Mapping[str, Any] | None = None,
                 extra_args: Iterable[str] = (), *, ports: tuple[int, int] | None = None,
                 launcher: Callable[[list[str], Path], Any] | None = None) -> None:
        """`ports`: (stomp, http) instead of two free ones. `launcher(command, cwd)`: starts
        the process instead of subprocess.Popen and returns an object with Popen's pid,
        stdout, stderr (pipes), poll, wait, send_signal, kill and returncode."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        if ports is not None:
            self.stomp_port, self.http_port = ports
        else:
            self.stomp_port = free_port()
            self.http_port = free_port()
            while self.http_port == self.stomp_port:
                self.http_port = free_port()
        self.launcher = launcher
        self.config_path: Path | None = None
        if config is not None:
            self.config_path = self.workdir / "pagemq.toml"
            self.config_path.write_text(to_toml(config))
        self.extra_args = list(extra_args)
        self.log_lines: list[str] = []  # stderr of every run, in order
        self.stdout_lines: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_count = 0
        self._run_start = 0  # index in log_lines where the current run began
        self._ready = threading.Event()
        self._drains: list[threading.Thread] = []

    # -- life cycle -----------------------------------------------------------------------

    @property
    def command(self) -> list[str]:
        args = [
            PAGEMQ, "serve", "--data-dir", str(self.data_dir),
            "--stomp", f"{HOST}:{self.stomp_port}", "--http", f"{HOST}:{self.http_port}",
        ]
        if self.config_path is not None:
            args += ["--config", str(self.config_path)]
        return args + self.extra_args

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = READY_TIMEOUT) -> BrokerProcess:
        """Start the process and wait (bounded) for the `ready` log line."""
        assert not self.running, "broker already running"
        self._ready.clear()
        self._run_start = len(self.log_lines)
        if self.launcher is not None:
            self.proc = self.launcher(self.command, self.workdir)
        else:
            self.proc = subprocess.Popen(
                self.command, cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
        self.start_count += 1
        self._drains = [
            threading.Thread(target=self._drain, args=(self.proc.stderr, self.log_lines, True), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stdout, self.stdout_lines, False),
                             daemon=True),
        ]
        for thread in self._drains:
            thread.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._join_drains()
                raise RuntimeError(
                    f"pagemq serve exited with {self.proc.returncode} before `ready`:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"pagemq serve not ready after {timeout}s:\n{self.log_tail()}")
        return self

    def _drain(self, pipe: Any, lines: list[str], watch_ready: bool) -> None:
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            if watch_ready and re.search(r"\bready\b", line):  # not "already in use"
                self._ready.set()
        pipe.close()

    def _join_drains(self) -> None:
        for thread in self._drains:
            thread.join(timeout=5)

    def stop(self, timeout: float = STOP_TIMEOUT, expect_code: int | None = 0) -> int:
        """SIGTERM, wait (bounded), assert the exit code (0 unless told otherwise)."""
        assert self.proc is not None, "broker never started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                self._join_drains()
                raise AssertionError(
                    f"broker did not exit within {timeout}s of SIGTERM:\n{self.log_tail()}"
                ) from None
        self._join_drains()
        code = self.proc.returncode
        if expect_code is not None:
            assert code == expect_code, (
                f"broker exited with {code}, expected {expect_code}:\n{self.log_tail()}"
            )
        return code

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._join_drains()

    def restart(self, kill: bool = False, timeout: float = READY_TIMEOUT) -> BrokerProcess:
        """Stop (SIGTERM, exit 0 asserted) or kill, then start on the same data dir and ports."""
        if kill:
            self.kill()
        elif self.running:
            self.stop()
        return self.start(timeout)

    def close(self) -> None:
        """Teardown: a running broker is stopped cleanly (exit 0 asserted)."""
        if self.running:
            self.stop()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.kill()
        else:
            self.close()

    # -- logs -----------------------------------------------------------------------------

    @property
    def current_log(self) -> list[str]:
        """stderr lines of the current (or last) run only."""
        return self.log_lines[self._run_start:]

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_lines[-n:])

    def tracebacks(self) -> list[str]:
        return [line for line in self.log_lines if line.startswith("Traceback")]

    # -- HTTP -----------------------------------------------------------------------------

    def http_get_text(self, path: str, timeout: float = WAIT) -> tuple[int, str, str]:
        """(status, content type, body text) of GET `path` on the HTTP acceptor."""
        url = f"http://{HOST}:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.headers.get("Content-Type", ""), response.read().decode()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()

    def http_get(self, path: str, timeout: float = WAIT) -> tuple[int, Any]:
        """(status, parsed JSON) of GET `path`."""
        status, _, text = self.http_get_text(path, timeout)
        try:
            return status, json.loads(text)
        except ValueError as exc:
            raise AssertionError(f"GET {path} -> {status}, body is not JSON: {text[:500]!r}") from exc

    def rss_bytes(self) -> int:
        """The broker process's resident set size now (Linux /proc)."""
        assert self.proc is not None and self.running, "broker not running"
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS line in /proc status")

    def queue(self, name: str) -> dict[str, Any]:
        """GET /api/queues/{name}, asserting 200."""
        status, body = self.http_get(f"/api/queues/{name}")
        assert status == 200, f"GET /api/queues/{name} -> {status} {body}"
        return body

    def address(self, name: str) -> dict[str, Any]:
        """GET /api/addresses/{name}, asserting 200."""
        status, body = self.http_get(f"/api/addresses/{name}")
        assert status == 200, f"GET /api/addresses/{name} -> {status} {body}"
        return body

    def wait_queue(self, name: str, timeout: float = WAIT, **expected: Any) -> dict[str, Any]:
        """Poll a queue until every given field has the expected value; returns the queue."""
        return self.wait_api(f"/api/queues/{name}", f"queue {name}", timeout, expected)

    def wait_api(self, path: str, label: str, timeout: float, expected: Mapping[str, Any],
                 shown: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Poll a management view until every expected field has its value; returns the view.
        On timeout the error shows what was last seen (only `expected` + `shown` if given)."""
        seen: dict[str, Any] = {}

        def matches() -> bool:
            status, body = self.http_get(path)
            seen.clear()
            seen.update(body if isinstance(body, dict) else {"status": status})
            return status == 200 and all(body.get(k) == v for k, v in expected.items())

        try:
            wait_until(matches, timeout, what=f"{label} to have {dict(expected)}")
        except AssertionError:
            last = seen if shown is None else {k: seen.get(k) for k in (*expected, *shown)}
            raise AssertionError(
                f"{label}: expected {dict(expected)} within {timeout}s, got {last}"
            ) from None
        return dict(seen)


# -- stomp.py client ----------------------------------------------------------------------


class FrameCollector(stomp.ConnectionListener):
    """Collects every frame a stomp.py connection receives; bounded waits on them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.connected: Any = None
        self.messages: list[Any] = []
        self.errors: list[Any] = []
        self.receipts: list[str] = []
        self.heartbeats = 0
        self.disconnected = False

    def _add(self, action: Callable[[], None]) -> None:
        with self._cond:
            action()
            self._cond.notify_all()

    def on_connected(self, frame: Any) -> None:
        self._add(lambda: setattr(self, "connected", frame))

    def on_message(self, frame: Any) -> None:
        self._add(lambda: self.messages.append(frame))

    def on_error(self, frame: Any) -> None:
        self._add(lambda: self.errors.append(frame))

    def on_receipt(self, frame: Any) -> None:
        self._add(lambda: self.receipts.append(frame.headers.get("receipt-id", "")))

    def on_heartbeat(self) -> None:
        self._add(lambda: setattr(self, "heartbeats", self.heartbeats + 1))

    def on_disconnected(self) -> None:
        self._add(lambda: setattr(self, "disconnected", True))

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what}; got {len(self.messages)} messages "
                    f"{[m.body for m in self.messages][:20]!r}, errors "
                    f"{[(e.headers, e.body) for e in self.errors]!r}, receipts {self.receipts[-10:]!r}"
                )

    def wait_quietly(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait for `predicate` (checked under the listener's lock); False on timeout."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def wait_for(self, n: int, timeout: float = WAIT) -> list[Any]:
        """The first `n` MESSAGE frames received on this connection (waits for them)."""
        self.wait(lambda: len(self.messages) >= n, timeout, f"{n} messages")
        with self._cond:
            return list(self.messages[:n])

    def wait_for_receipt(self, receipt_id: str, timeout: float = WAIT) -> None:
        self.wait(lambda: receipt_id in self.receipts or bool(self.errors), timeout, f"RECEIPT {receipt_id}")
        assert receipt_id in self.receipts, f"ERROR instead of RECEIPT {receipt_id}: " + repr(
            [(e.headers, e.body) for e in self.errors]
        )

    def wait_for_error(self, timeout: float = WAIT) -> Any:
        self.wait(lambda: bool(self.errors), timeout, "an ERROR frame")
        return self.errors[0]

    def wait_for_disconnect(self, timeout: float = WAIT) -> None:
        self.wait(lambda: self.disconnected, timeout, "the connection to close")

    def assert_no_more(self, count: int, within: float = 0.5) -> None:
        """Still exactly `count` messages after waiting `within` seconds."""
        time.sleep(within)
        with self._cond:
            extra = self.messages[count:]
            assert not extra, f"expected {count} messages, got {len(self.messages)}: " + repr(
                [(m.headers.get("message-id"), m.body) for m in extra]
            )


_CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


def bodies(frames: Iterable[Any]) -> list[Any]:
    return [frame.body for frame in frames]


class StompClient:
    """A stomp.py connection plus its FrameCollector. Receipts are waited for when asked."""

    def __init__(self, port: int, *, version: str = "1.2", client_id: str | None = None,
                 auto_decode: bool = True, heartbeats: tuple[int, int] = (0, 0),
                 connect_headers: Mapping[str, str] | None = None, timeout: float = WAIT) -> None:
        self.version = version
        self.timeout = timeout
        kwargs: dict[str, Any] = {"auto_decode": auto_decode, "reconnect_attempts_max": 1}
        if version != "1.0":
            kwargs["heartbeats"] = heartbeats
        self.conn = _CONNECTIONS[version]([(HOST, port)], **kwargs)
        self.listener = FrameCollector()
        self.conn.set_listener("collector", self.listener)
        self._client_id = client_id
        self._connect_headers = dict(connect_headers or {})
        self._sub_ids = (f"sub-{n}" for n in range(1, 1_000_000))

    # -- connection -----------------------------------------------------------------------

    def connect(self) -> StompClient:
        headers = dict(self._connect_headers)
        if self._client_id is not None:
            headers["client-id"] = self._client_id
        self.conn.connect(wait=False, headers=headers)
        self.listener.wait(lambda: self.listener.connected is not None or bool(self.listener.errors)
                           or self.listener.disconnected, self.timeout, "CONNECTED")
        assert self.listener.connected is not None, (
            f"no CONNECTED: errors {[(e.headers, e.body) for e in self.listener.errors]!r}"
        )
        return self

    @property
    def is_connected(self) -> bool:
        return self.conn.is_connected() and not self.listener.disconnected

    def disconnect(self, timeout: float = WAIT) -> None:
        """DISCONNECT with a receipt, wait (bounded) for the socket to close."""
        if not self.is_connected:
            self.drop()
            return
        self.conn.disconnect()  # sends DISCONNECT with a receipt; stomp.py closes on that receipt
        try:
            self.listener.wait_for_disconnect(timeout)
        finally:
            self.drop()

    def drop(self) -> None:
        """Close the socket without DISCONNECT (a client that vanishes)."""
        with contextlib.suppress(Exception):
            self.conn.transport.disconnect_socket()
        with contextlib.suppress(Exception):
            self.conn.transport.stop()

    # -- frames ---------------------------------------------------------------------------

    def _receipted(self, headers: dict[str, str], receipt: bool | str) -> str | None:
        if not receipt:
            return None
        receipt_id = receipt if isinstance(receipt, str) else f"r-{uuid.uuid4().hex[:12]}"
        headers["receipt"] = receipt_id
        return receipt_id

    def _wait_receipt(self, receipt_id: str | None) -> None:
        if receipt_id is not None:
            self.listener.wait_for_receipt(receipt_id, self.timeout)

    def send(self, destination: str, body: str | bytes = "", headers: Mapping[str, Any] | None = None,
             receipt: bool | str = False, content_type: str | None = None) -> None:
        hdrs = {k: str(v) for k, v in (headers or {}).items()}
        receipt_id = self._receipted(hdrs, receipt)
        self.conn.send(destination, body, content_type=content_type, headers=hdrs)
        self._wait_receipt(receipt_id)

    def subscribe(self, destination: str, ack: str = "auto", headers: Mapping[str, Any] | None = None,
                  sub_id: str | None = None, receipt: bool | str = True) -> str:
        """SUBSCRIBE (with a receipt by default, so the subscription exists on return)."""
        sub_id = sub_id or next(self._sub_ids)
        hdrs = {k: str(v) for k, v in (headers or {}).items()}
        receipt_id = self._receipted(hdrs, receipt)
        if self.version == "1.0":
            hdrs["id"] = sub_id
            self.conn.subscribe(destination, ack=ack, headers=hdrs)
        else:
            self.conn.subscribe(destination, sub_id, ack=ack, headers=hdrs)
        self._wait_receipt(receipt_id)
        return sub_id

    def unsubscribe(self, sub_id: str, headers: Mapping[str, Any] | None = None,
                    receipt: bool | str = True) -> None:
        hdrs = {k: str(v) for k, v in (headers or {}).items()}
        receipt_id = self._receipted(hdrs, receipt)
        if self.version == "1.0":
            self.conn.unsubscribe(id=sub_id, headers=hdrs)
        else:
            self.conn.unsubscribe(sub_id, headers=hdrs)
        self._wait_receipt(receipt_id)

    def ack(self, frame: Any, transaction: str | None = None, receipt: bool | str = False) -> None:
        """ACK a MESSAGE frame the way this protocol version says (1.2: its `ack` header)."""
        receipt_id = self._receipted({}, receipt)
        if self.version == "1.2":
            self.conn.ack(frame.headers["ack"], transaction=transaction, receipt=receipt_id)
        elif self.version == "1.1":
            self.conn.ack(frame.headers["message-id"], frame.headers["subscription"],
                          transaction=transaction, receipt=receipt_id)
        else:
            self.conn.ack(frame.headers["message-id"], transaction=transaction, receipt=receipt_id)
        self._wait_receipt(receipt_id)

    def nack(self, frame: Any, transaction: str | None = None, receipt: bool | str = False) -> None:
        receipt_id = self._receipted({}, receipt)
        if self.version == "1.2":
            self.conn.nack(frame.headers["ack"], transaction=transaction, receipt=receipt_id)
        else:
            self.conn.nack(frame.headers["message-id"], frame.headers["subscription"],
                           transaction=transaction, receipt=receipt_id)
        self._wait_receipt(receipt_id)

    def _tx_frame(self, method: Callable[..., None], transaction: str, receipt: bool | str) -> None:
        hdrs: dict[str, str] = {}
        receipt_id = self._receipted(hdrs, receipt)
        method(transaction, headers=hdrs)
        self._wait_receipt(receipt_id)

    def begin(self, transaction: str, receipt: bool | str = True) -> None:
        self._tx_frame(self.conn.begin, transaction, receipt)

    def commit(self, transaction: str, receipt: bool | str = True) -> None:
        self._tx_frame(self.conn.commit, transaction, receipt)

    def abort(self, transaction: str, receipt: bool | str = True) -> None:
        self._tx_frame(self.conn.abort, transaction, receipt)

    # -- convenience ----------------------------------------------------------------------

    def wait_for(self, n: int, timeout: float = WAIT) -> list[Any]:
        return self.listener.wait_for(n, timeout)

    @property
    def messages(self) -> list[Any]:
        return self.listener.messages


# -- raw socket STOMP ---------------------------------------------------------------------


@dataclass
class Frame:
    command: str
    header_list: list[tuple[str, str]]
    body: bytes = b""
    headers: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.headers = {}
        for key, value in self.header_list:
            self.headers.setdefault(key, value)  # the first occurrence wins (STOMP 1.2)


_UNESCAPES = {"\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\c": ":"}
_HEADER_END = re.compile(rb"\r?\n\r?\n")


def _unescape(text: str) -> str:
    return re.sub(r"\\.", lambda m: _UNESCAPES.get(m.group(0), m.group(0)), text)


def encode_frame(command: str, headers: Iterable[tuple[str, Any]] | Mapping[str, Any] = (),
                 body: bytes | str = b"", content_length: bool = True) -> bytes:
    """A frame as bytes. Headers are written verbatim (no escaping): the test decides."""
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    raw_body = body.encode() if isinstance(body, str) else body
    if content_length and raw_body and not any(k == "content-length" for k, _ in items):
        items.append(("content-length", len(raw_body)))
    head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in items) + "\n"
    return head.encode() + raw_body + b"\x00"


class RawStomp:
    """A plain TCP socket speaking STOMP by hand: exact bytes out, parsed frames in."""

    def __init__(self, port: int, timeout: float = WAIT) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.timeout = timeout
        self.buffer = b""
        self.heartbeats = 0  # EOLs received between frames
        self.heartbeat_times: list[float] = []
        self.closed = False  # the server closed (EOF or reset)
        self.version: str | None = None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawStomp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- out ------------------------------------------------------------------------------

    def send(self, data: bytes) -> bool:
        """Write bytes; False when the server has already closed (or reset) the socket."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True
            return False

    def send_frame(self, command: str, headers: Iterable[tuple[str, Any]] | Mapping[str, Any] = (),
                   body: bytes | str = b"", content_length: bool = True) -> bool:
        return self.send(encode_frame(command, headers, body, content_length))

    def send_while_reading(self, data: bytes, timeout: float | None = None) -> None:
        """Write a large payload while reading what the server answers meanwhile.

        A server that rejects a frame part-way answers ERROR and closes; reading while
        writing makes sure that ERROR is taken in even if the rest of the write fails.
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        view = memoryview(data)
        self.sock.setblocking(False)
        try:
            while view and not self.closed and time.monotonic() < deadline:
                readable, writable, _ = select.select([self.sock], [self.sock], [], 0.1)
                if readable:
                    self._recv_some()
                if writable and view and not self.closed:
                    try:
                        view = view[self.sock.send(view[: 1 << 16]):]
                    except BlockingIOError:
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        self.closed = True
        finally:
            self.sock.setblocking(True)

    def connect(self, version: str | None = "1.2", headers: Mapping[str, str] | None = None,
                command: str = "CONNECT") -> Frame:
        """CONNECT (or STOMP) and return the CONNECTED frame (asserted)."""
        hdrs: dict[str, str] = {"host": HOST}
        if version is not None:
            hdrs["accept-version"] = version
        hdrs.update(headers or {})
        self.send_frame(command, hdrs)
        frame = self.read_frame()
        assert frame is not None, "connection closed instead of CONNECTED"
        assert frame.command == "CONNECTED", f"expected CONNECTED, got {frame}"
        self.version = frame.headers.get("version", "1.0")
        return frame

    # -- in -------------------------------------------------------------------------------

    def _recv_some(self) -> None:
        try:
            chunk = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
        self.buffer += chunk

    def _parse(self) -> Frame | None:
        """One complete frame off the buffer (EOLs before it count as heart-beats)."""
        while self.buffer[:1] in (b"\n", b"\r"):
            if self.buffer.startswith(b"\r\n"):
                self.buffer = self.buffer[2:]
            elif self.buffer.startswith(b"\n"):
                self.buffer = self.buffer[1:]
            else:
                return None  # a lone CR: wait for its LF
            self.heartbeats += 1
            self.heartbeat_times.append(time.monotonic())
        match = _HEADER_END.search(self.buffer)
        if match is None:
            return None
        lines = re.split(r"\r?\n", self.buffer[: match.start()].decode("utf-8", "replace"))
        command, header_lines = lines[0], lines[1:]
        escaped = self.version in ("1.1", "1.2") and command != "CONNECTED"
        header_list = []
        for line in header_lines:
            key, _, value = line.partition(":")
            header_list.append((_unescape(key), _unescape(value)) if escaped else (key, value))
        start = match.end()
        length = next((v for k, v in header_list if k == "content-length"), None)
        if length is not None and length.strip().isdigit():
            end = start + int(length)
            if len(self.buffer) < end + 1:
                return None
        else:
            end = self.buffer.find(b"\x00", start)
            if end < 0:
                return None
        body = self.buffer[start:end]
        self.buffer = self.buffer[end + 1:]
        return Frame(command, header_list, body)

    def read_frame(self, timeout: float | None = None) -> Frame | None:
        """The next frame; None when the server closed first; TimeoutError after `timeout`."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            if self.closed:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no frame within {timeout}s (buffer {self.buffer[:200]!r})")
            self.sock.settimeout(remaining)
            try:
                self._recv_some()
            except TimeoutError:
                continue

    def read_until_error_or_close(self, timeout: float | None = None) -> tuple[list[Frame], Frame | None]:
        """Every frame up to and including the first ERROR (or the close). -> (frames, error)."""
        frames: list[Frame] = []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            if frame is None:
                return frames, None
            frames.append(frame)
            if frame.command == "ERROR":
                return frames, frame

    def read_until(self, predicate: Callable[[Frame], bool], timeout: float | None = None) -> list[Frame]:
        """Frames up to and including the first one matching `predicate` (asserted to come)."""
        frames: list[Frame] = []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise AssertionError(f"no matching frame within {timeout}s; got {frames}") from None
            assert frame is not None, f"connection closed before a matching frame; got {frames}"
            frames.append(frame)
            if predicate(frame):
                return frames

    def read_until_receipt(self, receipt_id: str, timeout: float | None = None) -> list[Frame]:
        def done(f: Frame) -> bool:
            return f.command == "ERROR" or (
                f.command == "RECEIPT" and f.headers.get("receipt-id") == receipt_id
            )

        frames = self.read_until(done, timeout)
        assert frames[-1].command == "RECEIPT", f"ERROR instead of RECEIPT {receipt_id}: {frames[-1]}"
        return frames

    def wait_heartbeats(self, count: int, timeout: float) -> None:
        """Read until `count` heart-beat EOLs have arrived in total (frames are discarded)."""
        deadline = time.monotonic() + timeout
        while self.heartbeats < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                raise AssertionError(
                    f"{self.heartbeats} heart-beats within {timeout}s, expected {count} "
                    f"(closed: {self.closed})"
                )
            self.sock.settimeout(remaining)
            with contextlib.suppress(TimeoutError):
                self._recv_some()
            while self._parse() is not None:
                pass

    def wait_closed(self, timeout: float | None = None) -> bool:
        """True once the server has closed the connection (frames read meanwhile are dropped)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                self._recv_some()
            except TimeoutError:
                return False
            while self._parse() is not None:
                pass
        return True

    def expect_error(self, timeout: float | None = None) -> Frame:
        """Read up to an ERROR frame, assert the connection then closes; return the ERROR."""
        frames, error = self.read_until_error_or_close(timeout)
        assert error is not None, f"expected an ERROR frame, got {frames} then close"
        assert self.wait_closed(timeout), f"connection still open after ERROR {error}"
        return error


def broker_still_serves(port: int, timeout: float = WAIT) -> None:
    """A fresh connection can still send and receive (the broker survived whatever came before)."""
    name = unique("alive")
    client = StompClient(port, timeout=timeout).connect()
    try:
        client.subscribe(f"/queue/{name}")
        client.send(f"/queue/{name}", "still here", receipt=True)
        assert bodies(client.wait_for(1, timeout)) == ["still here"]
    finally:
        client.disconnect()


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run `pagemq ARGS...` to completion (bounded); stdout and stderr captured as text."""
    return subprocess.run(
        [PAGEMQ, *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=timeout, check=False,
    )


def cli_into_head(*args: str, timeout: float = 30.0) -> tuple[bytes, int, str]:
    """Run `pagemq ARGS...` as `| head -1` does: read one line, close the pipe, wait.
    Returns (that line, exit code, stderr)."""
    proc = subprocess.Popen([PAGEMQ, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    code = proc.wait(timeout)
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    return first, code, stderr


def now_ms() -> int:
    """Milliseconds since the epoch (the unit of the STOMP `expires` header)."""
    return int(time.time() * 1000)

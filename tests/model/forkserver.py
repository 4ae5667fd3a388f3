"""A fork server for broker processes: `pagemq serve` (and `pagemq data check`) started by
fork() from a helper process that imported pagemq and its dependencies once, instead of by a
fresh interpreter that imports them every time.

Why: a broker start takes about 0.6 s on a small machine, 0.45 s of it importing (aiohttp,
uvloop, pagemq itself), and the model-based test starts the broker five times per program
(the first start, its restarts and kills, the final restart). Forked, a start takes a few
hundredths of a second.

What the child runs is what the `pagemq` script runs: `sys.exit(pagemq.cli.main())` with
`sys.argv` set, in the working directory asked for, stdin on /dev/null and stdout/stderr on
the caller's pipes; it then exits the way an interpreter does (non-daemon threads joined,
atexit handlers run, stdio flushed). It is a real process of its own: SIGTERM and SIGKILL go
to it directly (through a pidfd, so never to a reused pid), and its exit code is reported by
the fork server, its parent. `ForkedProcess` has the part of `subprocess.Popen` that
`BrokerProcess` uses. How it differs from exec'ing `pagemq`, and why that does not matter:

- The modules were imported before fork(): the same code, with fresh import-time state in
  every child (the server process runs nothing else, and holds no thread, loop or file).
- `random` is reseeded in each child by the random module's own at-fork hook.
- String hashing: children share their server's PYTHONHASHSEED, so the caller replaces the
  server after `recycle` children (a long run still sees many hash seeds).

If the caller dies, the server kills the children it still has and exits.
`PAGEMQ_MODEL_FORKSERVER=0` makes the model-based test exec `pagemq` as before.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

PRELOAD = ("pagemq.cli", "pagemq.server.app", "pagemq.integrations.http_api",
           "pagemq.storage.data_commands", "uvloop")
READY_TIMEOUT = 60.0


# -- the server process -------------------------------------------------------------------


class _Server:
    """The fork server's loop. Requests come on `control` (SOCK_SEQPACKET): a JSON object
    with three descriptors (a status socket, the child's stdout and stderr)."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.children: dict[int, socket.socket] = {}  # pid -> its status socket
        self.retiring = False

    def run(self) -> None:
        import importlib

        for name in PRELOAD:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        assert threading.active_count() == 1, "a preloaded module started a thread"
        # What was imported stays out of the children's collections (the broker freezes what
        # it has at start-up anyway; this only spares each child walking the imports again).
        gc.collect()
        gc.freeze()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.control, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.control.send(b"ready")
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is not self.control:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
                elif not self.request():
                    return
            self.reap()
            if self.retiring and not self.children:
                return

    def request(self) -> bool:
        """One request; False when the caller is gone (its brokers are then killed)."""
        message, fds, _, _ = socket.recv_fds(self.control, 1 << 16, 3)
        if not message:
            for pid in self.children:
                os.kill(pid, signal.SIGKILL)  # not reaped yet: still ours
            for pid in self.children:
                os.waitpid(pid, 0)
            return False
        request = json.loads(message)
        if request.get("retire"):  # no more requests; exit once the children have
            self.retiring = True
            return True
        status, out, err = socket.socket(fileno=fds[0]), fds[1], fds[2]
        pid = os.fork()
        if pid == 0:
            self.selector.close()
            for fd in (self.wake_r, self.wake_w):
                os.close(fd)
            for sock in (self.control, *self.children.values()):
                sock.close()
            _child(request, status, out, err)  # raises SystemExit, never returns
        pidfd = os.pidfd_open(pid)
        socket.send_fds(status, [json.dumps({"pid": pid}).encode()], [pidfd])
        for fd in (pidfd, out, err):
            os.close(fd)
        self.children[pid] = status
        return True

    def reap(self) -> None:
        """Exit codes of the children that ended, each to its status socket."""
        while self.children:
            pid, code = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            status = self.children.pop(pid, None)
            if status is not None:
                with contextlib.suppress(OSError):
                    status.send(json.dumps({"code": os.waitstatus_to_exitcode(code)}).encode())
                status.close()


def _child(request: dict[str, Any], status: socket.socket, out: int, err: int) -> None:
    """In the forked child: become `pagemq ARGS` and exit with its code."""
    status.close()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (null, out, err):
        os.close(fd)
    os.chdir(request["cwd"])
    sys.argv = [request["argv0"], *request["args"]]
    from pagemq.cli import main

    sys.exit(main())


# -- the caller's side --------------------------------------------------------------------


class ForkedProcess:
    """A child of the fork server, seen as much like `subprocess.Popen` as BrokerProcess
    needs: pid, stdout, stderr, poll(), wait(), send_signal(), kill(), returncode."""

    def __init__(self, args: list[str], pid: int, pidfd: int, status: socket.socket,
                 stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.args = args
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._status = status

    def _collect(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        self._status.settimeout(timeout)
        try:
            message = self._status.recv(256)
        except (TimeoutError, BlockingIOError):
            return
        self.returncode = json.loads(message)["code"] if message else -1000  # -1000: server died
        self._status.close()
        os.close(self._pidfd)

    def poll(self) -> int | None:
        self._collect(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._collect(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited, not reaped yet
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkServer:
    """Starts `pagemq ...` children by asking a fork server; replaces the server after
    `recycle` children (see the module docstring)."""

    def __init__(self, argv0: str, recycle: int = 50) -> None:
        self.argv0 = argv0
        self.recycle = recycle
        self._lock = threading.Lock()
        self._server: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._spawned = 0
        self._retired: list[tuple[subprocess.Popen[bytes], socket.socket]] = []

    def _start_server(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )
        theirs.close()
        mine.settimeout(READY_TIMEOUT)
        try:
            ready = mine.recv(16)
        except TimeoutError:
            ready = b""
        if ready != b"ready":
            try:
                self._server.wait(5)  # it failed (an import, say: its traceback is on stderr)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            mine.close()
            raise RuntimeError(f"the fork server did not start (exit {self._server.returncode}; "
                               "its stderr says why)")
        mine.settimeout(None)
        self._control = mine
        self._spawned = 0

    def _retire(self) -> None:
        """The server takes no more requests and exits once its children have (or when its
        control socket closes: then it kills them first)."""
        if self._control is not None and self._server is not None:
            with contextlib.suppress(OSError):
                self._control.send(json.dumps({"retire": True}).encode())
            self._retired.append((self._server, self._control))
        self._control = self._server = None
        for proc, control in self._retired:
            if proc.poll() is not None:
                control.close()
        self._retired = [(proc, control) for proc, control in self._retired if proc.returncode is None]

    def popen(self, command: list[str], cwd: Path) -> ForkedProcess:
        """Start `pagemq` with the arguments of `command` (its first item is the script)."""
        with self._lock:
            if self._control is not None and self._spawned >= self.recycle:
                self._retire()
            if self._control is None:
                self._start_server()
            assert self._control is not None
            self._spawned += 1
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            request = {"argv0": self.argv0, "args": command[1:], "cwd": str(cwd)}
            try:
                socket.send_fds(self._control, [json.dumps(request).encode()],
                                [theirs.fileno(), out_w, err_w])
            finally:
                theirs.close()
                os.close(out_w)
                os.close(err_w)
            mine.settimeout(READY_TIMEOUT)
            message, fds, _, _ = socket.recv_fds(mine, 256, 1)
            if not message or len(fds) != 1:
                raise RuntimeError("the fork server did not start the process")
            pid = json.loads(message)["pid"]
            return ForkedProcess(command, pid, fds[0], mine, os.fdopen(out_r, "rb"),
                                 os.fdopen(err_r, "rb"))

    def run(self, command: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """Like subprocess.run(command, capture_output=True, text=True, timeout=timeout)."""
        proc = self.popen(command, cwd)
        chunks: dict[Any, list[bytes]] = {proc.stdout: [], proc.stderr: []}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for pipe in chunks:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    proc.kill()
                    proc.wait(10)
                    raise subprocess.TimeoutExpired(command, timeout)
                for key, _ in selector.select(remaining):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fileobj].append(data)
                    else:
                        selector.unregister(key.fileobj)
        code = proc.wait(max(0.1, deadline - time.monotonic()))
        for pipe in chunks:
            pipe.close()
        return subprocess.CompletedProcess(command, code, b"".join(chunks[proc.stdout]).decode(),
                                           b"".join(chunks[proc.stderr]).decode())

    def close(self) -> None:
        """Closing the control socket makes the server kill what it still runs and exit."""
        with self._lock:
            servers = list(self._retired)
            if self._server is not None and self._control is not None:
                servers.append((self._server, self._control))
            for proc, control in servers:
                control.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
            self._server = self._control = None
            self._retired = []


if __name__ == "__main__":
    _Server(socket.socket(fileno=int(sys.argv[1]))).run()

"""Restart with a deep paged backlog: process start to STOMP CONNECTED, and RSS after start.

    .venv/bin/python benchmarks/restart_bench.py --messages 2M --cache /tmp/restart-cache
        [--runs 5] [--size 1024] [--global-max-size 64MiB] [--tree OTHER_TREE]
        [--profile] [--rebuild] [--crash] [--no-bytecode-cache] [--delete] [--json]

1. Fill, once per (messages, size, budget), cached under `--cache`: a broker of this tree
   with `global-max-size` (64 MiB) and one anycast queue takes `--messages` persistent
   bodies from `pagemq perf --phase produce` (receipted, so every one is durable) with no
   consumer, then is stopped with SIGTERM (`--crash`: SIGKILL, so the live page has no
   summary and is scanned at start). The first ~64 MiB of messages stay in memory (in the
   journal), the rest is in page files: 2M 1 KiB messages are ~2 GB, 10M ~10 GB (check
   `df`; `--delete` removes the cache when done).
2. R runs: each starts `pagemq serve` (of `--tree`, default this checkout) on a fresh copy
   of the cached data directory (journal and small files copied, page files hard-linked:
   a broker never writes into an existing page file but to cut a torn tail, which a
   SIGTERM leaves none of), connects with a raw socket as soon as the port accepts and
   sends CONNECT until a CONNECTED frame comes back. Reported per run and as a median: the
   seconds from just before the process was spawned to CONNECTED, the CPU seconds the
   broker had used by then (steadier than wall time on a shared machine), its RSS then and
   a second later, and the message count its `ready` line says it recovered. Bytecode is
   cached (under `--cache`, PYTHONPYCACHEPREFIX) and warmed before the first run, as an
   installed broker's would be; `--no-bytecode-cache` measures a tree whose sources are
   compiled at every start (an editable install under PYTHONDONTWRITEBYTECODE: ~0.15 s).
3. `--profile`: one more start-up under cProfile (imports included, from the interpreter's
   first line of pagemq to CONNECTED: the benchmark signals the broker as soon as it reads
   CONNECTED, and the broker dumps the profile then), top entries by cumulative and by own
   time. cProfile slows Python code two- to threefold; read it for proportions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from paging_bench import broker_config
from rss import format_mib, process_rss

HERE = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
HOST = "127.0.0.1"
QUEUE = "restart-bench"
CONNECT = f"CONNECT\naccept-version:1.2\nhost:{HOST}\nheart-beat:0,0\n\n\0".encode()
READY = re.compile(rb"\bready\b.*recovered (\d+) messages in ([0-9.]+)s")
START_TIMEOUT = 300.0

# Run inside the profiled broker: profile from before pagemq is imported; SIGUSR1 (sent by
# the benchmark when it reads CONNECTED) stops the profiler and writes the stats.
PROFILED_MAIN = """
import cProfile, os, signal, sys
profile = cProfile.Profile()
def dump(_signum, _frame):
    profile.disable()
    profile.dump_stats(sys.argv[1] + ".tmp")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
signal.signal(signal.SIGUSR1, dump)
profile.enable()
from pagemq.cli import main
sys.exit(main(sys.argv[2:]))
"""


def broker_env(tree: Path, cache: Path | None) -> dict[str, str]:
    """The broker's environment: bytecode cached under `cache`, or (None) never written, so
    that sources without a `__pycache__` are compiled at every start."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if cache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env["PYTHONPYCACHEPREFIX"] = str(cache / "pycache")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_bytecode(tree: Path, cache: Path | None) -> None:
    """Compile (into the cache) everything a broker start imports, HTTP API included."""
    if cache is not None:
        subprocess.run([PYTHON, "-c", "import pagemq.cli, pagemq.server.app, pagemq.server.config, "
                        "pagemq.integrations.http_api, pagemq.storage.paging.page_store"],
                       env=broker_env(tree, cache), check=True, cwd=tree)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _count(text: str) -> int:
    """`2M`, `10m`, `500k`, `2000000`."""
    text = text.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _serve_args(data: Path, config: Path, stomp_port: int) -> list[str]:
    return ["serve", "--data-dir", str(data), "--config", str(config),
            "--stomp", f"{HOST}:{stomp_port}", "--http", f"{HOST}:{_free_port()}"]


def _wait_log(log: Path, pattern: re.Pattern[bytes], proc: subprocess.Popen[bytes],
              timeout: float) -> re.Match[bytes]:
    deadline = time.monotonic() + timeout
    while True:
        found = pattern.search(log.read_bytes()) if log.exists() else None
        if found:
            return found
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"broker never logged {pattern.pattern!r}:\n{_tail(log)}")
        time.sleep(0.01)


def _tail(log: Path, lines: int = 30) -> str:
    with contextlib.suppress(FileNotFoundError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def connected_after(port: int, started: float, proc: subprocess.Popen[bytes]) -> float:
    """Poll-connect, send CONNECT, read until the frame's NUL; seconds since `started` at
    CONNECTED."""
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before CONNECTED")
        if time.monotonic() - started > START_TIMEOUT:
            raise RuntimeError(f"no CONNECTED within {START_TIMEOUT}s")
        try:
            sock = socket.create_connection((HOST, port), timeout=START_TIMEOUT)
        except OSError:
            time.sleep(0.001)
            continue
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(CONNECT)
            frame = b""
            while b"\0" not in frame:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                frame += chunk
            at = time.monotonic() - started
            if frame.lstrip(b"\r\n").startswith(b"CONNECTED"):
                return at
            raise RuntimeError(f"CONNECT answered with {frame[:200]!r}")


# -- the cached backlog -----------------------------------------------------------------------


@dataclass
class Backlog:
    messages: int
    size: int
    global_max_size: str
    crash: bool
    fill_seconds: float
    fill_rate: float
    data_bytes: int
    page_files: int
    journal_bytes: int


def backlog_dir(cache: Path, messages: int, size: int, global_max_size: str, crash: bool) -> Path:
    return cache / f"{messages}x{size}-{global_max_size}{'-crash' if crash else ''}"


def _du(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())


def build_backlog(where: Path, args: argparse.Namespace) -> Backlog:
    """Fill a fresh data directory through a real broker of this tree; stop it."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    config = where / "pagemq.toml"
    config.write_text(broker_config(args.global_max_size, QUEUE))
    log = where / "fill.log"
    port = _free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen([PAGEMQ, *_serve_args(where / "data", config, port)],
                                cwd=where, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env={**os.environ, "PYTHONPATH": str(HERE)})
    try:
        _wait_log(log, re.compile(rb"\bready\b"), proc, START_TIMEOUT)
        print(f"filling {args.messages:,} x {args.size} B into {where} ...", flush=True)
        started = time.monotonic()
        done = subprocess.run(
            [PAGEMQ, "perf", "--url", f"stomp://{HOST}:{port}", "--destination", f"/queue/{QUEUE}",
             "--phase", "produce", "--producers", str(args.producers), "--count", str(args.messages),
             "--size", str(args.size), "--persistent", "--json"],
            cwd=HERE, capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONPATH": str(HERE)},
        )
        seconds = time.monotonic() - started
        result = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
        if done.returncode != 0 or not result.get("complete"):
            raise RuntimeError(f"fill incomplete ({done.returncode}): {result.get('error')}\n"
                               f"{done.stderr[-2000:]}")
    finally:
        _stop(proc, signal.SIGKILL if args.crash else signal.SIGTERM)
    data = where / "data"
    backlog = Backlog(
        args.messages, args.size, args.global_max_size, args.crash, round(seconds, 1),
        round(args.messages / seconds), _du(data), sum(1 for _ in data.glob("paging/*/*.page")),
        _du(data / "journal"),
    )
    (where / "backlog.json").write_text(json.dumps(asdict(backlog)))
    return backlog


def cached_backlog(args: argparse.Namespace) -> tuple[Path, Backlog]:
    where = backlog_dir(args.cache, args.messages, args.size, args.global_max_size, args.crash)
    marker = where / "backlog.json"
    if marker.exists() and not args.rebuild:
        return where, Backlog(**json.loads(marker.read_text()))
    return where, build_backlog(where, args)


def snapshot(data: Path, into: Path) -> None:
    """A private copy of a data directory: page files hard-linked, everything else copied
    (the journal is rewritten by the start-up's cleanup; the lock file is per copy)."""
    for root, _dirs, files in os.walk(data):
        target = into / Path(root).relative_to(data)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            source = Path(root) / name
            if name.endswith(".page"):
                os.link(source, target / name)
            elif name != "server.lock":
                shutil.copy2(source, target / name)


# -- runs -------------------------------------------------------------------------------------


@dataclass
class Run:
    connected_s: float
    cpu_s: float
    rss_connected: int
    rss_settled: int
    recovered: int
    ready_s: float  # its `ready` line's figure: BrokerServer.start to every listener up


@contextlib.contextmanager
def restarted(where: Path, tree: Path, cache: Path | None, *, profile_to: Path | None = None,
              profiled_main: str = PROFILED_MAIN) -> Iterator[tuple[subprocess.Popen[bytes], float, Path]]:
    """A broker of `tree` started on a fresh copy of `where/data`: (process, seconds from
    spawn to CONNECTED, its log); stopped and its copy removed afterwards. With `profile_to`,
    it runs under `profiled_main` (see `dump_profile`)."""
    work = Path(tempfile.mkdtemp(prefix="run-", dir=where))
    try:
        snapshot(where / "data", work / "data")
        log = work / "broker.log"
        port = _free_port()
        argv = _serve_args(work / "data", where / "pagemq.toml", port)
        command = ([PYTHON, "-c", profiled_main, str(profile_to), *argv] if profile_to is not None
                   else [PAGEMQ, *argv])
        env = broker_env(tree, cache)
        with log.open("ab") as out:
            started = time.monotonic()
            proc = subprocess.Popen(command, cwd=work, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=out, env=env)
        try:
            yield proc, connected_after(port, started, proc), log
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def dump_profile(proc: subprocess.Popen[bytes], profile_to: Path) -> None:
    """Have a broker started with `profile_to` write its profile now; wait for the file."""
    proc.send_signal(signal.SIGUSR1)
    while not profile_to.exists():
        time.sleep(0.05)


def start_once(where: Path, tree: Path, cache: Path | None, *, profile_to: Path | None = None) -> Run:
    with restarted(where, tree, cache, profile_to=profile_to) as (proc, connected, log):
        cpu = cpu_seconds(proc.pid)
        rss_connected = process_rss(proc.pid)
        if profile_to is not None:
            dump_profile(proc, profile_to)
        ready = _wait_log(log, READY, proc, START_TIMEOUT)
        time.sleep(1.0)
        return Run(round(connected, 3), round(cpu, 2), rss_connected, process_rss(proc.pid),
                   int(ready.group(1)), float(ready.group(2)))


def print_profile(path: Path, top: int) -> None:
    import pstats

    for key in ("cumulative", "tottime"):
        print(f"\n-- profile of one start-up to CONNECTED, top {top} by {key} --")
        stats = pstats.Stats(str(path))
        stats.sort_stats(key).print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=_count, default=2_000_000, help="backlog (2M, 10M, ...)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--global-max-size", default="64MiB")
    parser.add_argument("--producers", type=int, default=4, help="fill connections")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "pagemq-restart-bench",
                        help="where filled data directories are kept between invocations")
    parser.add_argument("--rebuild", action="store_true", help="fill again even if cached")
    parser.add_argument("--crash", action="store_true", help="SIGKILL the filling broker (no clean stop)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", type=Path, default=HERE, help="source tree whose broker is started")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="compile the tree's sources at every start (PYTHONDONTWRITEBYTECODE, no "
                             "cache), as an editable install run that way does")
    parser.add_argument("--profile", action="store_true", help="one more start-up under cProfile")
    parser.add_argument("--top", type=int, default=30, help="profile entries shown")
    parser.add_argument("--delete", action="store_true", help="delete the filled data directory at the end")
    parser.add_argument("--json", action="store_true", help="one JSON line at the end")
    args = parser.parse_args()
    where, backlog = cached_backlog(args)
    print(f"backlog: {backlog.messages:,} x {backlog.size} B, global-max-size {backlog.global_max_size}, "
          f"{backlog.page_files} page files, data {backlog.data_bytes / 1e9:.2f} GB, journal "
          f"{format_mib(backlog.journal_bytes)}; filled at {backlog.fill_rate:,} msg/s")
    tree = args.tree.resolve()
    print(f"tree: {tree}")
    runs: list[Run] = []
    bytecode = None if args.no_bytecode_cache else args.cache
    warm_bytecode(tree, bytecode)
    try:
        for number in range(1, args.runs + 1):
            run = start_once(where, tree, bytecode)
            runs.append(run)
            print(f"run {number}: CONNECTED after {run.connected_s:.3f} s (CPU {run.cpu_s:.2f} s), "
                  f"RSS {format_mib(run.rss_connected)}"
                  f" (a second later {format_mib(run.rss_settled)}), recovered {run.recovered:,}"
                  f" ({run.ready_s:.2f} s from start() to `ready`)", flush=True)
        if runs:
            print(f"median of {len(runs)}: CONNECTED after "
                  f"{statistics.median(r.connected_s for r in runs):.3f} s (CPU "
                  f"{statistics.median(r.cpu_s for r in runs):.2f} s), RSS "
                  f"{format_mib(int(statistics.median(r.rss_connected for r in runs)))} at CONNECTED, "
                  f"{format_mib(int(statistics.median(r.rss_settled for r in runs)))} a second later")
        if args.profile:
            with tempfile.TemporaryDirectory() as scratch:
                path = Path(scratch) / "start.prof"
                run = start_once(where, tree, bytecode, profile_to=path)
                print(f"profiled run: CONNECTED after {run.connected_s:.3f} s (under cProfile)")
                print_profile(path, args.top)
        if args.json:
            print(json.dumps({"backlog": asdict(backlog), "tree": str(tree),
                              "runs": [asdict(r) for r in runs]}))
    finally:
        if args.delete:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()

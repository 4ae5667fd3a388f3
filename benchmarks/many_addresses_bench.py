"""Many paging addresses: how long creating them takes, and a restart to STOMP CONNECTED.

    .venv/bin/python benchmarks/many_addresses_bench.py [--addresses 7000] [--messages 3]
        [--runs 3] [--tree OTHER_TREE] [--crash] [--profile] [--keep DIR [--reuse]]

Per-tenant queues: N anycast addresses `tenant.<i>` (auto-created by their first SEND), each
in page mode from its first message (`address-settings."tenant.#"` with `max-size-bytes 0`),
each given `--messages` persistent 256-byte messages, every one receipted (so every address
has a page folder, a page file and a page writer's work behind it).

1. Create: a broker of `--tree` (default this checkout) on a fresh data directory; one STOMP
   connection sends every message with a receipt, a window of 1,000 receipts outstanding.
   Reported: seconds from the first SEND to the last RECEIPT (each address's first message
   creates its address, queue and page folder), the broker's thread count and RSS then.
2. Stop: SIGTERM (`--crash`: SIGKILL, so every address's live page has no summary and is
   scanned at the next start).
3. R restarts on copies of that data directory (page files hard-linked, as restart_bench.py
   does): seconds from just before the process is spawned to a CONNECTED frame, the CPU
   seconds the broker had used by then, its threads and RSS then and a second later, and its
   `ready` line's recovered count (must be addresses x messages).
4. `--profile`: one more restart under cProfile (restart_bench.PROFILED_MAIN, timed in CPU
   seconds of the broker process).

`--keep DIR` keeps the filled data directory; `--reuse` then skips step 1 and 2 and restarts
the broker of `--tree` on what an earlier run filled (so two trees restart the same data).

A broker with one thread per paging address shows it in the thread count (7,000 addresses:
7,000 threads); the target is CONNECTED in <= 2 s with 7,000 paging addresses and a thread
count that does not grow with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from restart_bench import (
    HOST,
    PAGEMQ,
    READY,
    START_TIMEOUT,
    _free_port,
    _serve_args,
    _stop,
    _wait_log,
    broker_env,
    connected_after,
    cpu_seconds,
    dump_profile,
    print_profile,
    restarted,
    warm_bytecode,
)
from restart_bench import PROFILED_MAIN as PROFILED_MAIN_WALL
from rss import format_mib, process_rss

HERE = Path(__file__).resolve().parents[1]
# restart_bench.PROFILED_MAIN with CPU time as the clock: on a shared machine, wall-clock
# profiles mostly show who else had the CPU.
PROFILED_MAIN = (PROFILED_MAIN_WALL
                 .replace("cProfile.Profile()", "cProfile.Profile(time.process_time)")
                 .replace("import cProfile, os, signal, sys", "import cProfile, os, signal, sys, time"))
WINDOW = 1_000
CONFIG = """\
[broker]
global-max-size = "256MiB"

[address-settings."tenant.#"]
max-size-bytes = 0
address-full-policy = "PAGE"
page-size-bytes = "1MiB"
"""


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def _frames(sock: socket.socket, buffer: bytearray) -> list[bytes]:
    """Read at least one whole frame; the complete frames (NUL-terminated) read so far."""
    while b"\0" not in buffer:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("broker closed the connection")
        buffer += chunk
    *frames, rest = bytes(buffer).split(b"\0")
    buffer[:] = rest.encode() if isinstance(rest, str) else rest
    return [frame.lstrip(b"\r\n") for frame in frames]


def fill(port: int, addresses: int, messages: int) -> float:
    """Every message receipted; seconds from the first SEND to the last RECEIPT."""
    body = b"x" * 256
    with socket.create_connection((HOST, port), timeout=600) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = bytearray()
        sock.sendall(f"CONNECT\naccept-version:1.2\nhost:{HOST}\nheart-beat:0,0\n\n\0".encode())
        if not _frames(sock, buffer)[0].startswith(b"CONNECTED"):
            raise RuntimeError("no CONNECTED")
        started = time.monotonic()
        outstanding = 0
        total = addresses * messages
        sent = 0
        pending = bytearray()
        while sent < total or outstanding:
            while sent < total and outstanding < WINDOW:
                tenant = sent // messages
                pending += (f"SEND\ndestination:/queue/tenant.{tenant}\npersistent:true\n"
                            f"receipt:{sent}\ncontent-length:{len(body)}\n\n").encode() + body + b"\0"
                sent += 1
                outstanding += 1
            if pending:
                sock.sendall(pending)
                pending.clear()
            for frame in _frames(sock, buffer):
                if frame.startswith(b"RECEIPT"):
                    outstanding -= 1
                elif frame:
                    raise RuntimeError(f"broker answered {frame[:300]!r}")
        return time.monotonic() - started


@dataclass
class Created:
    seconds: float
    threads: int
    rss: int


def create(where: Path, args: argparse.Namespace, tree: Path) -> Created:
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    (where / "pagemq.toml").write_text(CONFIG)
    log = where / "fill.log"
    port = _free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen([PAGEMQ, *_serve_args(where / "data", where / "pagemq.toml", port)],
                                cwd=where, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env=broker_env(tree, args.cache))
    try:
        connected_after(port, time.monotonic(), proc)
        seconds = fill(port, args.addresses, args.messages)
        return Created(seconds, threads_of(proc.pid), process_rss(proc.pid))
    finally:
        _stop(proc, signal.SIGKILL if args.crash else signal.SIGTERM)


@dataclass
class Run:
    connected_s: float
    cpu_s: float
    threads: int
    threads_settled: int
    rss: int
    rss_settled: int
    recovered: int


def restart(where: Path, tree: Path, cache: Path, profile_to: Path | None = None) -> Run:
    with restarted(where, tree, cache, profile_to=profile_to, profiled_main=PROFILED_MAIN) as (
            proc, connected, log):
        cpu, threads, rss = cpu_seconds(proc.pid), threads_of(proc.pid), process_rss(proc.pid)
        if profile_to is not None:
            dump_profile(proc, profile_to)
        ready = _wait_log(log, READY, proc, START_TIMEOUT)
        time.sleep(1.0)
        return Run(round(connected, 3), round(cpu, 2), threads, threads_of(proc.pid), rss,
                   process_rss(proc.pid), int(ready.group(1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", type=int, default=7_000)
    parser.add_argument("--messages", type=int, default=3, help="paged messages per address")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=HERE, help="source tree whose broker is run")
    parser.add_argument("--crash", action="store_true", help="SIGKILL after the fill, not SIGTERM")
    parser.add_argument("--profile", action="store_true", help="one more restart under cProfile")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--keep", type=Path, default=None,
                        help="work directory to keep (default: a temporary one, removed)")
    parser.add_argument("--reuse", action="store_true",
                        help="restart on the data directory an earlier run left in --keep")
    args = parser.parse_args()
    tree = args.tree.resolve()
    base = args.keep or Path(tempfile.mkdtemp(prefix="pagemq-many-addresses-"))
    args.cache = base / "pycache-root"
    warm_bytecode(tree, args.cache)
    where = base / "filled"
    try:
        print(f"tree: {tree}; {args.addresses:,} paging addresses x {args.messages} messages", flush=True)
        if args.reuse and (where / "data").is_dir():
            print(f"reusing {where / 'data'}", flush=True)
        else:
            made = create(where, args, tree)
            print(f"create: {made.seconds:.2f} s ({args.addresses / made.seconds:,.0f} addresses/s), "
                  f"{made.threads} threads, RSS {format_mib(made.rss)}", flush=True)
        runs: list[Run] = []
        for number in range(1, args.runs + 1):
            run = restart(where, tree, args.cache)
            runs.append(run)
            print(f"restart {number}: CONNECTED after {run.connected_s:.3f} s (CPU {run.cpu_s:.2f} s), "
                  f"{run.threads} threads ({run.threads_settled} a second later), RSS "
                  f"{format_mib(run.rss)} ({format_mib(run.rss_settled)}), recovered {run.recovered:,}",
                  flush=True)
            if run.recovered != args.addresses * args.messages:
                print(f"  !! expected {args.addresses * args.messages:,} recovered", flush=True)
        if runs:
            print(f"median of {len(runs)}: CONNECTED after "
                  f"{statistics.median(r.connected_s for r in runs):.3f} s, "
                  f"max threads {max(max(r.threads, r.threads_settled) for r in runs)}")
        if args.profile:
            path = base / "start.prof"
            run = restart(where, tree, args.cache, profile_to=path)
            print(f"profiled restart: CONNECTED after {run.connected_s:.3f} s (under cProfile)")
            print_profile(path, args.top)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

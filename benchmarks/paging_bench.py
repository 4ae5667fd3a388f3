"""The paging issue's figures on this machine: deep-queue fill and drain under a 64 MiB budget.

    .venv/bin/python benchmarks/paging_bench.py [--messages 200000] [--size 1024]
        [--producers 4] [--consumers 4] [--baseline-messages 50000] [--keep] [--dir DIR]
        [--json] [--json-out FILE] [--compare OTHER_RUN.json] [--no-restart]
        [--fill-trials N] [--trial-messages M]

What it does, one broker (`pagemq serve`) per run, 1 KiB persistent messages, journal-sync:
1. baseline: a broker whose global-max-size is huge (nothing pages) takes
   `--baseline-messages` with no consumer, then they are drained;
2. paging: a fresh broker with global-max-size 64 MiB and one anycast queue takes
   `--messages` with no consumer (fill), is restarted with that backlog after SIGTERM and
   again after SIGKILL (time from process start until the STOMP port accepts), then the
   queue is drained; then the page files are counted and the data directory measured
   against its size right after the first start;
3. with `--fill-trials N`: N pairs of fills, with and without paging, alternating on fresh
   brokers; the fill-ratio target compares the medians (one fill of each is not a fair ratio
   on a VM whose speed drifts from minute to minute).
Producers: separate processes, one connection each, up to 1,000 unreceipted SENDs in flight
(receipts pipelined). Consumers: separate processes, client-individual ACK of every message,
prefetch 1,000. The broker's RSS (its whole process tree) is sampled every 100 ms in each
phase; the peak is reported. The load comes from `pagemq perf --phase produce|consume`
when it is installed (`--client auto`, the default), else from this file's own lean
multi-process asyncio STOMP client (`--client own`, no stomp.py).

Targets (PASS/FAIL lines): peak RSS < 160 MiB in fill and drain; the same peak (within
10 %) as a run with another message count (`--compare` its `--json` output); fill while
paging >= 80 % of fill without paging; drain >= 20,000 msg/s; restart with the backlog
ready < 3 s; no page file after the drain and the data directory back to its empty size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rss import RssSampler, format_mib

HOST = "127.0.0.1"
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
QUEUE = "paging-bench"
MIB = 1 << 20
WINDOW = 1000  # unreceipted SENDs per producer connection
PREFETCH = 1000
STALL_SECONDS = 60.0  # a phase with no progress for this long is reported incomplete

RSS_LIMIT = 160 * MIB
RSS_SAME = 0.10
FILL_RATIO = 0.80
DRAIN_RATE = 20_000
READY_LIMIT = 3.0


# -- the broker process ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def broker_config(global_max_size: str, queue: str = QUEUE) -> str:
    return (
        "[broker]\n"
        f'global-max-size = "{global_max_size}"\n'
        "journal-sync = true\n\n"
        "[[addresses]]\n"
        f'name = "{queue}"\n'
        'routing-type = "anycast"\n'
    )


class Broker:
    """`pagemq serve` on free ports; restartable on the same data directory."""

    def __init__(self, workdir: Path, config: str) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.config_path = workdir / "pagemq.toml"
        self.config_path.write_text(config)
        self.log_path = workdir / "broker.log"
        self.stomp_port, self.http_port = _free_port(), _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 300.0) -> float:
        """Start; seconds from process start until the STOMP port accepts connections."""
        log = self.log_path.open("ab")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [PAGEMQ, "serve", "--data-dir", str(self.data_dir), "--config", str(self.config_path),
             "--stomp", f"{HOST}:{self.stomp_port}", "--http", f"{HOST}:{self.http_port}"],
            cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )
        log.close()
        while True:
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.stomp_port), 0.5):
                ready = time.monotonic() - started
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"broker not accepting after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.002)
        self._wait_http(timeout)
        return ready

    def _wait_http(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.http(f"/api/queues/{QUEUE}")
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"HTTP not answering:\n{self.log_tail()}")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 300.0) -> float:
        """Signal and wait; seconds until the process is gone."""
        assert self.proc is not None
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout)
        return time.monotonic() - started

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def http(self, path: str) -> Any:
        url = f"http://{HOST}:{self.http_port}{path}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def queue(self) -> dict[str, Any]:
        return self.http(f"/api/queues/{QUEUE}")

    def address(self) -> dict[str, Any]:
        return self.http(f"/api/addresses/{QUEUE}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


# -- disk -------------------------------------------------------------------------------------


def disk_usage(path: Path) -> int:
    """Bytes allocated on disk under `path` (as `du`), counting each inode once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in (*files, "."):
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(os.path.join(root, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def page_file_count(data_dir: Path) -> int:
    return sum(1 for _ in (data_dir / "paging").glob("*/*.page"))


# -- the STOMP client (runs in worker processes) ------------------------------------------------


def _header(head: bytes, name: bytes) -> bytes | None:
    key = b"\n" + name + b":"
    start = head.find(key)
    if start < 0:
        return None
    start += len(key)
    end = head.find(b"\n", start)
    return head[start:] if end < 0 else head[start:end]


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 22)
    writer.write(b"CONNECT\naccept-version:1.2\nhost:127.0.0.1\n\n\x00")
    frame = await reader.readuntil(b"\x00")
    if not frame.lstrip(b"\r\n").startswith(b"CONNECTED"):
        raise ConnectionError(f"no CONNECTED: {frame[:300]!r}")
    return reader, writer


async def _go(go: Any) -> None:
    while not go.is_set():
        await asyncio.sleep(0.001)


async def _produce(port: int, count: int, size: int, ready: Any, go: Any, counter: Any) -> None:
    reader, writer = await _connect(port)
    with ready.get_lock():
        ready.value += 1
    await _go(go)
    body = b"x" * size
    head = f"SEND\ndestination:/queue/{QUEUE}\npersistent:true\ncontent-length:{size}\nreceipt:".encode()
    state = {"received": 0}
    room = asyncio.Event()

    async def read_receipts() -> None:
        while state["received"] < count:
            data = await reader.read(1 << 16)
            if not data or b"ERROR" in data:
                raise ConnectionError(f"producer: connection lost or ERROR: {data[:300]!r}")
            got = data.count(b"\x00")
            state["received"] += got
            with counter.get_lock():
                counter.value += got
            room.set()

    receipts = asyncio.create_task(read_receipts())
    sent = 0
    while sent < count:
        while sent - state["received"] >= WINDOW:
            room.clear()
            await room.wait()
        batch = min(count - sent, WINDOW - (sent - state["received"]), 100)
        writer.write(b"".join(head + b"%d\n\n" % n + body + b"\x00" for n in range(sent, sent + batch)))
        sent += batch
        await writer.drain()
        if receipts.done():
            receipts.result()
    await receipts
    writer.close()


def _parse_messages(buf: bytearray) -> tuple[list[bytes], int]:
    """ACK frames for the complete MESSAGE frames at the start of `buf`; bytes consumed."""
    acks: list[bytes] = []
    pos = 0
    while True:
        while pos < len(buf) and buf[pos] in (10, 13):
            pos += 1
        head_end = buf.find(b"\n\n", pos)
        if head_end < 0:
            return acks, pos
        head = bytes(buf[pos:head_end])
        if not head.startswith(b"MESSAGE"):
            raise ConnectionError(f"consumer: unexpected frame {head[:300]!r}")
        length = _header(head, b"content-length")
        if length is not None:
            end = head_end + 2 + int(length)
            if len(buf) <= end:
                return acks, pos
        else:
            end = buf.find(b"\x00", head_end + 2)
            if end < 0:
                return acks, pos
        acks.append(b"ACK\nid:" + (_header(head, b"ack") or b"") + b"\n\n\x00")
        pos = end + 1


async def _consume(port: int, ready: Any, go: Any, stop: Any, counter: Any) -> None:
    reader, writer = await _connect(port)
    with ready.get_lock():
        ready.value += 1
    await _go(go)
    writer.write(f"SUBSCRIBE\nid:0\ndestination:/queue/{QUEUE}\nack:client-individual\n"
                 f"activemq.prefetchSize:{PREFETCH}\n\n\x00".encode())
    buf = bytearray()
    while not stop.is_set():
        try:
            data = await asyncio.wait_for(reader.read(1 << 18), 0.2)
        except TimeoutError:
            continue
        if not data:
            raise ConnectionError("consumer: connection lost")
        buf += data
        acks, used = _parse_messages(buf)
        del buf[:used]
        if acks:
            writer.write(b"".join(acks))
            with counter.get_lock():
                counter.value += len(acks)
    writer.write(b"DISCONNECT\nreceipt:bye\n\n\x00")  # answered once every ACK before it is done
    with contextlib.suppress(TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        while b"receipt-id:bye" not in await asyncio.wait_for(reader.readuntil(b"\x00"), 60):
            pass
    writer.close()


def _worker(role: str, port: int, count: int, size: int, ready: Any, go: Any, stop: Any,
            counter: Any) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    if role == "producer":
        asyncio.run(_produce(port, count, size, ready, go, counter))
    else:
        asyncio.run(_consume(port, ready, go, stop, counter))


# -- phases ----------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    messages: int
    seconds: float
    peak_rss: int
    complete: bool = True
    broker_cpu: float = 0.0  # CPU seconds the broker used in the phase (all its threads)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


def _split(total: int, parts: int) -> list[int]:
    share, extra = divmod(total, parts)
    return [share + (1 if n < extra else 0) for n in range(parts)]


def run_phase(broker: Broker, name: str, role: str, connections: int, target: int, size: int,
              client: str = "own") -> Phase:
    """One timed phase, with `pagemq perf` or this file's own client."""
    if client == "perf":
        return run_phase_perf(broker, name, role, connections, target, size)
    return run_phase_own(broker, name, role, connections, target, size)


def perf_available() -> bool:
    result = subprocess.run([PAGEMQ, "perf", "--help"], capture_output=True, text=True, check=False)
    return result.returncode == 0 and "--phase" in result.stdout and "--json" in result.stdout


def run_phase_perf(broker: Broker, name: str, role: str, connections: int, target: int,
                   size: int) -> Phase:
    """`pagemq perf --phase produce|consume --json`, the broker's RSS sampled meanwhile."""
    who = ["--producers", str(connections)] if role == "producer" else ["--consumers", str(connections)]
    command = [
        PAGEMQ, "perf", "--url", f"stomp://{HOST}:{broker.stomp_port}", "--destination", f"/queue/{QUEUE}",
        *who, "--processes", str(connections), "--phase", "produce" if role == "producer" else "consume",
        "--count", str(target), "--size", str(size), "--persistent", "--receipt-window", str(WINDOW),
        "--ack", "client-individual", "--prefetch", str(PREFETCH),
        "--idle-timeout", f"{STALL_SECONDS:.0f}s", "--json",
    ]
    cpu_before = cpu_seconds(broker.pid)
    with RssSampler(broker.pid, interval=0.1) as sampler:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    cpu = cpu_seconds(broker.pid) - cpu_before
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
        result = report["results"][0]
    except (ValueError, IndexError, KeyError):
        raise RuntimeError(
            f"{name}: pagemq perf failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        ) from None
    if result.get("errors"):
        print(f"  {name}: pagemq perf errors: {result['errors'][:5]}", file=sys.stderr)
    complete = bool(result["complete"]) and result["messages"] >= target
    return Phase(name, int(result["messages"]), float(result["seconds"]), sampler.peak, complete, cpu)


def run_phase_own(broker: Broker, name: str, role: str, connections: int, target: int, size: int,
                  progress: bool = True) -> Phase:
    """Producers (each its share of `target`) or consumers (until `target` consumed in all)."""
    ctx = mp.get_context("spawn")
    ready, counter = ctx.Value("i", 0), ctx.Value("q", 0)
    go, stop = ctx.Event(), ctx.Event()
    shares = _split(target, connections) if role == "producer" else [0] * connections
    procs = [
        ctx.Process(target=_worker, daemon=True,
                    args=(role, broker.stomp_port, share, size, ready, go, stop, counter))
        for share in shares
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + 60
    while ready.value < connections:
        if time.monotonic() > deadline or any(p.exitcode not in (None, 0) for p in procs):
            raise RuntimeError(f"{name}: clients did not connect ({ready.value}/{connections})")
        time.sleep(0.01)
    complete = True
    cpu_before = cpu_seconds(broker.pid)
    with RssSampler(broker.pid, interval=0.1) as sampler:
        started = last_change = last_report = time.monotonic()
        go.set()
        seen = 0
        while (done := counter.value) < target:
            now = time.monotonic()
            if done != seen:
                seen, last_change = done, now
            if now - last_change > STALL_SECONDS or all(p.exitcode is not None for p in procs):
                complete = False
                break
            if progress and now - last_report >= 10:
                last_report = now
                print(f"  {name}: {done:,}/{target:,} ({done / (now - started):,.0f} msg/s, "
                      f"RSS {format_mib(sampler.last)})", file=sys.stderr)
            time.sleep(0.01)
        seconds = time.monotonic() - started
    stop.set()
    for proc in procs:
        proc.join(90)
        if proc.is_alive():
            proc.kill()
    failed = [p.exitcode for p in procs if p.exitcode not in (0, None)]
    if failed:
        complete = False
        print(f"  {name}: client processes failed with exit codes {failed}", file=sys.stderr)
    cpu = cpu_seconds(broker.pid) - cpu_before
    return Phase(name, counter.value if not complete else target, seconds, sampler.peak, complete, cpu)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/PID/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(predicate: Any, timeout: float, interval: float = 0.1) -> tuple[bool, float]:
    """(predicate became true, seconds waited), polling every `interval`."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            return False, time.monotonic() - started
        time.sleep(interval)
    return True, time.monotonic() - started


# -- the runs --------------------------------------------------------------------------------


@dataclass
class Results:
    messages: int
    size: int
    producers: int
    consumers: int
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, phase: Phase) -> Phase:
        self.phases[phase.name] = {**asdict(phase), "rate": phase.rate}
        return phase


def run_baseline(args: argparse.Namespace, root: Path, results: Results) -> None:
    workdir = root / "baseline"
    workdir.mkdir(parents=True, exist_ok=True)
    broker = Broker(workdir, broker_config("16GiB"))
    try:
        broker.start()
        count = args.baseline_messages
        results.add(run_phase(broker, "fill without paging", "producer", args.producers, count, args.size,
                              args.client))
        info = broker.address()
        results.facts["baseline_paged"] = info["messages_paged"]
        results.add(run_phase(broker, "drain without paging", "consumer", args.consumers, count, args.size,
                              args.client))
        broker.stop()
    finally:
        broker.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def run_fill_trials(args: argparse.Namespace, root: Path, results: Results) -> None:
    """Fills with and without paging, alternating (order swapped each trial), each on a
    fresh broker: on a shared VM whose speed drifts by tens of percent from minute to
    minute, one fill of each is not a fair ratio; the medians of interleaved ones are."""
    rates: dict[str, list[float]] = {"without": [], "paging": []}
    for trial in range(args.fill_trials):
        order = ["without", "paging"] if trial % 2 == 0 else ["paging", "without"]
        for kind in order:
            workdir = root / f"trial-{trial}-{kind}"
            workdir.mkdir(parents=True, exist_ok=True)
            broker = Broker(workdir, broker_config("16GiB" if kind == "without" else "64MiB"))
            try:
                broker.start()
                phase = run_phase(broker, f"trial {trial + 1} fill {kind}", "producer", args.producers,
                                  args.trial_messages, args.size, args.client)
                broker.stop()
            finally:
                broker.kill()
                shutil.rmtree(workdir, ignore_errors=True)
            rates[kind].append(phase.rate if phase.complete else 0.0)
            print(f"  trial {trial + 1}: fill {kind}: {phase.rate:,.0f} msg/s", file=sys.stderr)
    results.facts["fill_trials"] = {"messages": args.trial_messages, **rates}


def _restart(broker: Broker, sig: int, label: str, results: Results) -> None:
    stopped = broker.stop(sig)
    ready = broker.start()
    queue = broker.queue()
    with RssSampler(broker.pid) as sampler:
        time.sleep(1.0)
    results.facts[f"restart_{label}"] = {
        "stop_seconds": stopped, "ready_seconds": ready, "messages_after": queue["messages"],
        "rss_after": sampler.peak,
    }
    print(f"  restart after {label}: ready in {ready:.2f} s, {queue['messages']:,} messages, "
          f"RSS {format_mib(sampler.peak)}", file=sys.stderr)


def run_paging(args: argparse.Namespace, root: Path, results: Results) -> None:
    workdir = root / "paging"
    workdir.mkdir(parents=True, exist_ok=True)
    broker = Broker(workdir, broker_config("64MiB"))
    try:
        results.facts["ready_empty_seconds"] = broker.start()
        empty = disk_usage(broker.data_dir)
        results.facts["du_empty"] = empty
        results.add(run_phase(broker, "fill while paging", "producer", args.producers, args.messages,
                              args.size, args.client))
        info = broker.address()
        results.facts["after_fill"] = {k: info[k] for k in ("paging", "messages", "messages_paged",
                                                           "messages_in_memory", "page_files")}
        results.facts["du_after_fill"] = disk_usage(broker.data_dir)
        if not args.no_restart:
            _restart(broker, signal.SIGTERM, "SIGTERM", results)
            _restart(broker, signal.SIGKILL, "SIGKILL", results)
        results.add(run_phase(broker, "drain paged", "consumer", args.consumers, args.messages, args.size,
                              args.client))
        _after_drain(args, broker, empty, results)
        broker.stop()
    finally:
        broker.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"data kept in {workdir}", file=sys.stderr)


def _after_drain(args: argparse.Namespace, broker: Broker, empty: int, results: Results) -> None:
    emptied, _ = wait_for(lambda: broker.queue()["messages"] == 0, 60)
    results.facts["queue_empty"] = emptied
    no_pages, page_wait = wait_for(lambda: page_file_count(broker.data_dir) == 0, args.cleanup_wait)
    results.facts["page_files_after_drain"] = page_file_count(broker.data_dir)
    results.facts["page_cleanup_seconds"] = page_wait if no_pages else None
    slack = max(MIB, empty // 20)
    shrunk, du_wait = wait_for(lambda: disk_usage(broker.data_dir) <= empty + slack, args.cleanup_wait, 0.5)
    results.facts["du_after_drain"] = disk_usage(broker.data_dir)
    results.facts["du_slack"] = slack
    results.facts["du_cleanup_seconds"] = du_wait if shrunk else None
    results.facts["files_after_drain"] = {
        str(path.relative_to(broker.data_dir)): path.stat().st_blocks * 512
        for path in sorted(broker.data_dir.rglob("*")) if path.is_file() and path.stat().st_blocks
    }


# -- report ----------------------------------------------------------------------------------


def _line(ok: bool | None, text: str) -> str:
    return f"{'n/a ' if ok is None else 'PASS' if ok else 'FAIL'}  {text}"


def targets(results: Results, compare: dict[str, Any] | None) -> list[str]:
    phases, facts = results.phases, results.facts
    fill, drain = phases["fill while paging"], phases["drain paged"]
    lines = [
        _line(fill["peak_rss"] < RSS_LIMIT,
              f"peak RSS while filling < 160 MiB: {format_mib(fill['peak_rss'])}"),
        _line(drain["peak_rss"] < RSS_LIMIT,
              f"peak RSS while draining < 160 MiB: {format_mib(drain['peak_rss'])}"),
    ]
    if compare is not None:
        for name in ("fill while paging", "drain paged"):
            mine, theirs = phases[name]["peak_rss"], compare["phases"][name]["peak_rss"]
            same = abs(mine - theirs) <= RSS_SAME * max(mine, theirs)
            lines.append(_line(same, f"peak RSS {name} within 10% of the {compare['messages']:,}-message "
                                     f"run: {format_mib(mine)} vs {format_mib(theirs)}"))
    else:
        lines.append(_line(None, "peak RSS the same for 200,000 and 2,000,000 messages (use --compare)"))
    base = phases.get("fill without paging")
    trials = facts.get("fill_trials")
    if trials:
        without, paging = statistics.median(trials["without"]), statistics.median(trials["paging"])
        ratio = paging / without if without else 0.0
        lines.append(_line(ratio >= FILL_RATIO,
                           f"fill while paging >= 80% of fill without paging (medians of "
                           f"{len(trials['paging'])} alternating {trials['messages']:,}-message fills each): "
                           f"{paging:,.0f} vs {without:,.0f} msg/s ({ratio:.0%})"))
    elif base is not None:
        ratio = fill["rate"] / base["rate"] if base["rate"] else 0.0
        lines.append(_line(ratio >= FILL_RATIO,
                           f"fill while paging >= 80% of fill without paging: "
                           f"{fill['rate']:,.0f} vs {base['rate']:,.0f} msg/s ({ratio:.0%})"))
    lines.append(_line(drain["rate"] >= DRAIN_RATE, f"drain >= 20,000 msg/s: {drain['rate']:,.0f} msg/s"))
    for label in ("SIGTERM", "SIGKILL"):
        restart = facts.get(f"restart_{label}")
        if restart is None:
            lines.append(_line(None, f"restart after {label}: skipped (--no-restart)"))
            continue
        ok = restart["ready_seconds"] < READY_LIMIT and restart["messages_after"] == results.messages
        lines.append(_line(ok, f"restart after {label} with {results.messages:,} queued: ready in "
                               f"{restart['ready_seconds']:.2f} s (< 3 s), {restart['messages_after']:,} "
                               f"messages after it"))
    lines.append(_line(facts["page_files_after_drain"] == 0,
                       f"page files after the drain: {facts['page_files_after_drain']}"))
    du_ok = facts["du_after_drain"] <= facts["du_empty"] + facts["du_slack"]
    lines.append(_line(du_ok, f"data dir back to its empty size: {format_mib(facts['du_after_drain'])} after "
                              f"the drain vs {format_mib(facts['du_empty'])} right after start "
                              f"(peak {format_mib(facts['du_after_fill'])} after the fill)"))
    lines.append(_line(all(p["complete"] for p in phases.values()), "every phase completed (no stall)"))
    return lines


def report(results: Results, compare: dict[str, Any] | None) -> str:
    out = [
        f"pagemq paging benchmark: {results.messages:,} x {results.size} B persistent messages, "
        f"{results.producers} producers, {results.consumers} consumers, global-max-size 64MiB, "
        f"journal-sync true, client {results.facts.get('client')}, commit {results.facts.get('commit')}",
        "",
        f"machine: {os.cpu_count()} CPUs, load average {results.facts.get('load_before')} before, "
        f"{results.facts.get('load_after')} after",
        "",
        f"{'phase':<24} {'messages':>11} {'seconds':>9} {'msg/s':>10} {'peak RSS':>12} {'broker CPU':>11}",
    ]
    for phase in results.phases.values():
        flag = "" if phase["complete"] else "  INCOMPLETE"
        busy = phase["broker_cpu"] / phase["seconds"] if phase["seconds"] else 0.0
        out.append(f"{phase['name']:<24} {phase['messages']:>11,} {phase['seconds']:>9.2f} "
                   f"{phase['rate']:>10,.0f} {format_mib(phase['peak_rss']):>12} {busy:>10.0%}{flag}")
    facts = results.facts
    after = facts.get("after_fill", {})
    out += ["", f"first start (empty data dir): ready in {facts.get('ready_empty_seconds', 0):.2f} s",
            f"after the fill: {after}"]
    for label in ("SIGTERM", "SIGKILL"):
        restart = facts.get(f"restart_{label}")
        if restart:
            out.append(f"restart after {label}: stop {restart['stop_seconds']:.2f} s, ready "
                       f"{restart['ready_seconds']:.2f} s, {restart['messages_after']:,} messages, "
                       f"RSS 1 s after start {format_mib(restart['rss_after'])}")
    cleanup = facts.get("page_cleanup_seconds")
    gone = f"gone after {cleanup:.1f} s" if cleanup is not None else "not all gone"
    out.append(f"page files after the drain: {facts.get('page_files_after_drain')} ({gone})")
    files = facts.get("files_after_drain", {})
    out.append("files left after the drain: " + (", ".join(
        f"{name} {format_mib(size)}" for name, size in files.items()) or "none"))
    out += ["", "targets:", *targets(results, compare)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--baseline-messages", type=int, default=50_000,
                        help="messages for the fill without paging (0 skips it)")
    parser.add_argument("--fill-trials", type=int, default=0,
                        help="also run this many alternating fills with and without paging on fresh "
                             "brokers; the fill-ratio target then compares their medians")
    parser.add_argument("--trial-messages", type=int, default=200_000,
                        help="messages per trial fill (--fill-trials)")
    parser.add_argument("--cleanup-wait", type=float, default=90.0,
                        help="seconds to wait for page files and disk space to go after the drain")
    parser.add_argument("--dir", type=Path, help="where data directories go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    parser.add_argument("--client", choices=["auto", "perf", "own"], default="auto",
                        help="load generator: `pagemq perf` or this file's own (auto: perf if installed)")
    parser.add_argument("--no-restart", action="store_true",
                        help="drain the broker that did the fill (no SIGTERM/SIGKILL restarts)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead")
    parser.add_argument("--json-out", type=Path, help="also write the JSON results to this file")
    parser.add_argument("--compare", type=Path, help="--json output of a run with another message count")
    args = parser.parse_args(argv)
    if args.client == "auto":
        args.client = "perf" if perf_available() else "own"
    root = Path(tempfile.mkdtemp(prefix="paging-bench-", dir=args.dir))
    results = Results(args.messages, args.size, args.producers, args.consumers)
    compare = json.loads(args.compare.read_text()) if args.compare else None
    results.facts["load_before"] = [round(x, 2) for x in os.getloadavg()]
    results.facts["client"] = "pagemq perf" if args.client == "perf" else "paging_bench's own"
    head = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    results.facts["commit"] = head or "unknown"
    try:
        if args.baseline_messages > 0:
            run_baseline(args, root, results)
        run_paging(args, root, results)
        if args.fill_trials > 0:
            run_fill_trials(args, root, results)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results.facts["load_after"] = [round(x, 2) for x in os.getloadavg()]
    document = json.dumps({**asdict(results), "targets": targets(results, compare)}, indent=2)
    if args.json_out:
        args.json_out.write_text(document + "\n")
    if args.json:
        print(document)
    else:
        print(report(results, compare))
    return 0


if __name__ == "__main__":
    sys.exit(main())

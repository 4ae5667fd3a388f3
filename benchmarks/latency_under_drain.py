"""End-to-end latency of a busy queue while another, deeply paged queue is being drained.

    .venv/bin/python benchmarks/latency_under_drain.py [--before TREE] [--fill 1000000]
        [--count 200000] [--global-max-size 64MiB] [--rounds 1] [--probe DIR]

The question (the event-loop issue): does draining a million paged messages (page reads,
journal cleanup of the acknowledgements, the per-second expiry scan) stall the event loop
that also serves everybody else? Per tree (this checkout, and `--before TREE` if given,
alternating over `--rounds`), on a fresh broker with a small `global-max-size`:

1. fill queue A with `--fill` persistent messages of `--size` bytes (no consumer: they go
   to page files; `pagemq perf --phase produce`, 4 producers);
2. start draining A (`pagemq perf --phase consume`, `--drainers` consumers, client-individual
   acks) and wait until acknowledgements flow;
3. meanwhile run `pagemq perf --phase both` on queue B: `--producers` + `--consumers`,
   `--count` persistent messages;
4. read, for the span of step 3 only: B's end-to-end latency (p50/p99/max; consumer clock
   at MESSAGE minus the send time) and send-receipt p99, A's drain rate (acknowledgements
   per second, from the HTTP API), and the event loop's lag (`GET /api/broker?since=`:
   maximum lateness of a 10 ms timer, stalls of 50 ms or more and how many of them the
   loop thread spent running rather than waiting for a CPU; "n/a" for a tree without that
   view).

A's drain must outlast B's run for the figures to mean what they say: a run where A ran
dry first says so. The load generator is this checkout's `pagemq perf` for both trees.
Use small figures to try it (`--fill 50000 --count 20000`); the full run takes a while
(filling a million 1 KiB messages is minutes on a small machine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ab_perf import HERE, PERF_ENV, free_port, perf_command, run_perf, start_broker

HOST = "127.0.0.1"
QUEUE_A = "drained-A"
QUEUE_B = "latency-B"


@dataclass
class Figures:
    fill_seconds: float
    b_p50_ms: float
    b_p99_ms: float
    b_max_ms: float
    b_receipt_p99_ms: float
    b_msgs_per_s: float
    a_drain_per_s: float
    a_left: int  # messages of A still there when B was done: 0 means A ran dry during B
    loop_lag_max_ms: float | None
    loop_stalls: int | None
    loop_busy_stalls: int | None  # of those, the loop thread itself ran >= 50 ms (not waiting for CPU)
    # B's messages in the broker not yet delivered (`messages`) and delivered but not yet
    # acknowledged (`messages_delivering`), medians of samples every 0.25 s over B's run:
    # where B's latency is spent (waiting for its consumers, or before the broker routed it).
    b_queued: float = 0.0
    b_delivering: float = 0.0

    def line(self) -> str:
        lag = ("n/a" if self.loop_lag_max_ms is None
               else f"{self.loop_lag_max_ms:.1f} ms, {self.loop_stalls} stalls >= 50 ms "
               f"({self.loop_busy_stalls} of them busy)")
        dry = "" if self.a_left else "  (A RAN DRY during the run: drain figures understate)"
        return (f"B end-to-end p50 {self.b_p50_ms:.1f} p99 {self.b_p99_ms:.1f} max {self.b_max_ms:.1f} ms, "
                f"send-receipt p99 {self.b_receipt_p99_ms:.1f} ms, {self.b_msgs_per_s:,.0f} msg/s; "
                f"A drain {self.a_drain_per_s:,.0f} msg/s; loop lag max {lag}; "
                f"B in the broker (median): {self.b_queued:,.0f} queued, {self.b_delivering:,.0f} "
                f"delivering; fill {self.fill_seconds:.0f} s{dry}")


def _get(http_port: int, path: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{http_port}{path}", timeout=10) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _queue(http_port: int, name: str) -> dict[str, Any]:
    info = _get(http_port, f"/api/queues/{name}")
    assert info is not None, f"no queue {name}"
    return info


def _config(workdir: Path, global_max_size: str) -> Path:
    path = workdir / "pagemq.toml"
    path.write_text(f'[broker]\nglobal-max-size = "{global_max_size}"\njournal-sync = true\n')
    return path


def _role(document: dict[str, Any], role: str) -> dict[str, Any]:
    return next(r for r in document["results"] if r["role"] == role)


def run_tree(tree: Path, args: argparse.Namespace) -> Figures:
    workdir = Path(tempfile.mkdtemp(prefix="latency-under-drain-"))
    port, http_port = free_port(), free_port()
    launcher: tuple[str, ...] = ()
    if args.probe is not None:  # the stalls' stacks and collections, written as the broker stops
        args.probe.mkdir(parents=True, exist_ok=True)
        report = args.probe / f"stalls-{tree.name}-{int(time.time())}.txt"
        probe = str(HERE / "benchmarks" / "stall_probe.py")
        launcher = (sys.executable, probe, "--report", str(report), "--trace", "--")
        print(f"  stall report: {report}")
    broker = start_broker(tree, workdir / "data", port, "--http", f"{HOST}:{http_port}",
                          "--config", str(_config(workdir, args.global_max_size)),
                          **({"launcher": launcher} if launcher else {}))
    drain: subprocess.Popen[bytes] | None = None
    size = ["--size", str(args.size)]
    try:
        started = time.monotonic()
        run_perf(port, f"/queue/{QUEUE_A}", ["--phase", "produce", "--producers", "4",
                                             "--count", str(args.fill), *size])
        fill_seconds = time.monotonic() - started
        if not _queue(http_port, QUEUE_A)["messages_paged"]:
            print(f"  note: nothing of A is paged; lower --global-max-size ({args.global_max_size})")
        drain = subprocess.Popen(
            perf_command(port, f"/queue/{QUEUE_A}", [
                "--phase", "consume", "--consumers", str(args.drainers), "--count", str(args.fill),
                "--idle-timeout", "120s", *size]),
            env=PERF_ENV, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)  # its own process group: its workers go with it
        deadline = time.monotonic() + 120
        while not _queue(http_port, QUEUE_A)["messages_acknowledged"]:
            if time.monotonic() > deadline or drain.poll() is not None:
                raise RuntimeError("the drain of A did not start")
            time.sleep(0.2)
        since = time.time()
        acked_before = _queue(http_port, QUEUE_A)["messages_acknowledged"]
        samples: list[tuple[int, int]] = []
        done = threading.Event()
        sampler = threading.Thread(target=_sample_b, args=(http_port, samples, done), daemon=True)
        sampler.start()
        try:
            document = run_perf(port, f"/queue/{QUEUE_B}", [
                "--phase", "both", "--producers", str(args.producers), "--consumers", str(args.consumers),
                "--count", str(args.count), "--persistent", *size])
        finally:
            done.set()
            sampler.join()
        seconds = time.time() - since
        a_after = _queue(http_port, QUEUE_A)
        broker_view = _get(http_port, f"/api/broker?since={since:.3f}")
        loop = broker_view.get("event_loop") if broker_view is not None else None
        consumers, producers = _role(document, "consumers"), _role(document, "producers")
        return Figures(
            fill_seconds=fill_seconds,
            b_p50_ms=consumers["latency_ms"]["p50"], b_p99_ms=consumers["latency_ms"]["p99"],
            b_max_ms=consumers["latency_ms"]["max"], b_receipt_p99_ms=producers["latency_ms"]["p99"],
            b_msgs_per_s=consumers["msgs_per_s"],
            a_drain_per_s=(a_after["messages_acknowledged"] - acked_before) / seconds,
            a_left=a_after["messages"],
            loop_lag_max_ms=None if loop is None else loop["lag_max_ms"],
            loop_stalls=None if loop is None else loop["stalls"],
            loop_busy_stalls=None if loop is None else loop["busy_stalls"],
            b_queued=statistics.median(q for q, _ in samples) if samples else 0.0,
            b_delivering=statistics.median(d for _, d in samples) if samples else 0.0,
        )
    finally:
        try:
            if drain is not None:
                _stop(drain)
        finally:
            broker.terminate()
            broker.wait(timeout=60)
            shutil.rmtree(workdir, ignore_errors=True)


def _sample_b(http_port: int, samples: list[tuple[int, int]], done: threading.Event) -> None:
    while not done.wait(0.25):
        with contextlib.suppress(OSError, AssertionError):
            info = _queue(http_port, QUEUE_B)
            samples.append((info["messages"], info["messages_delivering"]))


def _stop(drain: subprocess.Popen[bytes]) -> None:
    """End the drain of A (and its worker processes) if it is still going: SIGINT, as an
    interrupted `pagemq perf` expects, then SIGKILL."""
    if drain.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(drain.pid, signal.SIGINT)
        try:
            drain.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(drain.pid, signal.SIGKILL)
    drain.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another tree to run the same against")
    parser.add_argument("--rounds", type=int, default=1, help="runs per tree, alternating (default 1)")
    parser.add_argument("--fill", type=int, default=1_000_000, help="messages paged into A first")
    parser.add_argument("--count", type=int, default=200_000, help="messages through B")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--drainers", type=int, default=4, help="consumers draining A")
    parser.add_argument("--global-max-size", default="64MiB")
    parser.add_argument("--probe", type=Path, help="run the brokers under benchmarks/stall_probe.py, "
                        "reports into this folder")
    args = parser.parse_args()
    trees = {"after": HERE} | ({"before": args.before.resolve()} if args.before else {})
    runs: dict[str, list[Figures]] = {name: [] for name in trees}
    for round_no in range(args.rounds):
        order = sorted(trees, reverse=round_no % 2 == 0)  # before first in even rounds
        for name in order:
            figures = run_tree(trees[name], args)
            runs[name].append(figures)
            print(f"round {round_no + 1} {name:6}: {figures.line()}", flush=True)
    if args.rounds > 1:
        print()
        for name, figures in runs.items():
            print(f"{name:6} median B p99 {statistics.median(f.b_p99_ms for f in figures):.1f} ms, "
                  f"A drain {statistics.median(f.a_drain_per_s for f in figures):,.0f} msg/s")


if __name__ == "__main__":
    main()

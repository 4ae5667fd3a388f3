"""Two broker trees side by side: `pagemq perf` rates, alternating, on fresh brokers.

The machine's speed drifts by ±15-20 % from minute to minute, so one run of each tree says
little. This runs ROUNDS rounds; in each, both trees' brokers are started in turn (the order
alternates from round to round) on a fresh data directory and loaded by the same `pagemq
perf` client (this tree's), and per round the ratio after/before is taken, so slow minutes
hit both sides. Printed: each run, the medians, and the median of the per-round ratios;
`broker_cpu_s` is the CPU time the broker used for the run (lower is better), which moves
much less with the machine's load than the rates.

    git worktree add /tmp/before <rev>
    .venv/bin/python benchmarks/ab_perf.py --before /tmp/before --rounds 8 \
        -- --producers 4 --consumers 4 --count 200000 --phase sequential

Everything after `--` goes to `pagemq perf` (`--url`, `--destination` and `--json` are
set here). The "after" tree is this checkout.

A paged fill and drain, each phase its own `pagemq perf` run so that the broker's CPU is
told apart per phase (`produce_cpu_us`, `consume_cpu_us`: microseconds a message), on a
64 MiB budget as the paging benchmark's (`paging_bench.py`) flags:

    printf '[broker]\nglobal-max-size = "64MiB"\njournal-sync = true\n' > /tmp/paged.toml
    .venv/bin/python benchmarks/ab_perf.py --before /tmp/before --rounds 4 \
        --config /tmp/paged.toml --split -- --producers 4 --consumers 4 --processes 4 \
        --count 300000 --persistent --receipt-window 1000 --ack client-individual \
        --prefetch 1000 --phase sequential
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_broker(tree: Path, data: Path, port: int, *serve_args: str,
                 launcher: tuple[str, ...] = (PAGEMQ,)) -> subprocess.Popen[bytes]:
    """`pagemq serve` of `tree` on `data`, STOMP on `port`; returns once it logs ready.
    `serve_args`: more flags (`--http`, `--config`); without `--http`, a free port.
    `launcher`: what runs `pagemq` (e.g. benchmarks/stall_probe.py with its flags)."""
    if "--http" not in serve_args:
        serve_args = (*serve_args, "--http", f"127.0.0.1:{free_port()}")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        [*launcher, "serve", "--data-dir", str(data), "--stomp", f"127.0.0.1:{port}", *serve_args],
        env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    for line in proc.stderr:
        if re.search(rb"\bready\b", line):
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"broker of {tree} did not start")


def perf_command(port: int, destination: str, perf_args: list[str]) -> list[str]:
    """This tree's `pagemq perf` against the broker on `port`, one JSON line out."""
    return [PAGEMQ, "perf", "--url", f"stomp://127.0.0.1:{port}", "--destination", destination,
            "--json", *perf_args]


PERF_ENV = {**os.environ, "PYTHONPATH": str(HERE)}


def perf_document(stdout: bytes) -> dict[str, Any]:
    """The JSON line of a complete `pagemq perf --json` run (RuntimeError if incomplete)."""
    document: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    if not document["complete"]:
        raise RuntimeError(f"perf run incomplete: {document['error']}")
    return document


def run_perf(port: int, destination: str, perf_args: list[str]) -> dict[str, Any]:
    out = subprocess.run(perf_command(port, destination, perf_args), env=PERF_ENV, cwd=HERE,
                         capture_output=True, check=True, timeout=1800)
    return perf_document(out.stdout)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _phases(perf_args: list[str], split: bool) -> list[list[str]]:
    """The perf runs of one round: as given, or with `split` one per phase of a sequential run."""
    if not split:
        return [perf_args]
    if "--phase" in perf_args:
        at = perf_args.index("--phase")
        perf_args = perf_args[:at] + perf_args[at + 2:]
    return [[*perf_args, "--phase", phase] for phase in ("produce", "consume")]


def _run(tree: Path, perf_args: list[str], round_no: int, *, config: Path | None = None,
         split: bool = False) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(prefix="ab-perf-"))
    port = free_port()
    proc = start_broker(tree, data, port, *(["--config", str(config)] if config else []))
    try:
        rates: dict[str, float] = {}
        for args in _phases(perf_args, split):
            before = _cpu_seconds(proc.pid)
            document = run_perf(port, f"/queue/ab-{round_no}", ["--broker-pid", str(proc.pid), *args])
            spent = _cpu_seconds(proc.pid) - before
            for result in document["results"]:
                rates[f"{result['phase']}/{result['role']}"] = result["msgs_per_s"]
                peak = result["broker_peak_rss_mib"] or 0
                rates["peak_rss_mib"] = max(rates.get("peak_rss_mib", 0.0), peak)
                if split:
                    rates[f"{result['phase']}_cpu_us"] = 1e6 * spent / result["messages"]
        # CPU the broker used for the same work: moves far less with the machine's load than
        # a rate does (lower is better; start-up included)
        rates["broker_cpu_s"] = _cpu_seconds(proc.pid)
        return rates
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    argv = sys.argv[1:]
    perf_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the tree to compare against")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--config", type=Path, help="a broker config file both trees' brokers start with")
    parser.add_argument("--split", action="store_true",
                        help="run produce and consume as separate perf runs, each with its broker CPU")
    args = parser.parse_args(own)
    trees = {"before": args.before.resolve(), "after": HERE}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for round_no in range(args.rounds):
        order = ["before", "after"] if round_no % 2 == 0 else ["after", "before"]
        for name in order:
            rates = _run(trees[name], perf_args, round_no, config=args.config, split=args.split)
            runs[name].append(rates)
            shown = ", ".join(f"{k} {v:,.0f}" if v >= 100 else f"{k} {v:.2f}"
                              for k, v in sorted(rates.items()))
            print(f"round {round_no + 1} {name:6}: {shown}", flush=True)
    print()
    for key in sorted(runs["after"][0]):
        before = [r[key] for r in runs["before"]]
        after = [r[key] for r in runs["after"]]
        ratios = [a / b for a, b in zip(after, before, strict=True) if b]
        digits = 0 if statistics.median(before) >= 100 else 2
        print(f"{key:22} median before {statistics.median(before):>10,.{digits}f}  after "
              f"{statistics.median(after):>10,.{digits}f}  ratio of medians "
              f"{statistics.median(after) / statistics.median(before):6.1%}  median per-round "
              f"ratio {statistics.median(ratios):6.1%}")


if __name__ == "__main__":
    main()

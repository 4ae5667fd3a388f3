"""`make soak`: the model-based soak in one or more worker processes, with a summary at the end.

    python tests/model/soak.py [--programs N | --minutes M] [--workers W] [--base-seed B]
                               [--port-base P] [--shrink-seconds S]

Worker i (0 <= i < W) is a process of its own running model_driver.soak on the seeds
B+i, B+i+W, B+i+2W, ... (with --programs N, the ones below B+N: together exactly the seeds
B .. B+N-1, each run once), with its own data directories (under one temporary root) and its
own ports (P + 1000 i .. P + 1000 i + 999, below the kernel's ephemeral range). B defaults to
PAGEMQ_MODEL_BASE_SEED, else to a number drawn from the clock (printed).

The first failure stops every worker once its current program is over; the failing worker
shrinks the program (PAGEMQ_MODEL_SHRINK_SECONDS, default 600), saves the shrunk trace under
tests/model/failures/ and prints the report (seed, invariant, trace, how to replay). The
summary says how many programs ran, which seeds, and what failed; the exit code is 1 on a
failure. PAGEMQ_MODEL_SEED=N or PAGEMQ_MODEL_TRACE=FILE replays one program (one worker).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PORTS_PER_WORKER = 1000


def seed_ranges(seeds: list[int]) -> str:
    """[5, 6, 7, 9] -> '5-7, 9'."""
    parts: list[str] = []
    ordered = sorted(set(seeds))
    start = prev = None
    for seed in [*ordered, None]:
        if seed is not None and prev is not None and seed == prev + 1:
            prev = seed
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = seed
    return ", ".join(parts) or "none"


def worker() -> int:
    """One worker: everything comes in PAGEMQ_MODEL_* variables (model_driver.py)."""
    sys.path.insert(0, str(HERE.parent / "e2e"))
    from model_driver import soak

    # stomp.py warns when the harness drops a socket its reader thread has just closed
    # ("unable to issue SHUT_RDWR"); pytest keeps such lines out of sight, so does a worker.
    logging.getLogger("stomp.py").setLevel(logging.ERROR)

    minutes = os.environ.get("PAGEMQ_MODEL_MINUTES")
    summary = soak(Path(os.environ["PAGEMQ_MODEL_WORKDIR"]), default_count=None,
                   minutes=float(minutes) if minutes else None, shrink_budget=600)
    if summary.failure is not None:
        print(summary.failure["report"], flush=True)
        return 1
    return 0


def _relay(index: int, proc: subprocess.Popen[str], lock: threading.Lock) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        with lock:
            print(f"[w{index}] {line}", end="", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--programs", type=int, help="run this many programs in all")
    parser.add_argument("--minutes", type=float, default=60.0,
                        help="without --programs: each worker runs for this long (default 60)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--base-seed", type=int, default=None)
    parser.add_argument("--port-base", type=int, default=20000)
    parser.add_argument("--shrink-seconds", type=float, default=None)
    args = parser.parse_args(argv)
    if args.worker:
        return worker()

    replay = bool(os.environ.get("PAGEMQ_MODEL_SEED") or os.environ.get("PAGEMQ_MODEL_TRACE"))
    workers = 1 if replay else max(1, args.workers)
    base = args.base_seed
    if base is None:
        base = int(os.environ.get("PAGEMQ_MODEL_BASE_SEED", str(int(time.time() * 1000) % 1_000_000_000)))
    root = Path(tempfile.mkdtemp(prefix="pagemq-soak-"))
    if replay:
        what = (f"replay of PAGEMQ_MODEL_TRACE={os.environ['PAGEMQ_MODEL_TRACE']}"
                if os.environ.get("PAGEMQ_MODEL_TRACE")
                else f"replay of PAGEMQ_MODEL_SEED={os.environ['PAGEMQ_MODEL_SEED']}")
    else:
        what = (f"{args.programs} programs" if args.programs is not None else f"{args.minutes:g} minutes")
        what += f", {workers} worker(s), seeds from {base}"
    print(f"soak: {what}, work in {root}", flush=True)
    lock = threading.Lock()
    procs: list[tuple[int, subprocess.Popen[str], threading.Thread]] = []
    started = time.monotonic()
    for index in range(workers):
        count = len(range(index, args.programs, workers)) if args.programs is not None else None
        if count == 0:
            continue
        env = dict(os.environ)
        env.update({
            "PAGEMQ_MODEL_BASE_SEED": str(base + index),
            "PAGEMQ_MODEL_SEED_STRIDE": str(workers),
            "PAGEMQ_MODEL_PORTS": f"{args.port_base + PORTS_PER_WORKER * index}-"
                                  f"{args.port_base + PORTS_PER_WORKER * (index + 1) - 1}",
            "PAGEMQ_MODEL_STOP_FILE": str(root / "stop"),
            "PAGEMQ_MODEL_SUMMARY": str(root / f"summary-w{index}.json"),
            "PAGEMQ_MODEL_WORKDIR": str(root / f"w{index}"),
        })
        env.pop("PAGEMQ_MODEL_PROGRAMS" if count is None else "PAGEMQ_MODEL_MINUTES", None)
        if count is not None:
            env["PAGEMQ_MODEL_PROGRAMS"] = str(count)
        else:
            env["PAGEMQ_MODEL_MINUTES"] = str(args.minutes)
        if args.shrink_seconds is not None:
            env["PAGEMQ_MODEL_SHRINK_SECONDS"] = str(args.shrink_seconds)
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        relay = threading.Thread(target=_relay, args=(index, proc, lock), daemon=True)
        relay.start()
        procs.append((index, proc, relay))
    try:
        for _, proc, relay in procs:
            proc.wait()
            relay.join()
    except KeyboardInterrupt:
        for _, proc, _ in procs:
            proc.wait()
        raise
    return summarize(root, procs, time.monotonic() - started)


def summarize(root: Path, procs: list[tuple[int, subprocess.Popen[str], threading.Thread]],
              seconds: float) -> int:
    programs = operations = 0
    seeds: list[int] = []
    failures: list[str] = []
    per_worker: list[str] = []
    for index, proc, _ in procs:
        path = root / f"summary-w{index}.json"
        summary = json.loads(path.read_text()) if path.exists() else None
        if summary is None or (proc.returncode != 0 and summary["failure"] is None):
            ran = f" after {summary['programs']} program(s)" if summary is not None else ""
            failures.append(f"worker {index} exited with {proc.returncode}{ran} without finishing "
                            "(killed from outside? see its output)")
        if summary is None:
            continue
        programs += summary["programs"]
        operations += summary["operations"]
        seeds += summary["seeds"]
        per_worker.append(f"w{index} {summary['programs']}")
        failure = summary["failure"]
        if failure is not None:
            failures.append(f"seed {failure['seed']} [{failure['kind']}]: shrunk trace {failure['trace']}, "
                            f"data directory {failure['data_dir']}; replay: PAGEMQ_MODEL_SEED="
                            f"{failure['seed']} make soak")
    rate = f", {seconds / programs:.2f} s a program overall" if programs else ""
    print(f"\nsoak summary: {programs} programs ({', '.join(per_worker) or 'no worker'}), "
          f"{operations} operations, {len(failures)} failure(s), {seconds:.0f} s{rate}")
    print(f"  seeds covered: {seed_ranges(seeds)}")
    for failure in failures:
        print(f"  FAILED: {failure}")
    if failures:
        print(f"  (work directory kept: {root})")
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs many programs, shrinks the first failing one, and writes the report.

Environment (all optional; `make test` and `make soak` set none by default):

- `PAGEMQ_MODEL_SEED=N`: run only the program of seed N (a replay), shrinking it if it fails.
- `PAGEMQ_MODEL_TRACE=FILE`: run exactly the program saved in FILE (a shrunk trace written
  by an earlier failure, under tests/model/failures/).
- `PAGEMQ_MODEL_PROGRAMS=N`: how many programs (the default share has its own default).
- `PAGEMQ_MODEL_MINUTES=M`: the soak runs for M minutes (default 10).
- `PAGEMQ_MODEL_BASE_SEED=N`: the first seed of a run (default: drawn from the clock, and
  printed); program k of the run has seed N + k.
- `PAGEMQ_MODEL_SHRINK_SECONDS=S`: how long the shrinker may try (default 60; 600 in soak).

Set by `make soak` (tests/model/soak.py) for each of its worker processes:

- `PAGEMQ_MODEL_SEED_STRIDE=W`: program k of the run has seed BASE + k * W (default 1), so W
  workers with bases B, B+1, ... B+W-1 run disjoint seeds.
- `PAGEMQ_MODEL_PORTS=LO-HI`: brokers listen on ports from this range (default: free ports
  the kernel picks), so workers never take each other's ports between a stop and a restart.
- `PAGEMQ_MODEL_STOP_FILE=PATH`: no new program starts once PATH exists; a failing run
  creates it before shrinking (the other workers stop, the shrinker gets the machine).
- `PAGEMQ_MODEL_SUMMARY=PATH`: the run's summary (programs, seeds, failure) written there
  as JSON, after every program and at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from model_program import Program, format_program, from_json, generate, to_json
from model_reference import Violation
from model_runner import Runner

FAILURES = Path(__file__).resolve().parent / "failures"


@dataclass
class Outcome:
    program: Program
    violation: Violation | None
    seconds: float
    log: list[str]
    broker_log: str


def say(text: str) -> None:
    """Progress lines (pytest shows them with -s, as `make soak` runs it, or on failure)."""
    print(text, flush=True)


def run_once(program: Program, workdir: Path, keep: bool = False) -> Outcome:
    """One program against a fresh broker in `workdir` (removed afterwards unless `keep`)."""
    started = time.monotonic()
    runner = Runner(program, workdir)
    violation: Violation | None = None
    try:
        runner.run()
    except Violation as found:
        violation = found
        where = (f"operation #{runner.op_index} ({program.ops[runner.op_index].describe()})"
                 if 0 <= runner.op_index < len(program.ops) else "the final drain and restart")
        violation.where = where  # type: ignore[attr-defined]
    outcome = Outcome(program, violation, time.monotonic() - started, runner.log,
                      runner.broker.log_tail(40))
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome


def shrink(failing: Outcome, workdirs: Iterator[Path], budget: float) -> tuple[Outcome, int]:
    """Drop operations while the program still fails with the same kind of violation
    (delta debugging: halves, then quarters, ... then single operations, repeated while that
    helps), then try the broker config without each optional knob. Stops when the budget runs
    out, keeping the smallest failing program found."""
    assert failing.violation is not None
    kind = failing.violation.kind
    best = failing
    deadline = time.monotonic() + budget
    runs = 0

    def still_fails(candidate: Program) -> bool:
        nonlocal best, runs
        outcome = run_once(candidate, next(workdirs))
        runs += 1
        if outcome.violation is None or outcome.violation.kind != kind:
            return False
        best = outcome
        return True

    ops = list(failing.program.ops)
    chunk = max(1, len(ops) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        index, removed = 0, False
        while index < len(ops) and time.monotonic() < deadline:
            candidate = ops[:index] + ops[index + chunk:]
            if still_fails(best.program.with_ops(candidate)):
                ops, removed = candidate, True
                say(f"  shrink: {len(ops)} operations still fail ({kind})")
            else:
                index += chunk
        if chunk > 1 or not removed:
            chunk //= 2
    for knob, plain in (("global_max_size", -1), ("journal_file_size", None), ("cleanup_period", None)):
        if time.monotonic() >= deadline or getattr(best.program.config, knob) == plain:
            continue
        candidate = best.program.with_ops(best.program.ops)
        candidate.config = replace(candidate.config, **{knob: plain})
        if still_fails(candidate):
            say(f"  shrink: still fails without {knob}")
    return best, runs


def replays(program: Program, kind: str, workdirs: Iterator[Path], times: int = 2) -> int:
    """How many of `times` more runs of the shrunk program fail the same way (timing matters)."""
    return sum(1 for _ in range(times)
               if (v := run_once(program, next(workdirs)).violation) is not None and v.kind == kind)


def report(original: Outcome, shrunk: Outcome, runs: int, saved: Path, again: str = "") -> str:
    assert original.violation is not None and shrunk.violation is not None
    program = shrunk.program
    seed = program.seed
    lines = [
        f"model-based test: seed {seed} broke an invariant",
        f"  replay: PAGEMQ_MODEL_SEED={seed} make soak",
        f"  replay the shrunk trace: PAGEMQ_MODEL_TRACE={saved} make soak",
        "",
        f"original ({len(original.program.ops)} operations): at "
        f"{getattr(original.violation, 'where', '?')}: {original.violation}",
        f"shrunk ({len(program.ops)} operations, {runs} shrink runs{again}): at "
        f"{getattr(shrunk.violation, 'where', '?')}:",
        f"  {shrunk.violation}",
        "",
        "shrunk trace:",
        format_program(program),
        "",
        "what happened (shrunk run, last 60 lines):",
        *shrunk.log[-60:],
        "",
        "broker log tail (shrunk run):",
        shrunk.broker_log,
    ]
    return "\n".join(lines)


def seeds_from_env(
    default_count: int | None,
) -> tuple[list[Program] | None, Callable[[int], int], int | None]:
    """(explicit programs or None, seed of program k, how many programs or None = until time)."""
    trace = os.environ.get("PAGEMQ_MODEL_TRACE")
    if trace:
        return [from_json(Path(trace).read_text())], lambda k: k, 1
    seed = os.environ.get("PAGEMQ_MODEL_SEED")
    if seed:
        return [generate(int(seed))], lambda k: k, 1
    base = int(os.environ.get("PAGEMQ_MODEL_BASE_SEED", str(int(time.time() * 1000) % 1_000_000_000)))
    stride = int(os.environ.get("PAGEMQ_MODEL_SEED_STRIDE", "1"))
    count = os.environ.get("PAGEMQ_MODEL_PROGRAMS")
    return None, lambda k: base + k * stride, int(count) if count else default_count


@dataclass
class Summary:
    """What a run did: `failure` is None when every program kept every promise."""

    programs: int = 0
    operations: int = 0
    seconds: float = 0.0
    seeds: list[int] = field(default_factory=list)
    failure: dict[str, Any] | None = None  # seed, kind, trace (saved file), data_dir, report

    def write(self) -> None:
        path = os.environ.get("PAGEMQ_MODEL_SUMMARY")
        if path:
            Path(path).write_text(json.dumps(asdict(self)))


def _stop_requested() -> bool:
    stop_file = os.environ.get("PAGEMQ_MODEL_STOP_FILE")
    return bool(stop_file) and Path(stop_file).exists()


def soak(workroot: Path, *, default_count: int | None, minutes: float | None,
         shrink_budget: float) -> Summary:
    """Run programs until the count or the time is reached (or the stop file appears); shrink
    the first failing one, save it under tests/model/failures/ and put its report in the
    summary."""
    explicit, seed_of, count = seeds_from_env(default_count)
    shrink_budget = float(os.environ.get("PAGEMQ_MODEL_SHRINK_SECONDS", shrink_budget))
    stop_at = time.monotonic() + minutes * 60 if minutes is not None and count is None else None
    dirs = (workroot / f"run{n}" for n in range(1_000_000))
    started = time.monotonic()
    summary = Summary()
    if explicit is None:
        stride = seed_of(1) - seed_of(0)
        say(f"model-based test: seeds from {seed_of(0)}{f' in steps of {stride}' if stride != 1 else ''} "
            f"({count if count is not None else f'{minutes} minutes of'} programs)")
    while True:
        if count is not None and summary.programs >= count:
            break
        if stop_at is not None and time.monotonic() >= stop_at:
            break
        if _stop_requested():
            say("model-based test: stopped (another worker found a failure)")
            break
        k = summary.programs
        program = explicit[k] if explicit is not None else generate(seed_of(k))
        workdir = next(dirs)
        outcome = run_once(program, workdir, keep=True)
        summary.programs += 1
        summary.operations += len(program.ops)
        summary.seeds.append(program.seed)
        summary.seconds = time.monotonic() - started
        status = "ok" if outcome.violation is None else f"FAILED [{outcome.violation.kind}]"
        say(f"program {summary.programs} seed {program.seed}: {len(program.ops)} ops, "
            f"{outcome.seconds:.1f}s, {status} (total {summary.seconds:.0f}s)")
        summary.write()  # as it goes: a run killed from outside still says what it did
        if outcome.violation is None:
            shutil.rmtree(workdir, ignore_errors=True)
            continue
        stop_file = os.environ.get("PAGEMQ_MODEL_STOP_FILE")
        if stop_file:
            Path(stop_file).touch()
        say(f"  {outcome.violation}")
        say(f"  its data directory is kept: {workdir / 'data'}")
        shrunk, runs = shrink(outcome, dirs, shrink_budget) if len(program.ops) > 1 else (outcome, 0)
        assert shrunk.violation is not None
        again = f"; it failed again in {replays(shrunk.program, shrunk.violation.kind, dirs)} of 2 replays"
        FAILURES.mkdir(exist_ok=True)
        saved = FAILURES / f"seed-{program.seed}-{shrunk.violation.kind}.json"
        shrunk.program.note = str(shrunk.violation)
        saved.write_text(to_json(shrunk.program))
        summary.failure = {"seed": program.seed, "kind": shrunk.violation.kind, "trace": str(saved),
                           "data_dir": str(workdir / "data"),
                           "report": report(outcome, shrunk, runs, saved, again)}
        break
    summary.seconds = time.monotonic() - started
    if summary.failure is None:
        say(f"model-based test: {summary.programs} programs, {summary.operations} operations, "
            f"all invariants held ({summary.seconds:.0f}s)")
    summary.write()
    return summary


def run_programs(workroot: Path, *, default_count: int | None, minutes: float | None,
                 shrink_budget: float) -> None:
    """The pytest side of `soak`: fails the test with the report of the first failure."""
    summary = soak(workroot, default_count=default_count, minutes=minutes, shrink_budget=shrink_budget)
    if summary.failure is not None:
        pytest.fail(summary.failure["report"], pytrace=False)

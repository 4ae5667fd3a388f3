"""Runs many programs, shrinks the first failing one, and writes the report.

Environment (all optional; `make test` and `make soak` set none by default):

- `PAGEMQ_MODEL_SEED=N`: run only the program of seed N (a replay), shrinking it if it fails.
- `PAGEMQ_MODEL_TRACE=FILE`: run exactly the program saved in FILE (a shrunk trace written
  by an earlier failure, under tests/model/failures/).
- `PAGEMQ_MODEL_PROGRAMS=N`: how many programs (the default share has its own default).
- `PAGEMQ_MODEL_MINUTES=M`: the soak runs for M minutes (default 10).
- `PAGEMQ_MODEL_BASE_SEED=N`: the first seed of a run (default: drawn from the clock, and
  printed); program k of the run has seed N + k.
- `PAGEMQ_MODEL_SHRINK_SECONDS=S`: how long the shrinker may try (default 90; 600 in soak).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

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
    count = os.environ.get("PAGEMQ_MODEL_PROGRAMS")
    return None, lambda k: base + k, int(count) if count else default_count


def run_programs(workroot: Path, *, default_count: int | None, minutes: float | None,
                 shrink_budget: float) -> None:
    """Run programs until the count or the time is reached; on the first failure shrink it,
    save the shrunk program under tests/model/failures/, and fail with the report."""
    explicit, seed_of, count = seeds_from_env(default_count)
    shrink_budget = float(os.environ.get("PAGEMQ_MODEL_SHRINK_SECONDS", shrink_budget))
    stop_at = time.monotonic() + minutes * 60 if minutes is not None and count is None else None
    dirs = (workroot / f"run{n}" for n in range(1_000_000))
    started = time.monotonic()
    total_ops = 0
    k = 0
    if explicit is None:
        say(f"model-based test: seeds from {seed_of(0)} "
            f"({count if count is not None else f'{minutes} minutes of'} programs)")
    while True:
        if count is not None and k >= count:
            break
        if stop_at is not None and time.monotonic() >= stop_at:
            break
        program = explicit[k] if explicit is not None else generate(seed_of(k))
        workdir = next(dirs)
        outcome = run_once(program, workdir, keep=True)
        total_ops += len(program.ops)
        k += 1
        status = "ok" if outcome.violation is None else f"FAILED [{outcome.violation.kind}]"
        say(f"program {k} seed {program.seed}: {len(program.ops)} ops, {outcome.seconds:.1f}s, {status}"
            f" (total {time.monotonic() - started:.0f}s)")
        if outcome.violation is None:
            shutil.rmtree(workdir, ignore_errors=True)
            continue
        say(f"  {outcome.violation}")
        say(f"  its data directory is kept: {workdir / 'data'}")
        shrunk, runs = shrink(outcome, dirs, shrink_budget) if len(program.ops) > 1 else (outcome, 0)
        assert shrunk.violation is not None
        again = f"; it failed again in {replays(shrunk.program, shrunk.violation.kind, dirs)} of 2 replays"
        FAILURES.mkdir(exist_ok=True)
        saved = FAILURES / f"seed-{program.seed}-{shrunk.violation.kind}.json"
        shrunk.program.note = str(shrunk.violation)
        saved.write_text(to_json(shrunk.program))
        text = report(outcome, shrunk, runs, saved, again)
        pytest.fail(text, pytrace=False)
    say(f"model-based test: {k} programs, {total_ops} operations, all invariants held "
        f"({time.monotonic() - started:.0f}s)")

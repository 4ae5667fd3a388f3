"""Every shrunk trace the model-based test ever failed on (tests/model/found/*.json) runs
again, a few times each (the stalls they caught were timing-dependent), and must hold every
promise: a bug the soak found once stays found."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_driver import run_once
from model_program import from_json

FOUND = Path(__file__).parent / "found"
RUNS = 3


@pytest.mark.timeout(300)
@pytest.mark.parametrize("trace", sorted(FOUND.glob("*.json")), ids=lambda path: path.stem)
def test_a_trace_the_model_once_failed_on_now_keeps_every_promise(trace: Path, tmp_path: Path) -> None:
    program = from_json(trace.read_text())
    for attempt in range(RUNS):
        outcome = run_once(program, tmp_path / f"run{attempt}")
        assert outcome.violation is None, f"{trace.name}, run {attempt + 1}: {outcome.violation}"

"""The shared selector cases (tests/data/selector-cases.json), gathered from ActiveMQ's and
Artemis' selector tests and the Jakarta Messaging spec: typed properties in, match or error out.

Every case that expects an error fails at compile time: none of the sources' error cases
depends on message values. Where a case also gives the three-valued result (`tri`), the
reference evaluation must agree with it too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pagemq.selector import SelectorError, compile

CASES_FILE = Path(__file__).resolve().parents[2] / "data" / "selector-cases.json"
CASES = json.loads(CASES_FILE.read_text(encoding="utf-8"))
TRI = {"true": True, "false": False, "unknown": None}


def _case_id(index: int, case: dict[str, object]) -> str:
    return f"{index}-{case.get('test') or 'spec'}"


def _properties(case: dict[str, object]) -> dict[str, object]:
    # byte/short/int/long are int, double/float float, boolean bool, string str, null None:
    # JSON already decodes the values to those Python types.
    properties = case["properties"]
    assert isinstance(properties, dict)
    return {name: typed["value"] for name, typed in properties.items()}


def test_case_file_holds_all_cases() -> None:
    assert len(CASES) == 361


@pytest.mark.parametrize(
    "case", CASES, ids=[_case_id(i, c) for i, c in enumerate(CASES)]
)
def test_selector_case_gives_the_expected_result(case: dict[str, object]) -> None:
    text = case["selector"]
    assert isinstance(text, str)
    if case["expected"] == "error":
        with pytest.raises(SelectorError):
            compile(text)
        return
    selector = compile(text)
    properties = _properties(case)
    assert selector.matches(properties) is case["expected"]
    result = selector.evaluate(properties)
    assert (result is True) is case["expected"]
    if "tri" in case:
        assert result is TRI[str(case["tri"])]


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c["expected"] == "error"],
    ids=lambda c: str(c["selector"]),
)
def test_error_case_message_names_a_position(case: dict[str, object]) -> None:
    with pytest.raises(SelectorError, match=r"at position \d+ \(0-based\)") as info:
        compile(str(case["selector"]))
    assert info.value.position is not None
    assert 0 <= info.value.position <= len(str(case["selector"]))

"""The stream offsets' answer around a commit not decided yet (`Address.undecided_from`)."""

from __future__ import annotations

from pagemq.integrations.stream_api import _offsets


def test_latest_and_the_next_range_end_before_an_undecided_commit() -> None:
    memory = [10, 11, 12, 20, 21]  # 13-19: a commit's ids, its page batches not yet written
    assert _offsets(memory, None, 0, None, None)["latest"] == 21
    capped = _offsets(memory, None, 0, None, None, undecided=13)
    assert (capped["latest"], capped["end"]) == (12, 12)
    limited = _offsets(memory, None, 0, 100, None, undecided=13)
    assert (limited["end"], limited["messages"]) == (12, -1)
    below = _offsets(memory, None, 0, 2, None, undecided=13)  # the limit ends before it anyway
    assert (below["end"], below["messages"]) == (11, 2)
    waiting = _offsets(memory, None, 12, 100, None, undecided=13)
    assert waiting["end"] == 12  # nothing to plan until it is decided

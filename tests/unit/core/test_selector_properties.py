"""Property tests: random selectors over random messages.

* The fast generated matchers agree with the three-valued reference evaluation, for TRUE
  (`matches`) and for FALSE (`NOT (...)` compiled, which exercises the "is FALSE" code), in
  strict and in header mode, and never raise.
* `may_match` is sound: when it says a page cannot match, no message of the page matches
  (brute force), also after the summary's round trip through bytes.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagemq.core.message import Message
from pagemq.core.selector import summary as summary_module
from pagemq.core.selector.properties import message_view
from pagemq.core.selector.summary import PageSummary
from pagemq.selector import SelectorError, compile

NAMES = ["a", "b", "c"]
STRINGS = ["", "x", "ab", "it's", "1", "2", "2.5", "-3", "1e1", "007", "true", "FALSE", "a%", "_b"]

# -- selector text ---------------------------------------------------------------------------

def condition_strategy(names: list[str], texts: list[str] = STRINGS) -> st.SearchStrategy[str]:
    """Selector texts over the identifiers `names`, with string literals from `texts`."""
    idents = st.sampled_from(names)
    strings = st.sampled_from(texts).map(lambda s: "'" + s.replace("'", "''") + "'")
    num_exprs = st.recursive(
        st.one_of(idents, numbers),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda e: f"-{e}"),
        ),
        max_leaves=4,
    )
    str_exprs = st.one_of(idents, strings, st.tuples(idents, strings).map(lambda t: f"({t[0]} + {t[1]})"))
    ordering = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
    not_ = st.sampled_from(["", "NOT "])
    atoms = st.one_of(
        st.tuples(num_exprs, ordering, num_exprs).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(str_exprs, st.sampled_from(["=", "<>"]), str_exprs).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(idents, st.sampled_from(["=", "<>"]), st.sampled_from(["TRUE", "FALSE"])).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(idents, not_, st.lists(strings, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"),
        st.tuples(str_exprs, not_, patterns).map(lambda t: f"{t[0]} {t[1]}LIKE {t[2]}"),
        st.tuples(num_exprs, not_, numbers, numbers).map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
        st.tuples(num_exprs, not_, idents, numbers).map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
        st.tuples(idents, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
        idents,
        st.sampled_from(["TRUE", "FALSE"]),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            inner.map(lambda c: f"NOT ({c})"),
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
                lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        ),
        max_leaves=5,
    )


idents = st.sampled_from(NAMES)
numbers = st.sampled_from(["0", "1", "2", "-1", "2.5", "0.5", "1e1", "-0.0", "007", "0x1F", "3L"])
strings = st.sampled_from(STRINGS).map(lambda s: "'" + s.replace("'", "''") + "'")
patterns = st.sampled_from(["'%'", "'a%'", "'%b'", "'%x%'", "'_'", "'a_%'", "'x'", "'!%%' ESCAPE '!'",
                            "'%!_' ESCAPE '!'", "'1%'", "''", "'__'"])
conditions = condition_strategy(NAMES)

# -- messages -------------------------------------------------------------------------------

typed_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 0.5, 2.5, -1.5, 10.0, math.inf, -math.inf, math.nan, 2.0**63]),
    st.sampled_from(STRINGS),
)
typed_messages = st.dictionaries(idents, typed_values, max_size=3)
header_messages = st.dictionaries(idents, st.sampled_from(STRINGS), max_size=3)


def _compiled(text: str) -> tuple[object, object] | None:
    try:
        return compile(text), compile(f"NOT ({text})")
    except SelectorError:
        return None   # a generated combination the type rules refuse, e.g. `'a' + 'b' < 1`


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=conditions, properties=typed_messages)
def test_fast_matchers_agree_with_the_reference(text: str, properties: dict[str, object]) -> None:
    compiled = _compiled(text)
    if compiled is None:
        return
    selector, negated = compiled
    for headers in (False, True):
        result = selector.evaluate(properties, headers=headers)  # type: ignore[attr-defined]
        match = selector.matches_headers if headers else selector.matches  # type: ignore[attr-defined]
        negated_match = negated.matches_headers if headers else negated.matches  # type: ignore[attr-defined]
        assert match(properties) is (result is True), (text, headers)
        assert negated_match(properties) is (result is False), (text, headers)


def test_generated_selectors_are_mostly_valid() -> None:
    # Guards the generator above: if the type rules refused most of its output, the
    # agreement and soundness tests would silently test little.
    outcomes: list[bool] = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(text=conditions)
    def collect(text: str) -> None:
        outcomes.append(_compiled(text) is not None)

    collect()
    assert sum(outcomes) >= 0.6 * len(outcomes)


# -- may_match soundness ------------------------------------------------------------------------

many_values = st.one_of(st.sampled_from(STRINGS), st.integers(-40, 40).map(str),
                        st.floats(-50, 50, allow_nan=False).map(lambda f: f"{f:.3f}"))
header_pages = st.lists(st.dictionaries(idents, many_values, max_size=3), max_size=30)
typed_pages = st.lists(typed_messages, max_size=12)


def _check_sound(text: str, page: list[Any], *, broker_messages: bool = False) -> None:
    """A page summary (folded from property dicts, or from broker messages) and its stored
    form never rule out a page in which some message matches."""
    try:
        selector = compile(text)
    except SelectorError:
        return
    summary = PageSummary()
    fold = summary.fold if broker_messages else summary.add
    for message in page:
        fold(message)
    views = [message_view(m) for m in page] if broker_messages else page
    restored = PageSummary.from_bytes(summary.to_bytes())
    for candidate in (summary, restored):
        if not selector.may_match(candidate):
            assert not any(selector.matches_headers(view) for view in views), text


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=conditions, page=header_pages)
def test_may_match_false_means_no_header_message_matches(text: str, page: list[dict[str, object]]) -> None:
    _check_sound(text, page)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=conditions, page=typed_pages)
def test_may_match_false_means_no_typed_message_matches(text: str, page: list[dict[str, object]]) -> None:
    _check_sound(text, page)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=conditions, page=header_pages)
def test_may_match_is_sound_with_tiny_value_lists(text: str, page: list[dict[str, object]]) -> None:
    # With at most two listed values most properties fall back to ranges and counts.
    saved = summary_module.MAX_DISTINCT
    summary_module.MAX_DISTINCT = 2
    try:
        _check_sound(text, page)
    finally:
        summary_module.MAX_DISTINCT = saved


# -- summaries folded from broker messages (the JMS names kept as scalars) ----------------------

JMS_CONDITION_NAMES = ["JMSPriority", "JMSTimestamp", "JMSExpiration", "JMSDeliveryMode", "JMSType",
                       "JMSCorrelationID", "JMSMessageID"]
JMS_TEXTS = ["PERSISTENT", "NON_PERSISTENT", "x", "1", "2", "0", "ab"]
broker_messages = st.builds(
    lambda i, headers, persistent, priority, timestamp, expiration: Message(
        i, "a", headers, b"", persistent=persistent, priority=priority, timestamp=timestamp,
        expiration=expiration),
    st.integers(0, 3),
    st.dictionaries(st.sampled_from(["type", "correlation-id", "message-id", "JMSPriority"]),
                    st.sampled_from(JMS_TEXTS), max_size=2),
    st.booleans(), st.integers(0, 3), st.integers(0, 3), st.sampled_from([0, 1, 2, 10]),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=condition_strategy(JMS_CONDITION_NAMES, JMS_TEXTS),
       page=st.lists(broker_messages, min_size=1, max_size=6))
def test_may_match_false_means_no_folded_broker_message_matches(text: str, page: list[Message]) -> None:
    _check_sound(text, page, broker_messages=True)

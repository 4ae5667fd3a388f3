"""Selector evaluation: three-valued logic, typing, LIKE, arithmetic, STOMP header coercion,
and the message view the broker passes in."""

from __future__ import annotations

import math

import pytest

from pagemq.core.message import Message
from pagemq.core.selector.properties import message_view
from pagemq.selector import compile


def tri(text: str, **properties: object) -> bool | None:
    selector = compile(text)
    result = selector.evaluate(properties)
    assert selector.matches(properties) is (result is True)
    return result


def tri_headers(text: str, **headers: object) -> bool | None:
    selector = compile(text)
    result = selector.evaluate(headers, headers=True)
    assert selector.matches_headers(headers) is (result is True)
    return result


# -- three-valued logic ---------------------------------------------------------------------

TRUTH = {"t": "a = 1", "f": "a = 2", "u": "missing = 1"}
VALUE = {"t": True, "f": False, "u": None}


@pytest.mark.parametrize("left", "tfu")
@pytest.mark.parametrize("right", "tfu")
def test_and_or_follow_sql_truth_tables(left: str, right: str) -> None:
    values = {VALUE[left], VALUE[right]}
    expect_and = False if False in values else (None if None in values else True)
    expect_or = True if True in values else (None if None in values else False)
    assert tri(f"{TRUTH[left]} AND {TRUTH[right]}", a=1) is expect_and
    assert tri(f"{TRUTH[left]} OR {TRUTH[right]}", a=1) is expect_or


def test_not_unknown_is_unknown_and_never_matches() -> None:
    assert tri("NOT missing = 1") is None
    assert tri("NOT NOT missing = 1") is None
    assert tri("NOT (missing = 1 AND a = 1)", a=1) is None


def test_is_null_is_never_unknown() -> None:
    assert tri("missing IS NULL") is True
    assert tri("NOT missing IS NOT NULL") is True
    assert tri("a IS NULL", a=None) is True
    assert tri("(missing + 1) IS NULL") is True


def test_bare_property_as_condition() -> None:
    assert tri("flag", flag=True) is True
    assert tri("flag", flag=False) is False
    assert tri("flag") is None
    assert tri("flag", flag="true") is False    # a string holds no boolean in strict mode
    assert tri("NOT flag", flag=1) is True


# -- typing ---------------------------------------------------------------------------------


def test_int_and_float_compare_as_numbers() -> None:
    assert tri("x = 2.0", x=2) is True
    assert tri("x < 2.5", x=2) is True
    assert tri("x = y", x=3, y=3.0) is True
    assert tri("x = 9007199254740993", x=9007199254740993) is True
    assert tri("x = 9007199254740992.0", x=9007199254740993) is False  # exact, unlike Java


@pytest.mark.parametrize(
    "text",
    ["x = 1", "x <> 1", "x > 0", "x BETWEEN 0 AND 5", "x NOT BETWEEN 5 AND 9", "x = TRUE"],
)
def test_type_mismatch_is_false_not_unknown(text: str) -> None:
    assert tri(text, x="1") is False
    assert tri(f"NOT ({text})", x="1") is True


def test_boolean_is_not_a_number() -> None:
    assert tri("x = 1", x=True) is False
    assert tri("x = 0", x=False) is False
    assert tri("x > 0", x=True) is False
    assert tri("x = TRUE", x=1) is False
    assert tri("x + 1 = 2", x=True) is None


def test_strings_cannot_be_ordered() -> None:
    assert tri("x < y", x="a", y="b") is False
    assert tri("x >= y", x="b", y="a") is False


def test_in_and_like_on_a_non_string_are_false() -> None:
    assert tri("x IN ('1')", x=1) is False
    assert tri("x NOT IN ('1')", x=1) is False
    assert tri("x LIKE '1%'", x=1) is False
    assert tri("x NOT LIKE '1%'", x=1) is False


def test_values_of_no_jms_type_never_match_and_never_raise() -> None:
    odd: list[object] = [b"bytes", ["list"], {"d": 1}, object(), 1 + 2j]
    for value in odd:
        for text in ["x = 'a'", "x IN ('a')", "x > 1", "x LIKE 'a%'", "x + 1 = 2", "x = y", "x"]:
            selector = compile(text)
            assert selector.matches({"x": value, "y": value}) is False
            assert selector.matches_headers({"x": value, "y": value}) is False
        assert compile("x IS NOT NULL").matches({"x": value})
        assert compile("NOT x").matches({"x": value})   # no boolean: FALSE, so NOT x is TRUE


# -- arithmetic -----------------------------------------------------------------------------


def test_division_is_true_division() -> None:
    assert tri("x / 2 = 61.5", x=123) is True
    assert tri("x / 3 > 40", x=123) is True


@pytest.mark.parametrize(
    "text", ["x / 0 = 1", "x / 0.0 > 1", "1 / x < 0", "x * 1e308 * 10 - x * 1e308 * 10 = 0"]
)
def test_failed_arithmetic_is_unknown(text: str) -> None:
    assert tri(text, x=5 if "1 / x" not in text else 0) is None


def test_huge_integer_arithmetic_is_unknown_not_an_exception() -> None:
    assert tri("x + 0.5 > 1", x=10**400) is None
    assert tri("x + 1 > 1", x=10**400) is True


def test_plus_concatenates_strings() -> None:
    assert tri("name + '!' = 'James!'", name="James") is True
    assert tri("a + b = 'xy'", a="x", b="y") is True
    assert tri("a + b = 3", a=1, b=2) is True
    assert tri("a + b = 3", a="1", b=2) is None


def test_unary_minus_and_plus_on_a_non_number_are_unknown() -> None:
    assert tri("-x = -2", x=2) is True
    assert tri("+x = 2", x="2") is None
    assert tri("-x = 2", x="2") is None
    assert tri_headers("-x = -2", x="2") is True


# -- LIKE -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("'abc'", "abc", True),
        ("'abc'", "abcd", False),
        ("'ab%'", "abzzz", True),
        ("'%bc'", "zzbc", True),
        ("'%b%'", "abc", True),
        ("'%'", "", True),
        ("'_'", "", False),
        ("'a_c'", "abc", True),
        ("'a_c'", "a\nc", True),               # _ and % match newlines too
        ("'a%c'", "a\n\nc", True),
        ("'a.c'", "abc", False),                # regex metacharacters are literal
        ("'a*'", "aaa", False),
        ("'(x)[y]{z}|^$\\'", "(x)[y]{z}|^$\\", True),
        ("'%%%'", "anything", True),
        ("'a!%' ESCAPE '!'", "a%", True),
        ("'a!%' ESCAPE '!'", "ab", False),
        ("'a!_b' ESCAPE '!'", "a_b", True),
        ("'a!_b' ESCAPE '!'", "axb", False),
        ("'a!!b' ESCAPE '!'", "a!b", True),
        ("'a!b' ESCAPE '!'", "a!b", True),      # escape before an ordinary character: literal
        ("'ab!' ESCAPE '!'", "ab!", True),      # escape at the end: literal
        ("'%a%%' ESCAPE '%'", "xa%", True),     # %% is a literal % when % is the escape
        ("'%a%%' ESCAPE '%'", "xab", False),
        ("'_a__' ESCAPE '_'", "xa_", True),
        ("'x\\_y' ESCAPE '\\'", "x_y", True),
        ("'x\\_y' ESCAPE '\\'", "xzy", False),
        ("'ABC'", "abc", False),                # case-sensitive
    ],
)
def test_like_wildcards_and_escapes(pattern: str, value: str, expected: bool) -> None:
    assert tri(f"s LIKE {pattern}", s=value) is expected
    assert tri(f"s NOT LIKE {pattern}", s=value) is (not expected)
    assert tri(f"NOT (s LIKE {pattern})", s=value) is (not expected)


# -- STOMP header mode ------------------------------------------------------------------------


def test_numeric_header_compares_as_a_number_against_numbers() -> None:
    assert tri_headers("weight > 2.5", weight="3") is True
    assert tri_headers("weight > 2.5", weight="2.5") is False
    assert tri_headers("weight = 3", weight="3.0") is True
    assert tri_headers("weight = 3", weight="003") is True
    assert tri_headers("weight BETWEEN 1 AND 5", weight="-2e0") is False
    assert tri_headers("weight * 2 = 5", weight=".5e1") is False
    assert tri_headers("weight * 2 = 5", weight="2.5") is True
    assert tri("weight > 2.5", weight="3") is False   # strict mode: no conversion


def test_numeric_header_stays_a_string_against_strings() -> None:
    assert tri_headers("code = '007'", code="007") is True
    assert tri_headers("code = '7'", code="007") is False
    assert tri_headers("code IN ('007')", code="007") is True
    assert tri_headers("code LIKE '00%'", code="007") is True
    assert tri_headers("a = b", a="7", b="7.0") is False      # two strings: string equality


def test_header_meets_a_typed_number_half_way() -> None:
    assert tri_headers("JMSPriority = prio", JMSPriority=4, prio="4") is True
    assert tri_headers("prio <> JMSPriority", JMSPriority=4, prio="5") is True
    assert tri_headers("JMSPriority = prio", JMSPriority=4, prio="four") is False


def test_ordering_reads_both_headers_as_numbers() -> None:
    assert tri_headers("low < high", low="5", high="10") is True
    assert tri_headers("low < high", low="a", high="10") is False


def test_non_numeric_header_is_a_type_mismatch_in_numeric_use() -> None:
    for value in ["abc", "", " 1", "1_000", "0x10", "nan", "inf", "1L", "1e", "+", "."]:
        assert tri_headers("x > 0", x=value) is False, value
        assert tri_headers("x <> 0", x=value) is False, value


def test_header_plus_adds_numbers_and_joins_words() -> None:
    assert tri_headers("a + b = 3", a="1", b="2") is True
    assert tri_headers("a + b > 2", a="1", b="2") is True
    assert tri_headers("a + b = 'xy'", a="x", b="y") is True
    assert tri_headers("a + b = c", a="1", b="2", c="3") is True
    assert tri_headers("a + b = c", a="x", b="y", c="xy") is True
    assert tri_headers("a + b > 2", a="x", b="y") is None


def test_boolean_header_reads_as_a_boolean_where_one_is_wanted() -> None:
    assert tri_headers("flag", flag="true") is True
    assert tri_headers("flag = TRUE", flag="TRUE") is True
    assert tri_headers("NOT flag", flag="False") is True
    assert tri_headers("flag", flag="yes") is False
    assert tri_headers("flag = 'true'", flag="true") is True


def test_header_mode_leaves_typed_values_alone() -> None:
    assert tri_headers("x = 1.5", x=1.5) is True
    assert tri_headers("x", x=True) is True
    assert tri_headers("x = 1", x=True) is False


# -- the message view ---------------------------------------------------------------------


def _message(**headers: str) -> Message:
    return Message(42, "orders", dict(headers), b"body", persistent=True, priority=7,
                   expiration=5000, timestamp=1234)


def test_message_view_adds_the_jms_names() -> None:
    view = message_view(_message(color="red", type="car", **{"correlation-id": "c1"}))
    assert view["color"] == "red"
    assert view["JMSPriority"] == 7
    assert view["JMSTimestamp"] == 1234
    assert view["JMSExpiration"] == 5000
    assert view["JMSDeliveryMode"] == "PERSISTENT"
    assert view["JMSMessageID"] == "42"
    assert view["JMSCorrelationID"] == "c1"
    assert view["JMSType"] == "car"


def test_message_view_prefers_the_message_id_header() -> None:
    assert message_view(_message(**{"message-id": "ID:broker-1"}))["JMSMessageID"] == "ID:broker-1"


def test_message_view_hides_absent_jms_values() -> None:
    view = message_view(_message())
    assert "JMSCorrelationID" not in view
    assert view.get("JMSType") is None
    with pytest.raises(KeyError):
        view["JMSType"]
    assert set(view) == {"JMSPriority", "JMSTimestamp", "JMSMessageID", "JMSDeliveryMode",
                         "JMSExpiration"}
    assert len(view) == 5


def test_message_view_cannot_be_spoofed_by_a_header() -> None:
    view = message_view(_message(JMSPriority="9", JMSXGroupID="g"))
    assert view["JMSPriority"] == 7
    assert view["JMSXGroupID"] == "g"
    assert dict(view)["JMSPriority"] == 7


def test_selectors_over_a_message_view() -> None:
    message = Message(1, "a", {"color": "red", "weight": "3.5"}, b"", persistent=False, priority=4)
    view = message_view(message)
    assert compile("color = 'red' AND weight > 2.5 AND JMSPriority BETWEEN 4 AND 9").matches_headers(view)
    assert compile("JMSDeliveryMode = 'NON_PERSISTENT' AND JMSCorrelationID IS NULL").matches_headers(view)
    assert not compile("JMSPriority > 4").matches_headers(view)


def test_nan_property_never_compares_true() -> None:
    for text in ["x > 1", "x < 1", "x = x", "x BETWEEN 0 AND 1", "x NOT BETWEEN 0 AND 1"]:
        assert tri(text, x=math.nan) is False, text

"""Selector syntax: literals, identifiers, keywords, precedence, errors and their positions."""

from __future__ import annotations

import pytest

from pagemq.core.selector import api, ast
from pagemq.core.selector.parser import MAX_DEPTH, parse
from pagemq.selector import Selector, SelectorError, compile


def matches(text: str, **properties: object) -> bool:
    return compile(text).matches(properties)


# -- literals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("57", 57),
        ("57L", 57),
        ("0x1F", 31),
        ("0X1fl", 31),
        ("017", 15),
        ("0", 0),
        ("7.", 7.0),
        (".5", 0.5),
        ("1.5e3", 1500.0),
        ("1E-2", 0.01),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775807", 2**63 - 1),
    ],
)
def test_numeric_literals_use_java_syntax(text: str, value: float) -> None:
    tree = parse(f"x = {text}")
    assert isinstance(tree, ast.Compare) and isinstance(tree.right, ast.Literal)
    assert tree.right.value == value
    assert type(tree.right.value) is type(value)


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("x = 9223372036854775808", 4),      # a long only when negated
        ("x = 99999999999999999999999", 4),
        ("x = 1e999", 4),
        ("x = 09", 4),                       # not octal
        ("x = 1.5L", 7),
        ("x = 1.5F", 7),
        ("x = 1e", 5),
        ("x = 1.2.3", 7),
    ],
)
def test_bad_numeric_literal_is_an_error_at_its_position(text: str, position: int) -> None:
    with pytest.raises(SelectorError) as info:
        compile(text)
    assert info.value.position == position


def test_string_literal_doubles_quotes() -> None:
    assert matches("s = 'it''s'", s="it's")
    assert matches("s = ''''", s="'")
    assert matches("s = ''", s="")


def test_unterminated_string_is_an_error_at_its_quote() -> None:
    with pytest.raises(SelectorError, match=r"unterminated string literal at position 4 \(0-based\)"):
        compile("s = 'abc")


# -- identifiers and keywords ---------------------------------------------------------------


def test_keywords_are_case_insensitive() -> None:
    assert matches("a = 1 aNd b iS nOt NuLl Or FaLsE", a=1, b="x")
    assert matches("NOT a BeTwEeN 5 AnD 9 AND s LiKe 'x%' EsCaPe '!' AND s In ('xy')", a=1, s="xy")


def test_identifiers_are_case_sensitive() -> None:
    assert not matches("NAME = 'x'", name="x")
    assert matches("name = 'x'", name="x")


def test_identifiers_follow_java_rules() -> None:
    assert matches("$a = 1 AND _b = 2 AND a1$_ = 3 AND żółw = 4", **{"$a": 1, "_b": 2, "a1$_": 3, "żółw": 4})
    assert compile("ORDER = 1 AND notice = 2 AND ISBN = 3").identifiers == {"ORDER", "notice", "ISBN"}


# Artemis' quoted identifiers (ARTEMIS-2761, SelectorTest.testDottedProperty).


def test_a_double_quoted_identifier_names_a_property_with_any_characters() -> None:
    assert matches('"a.test" = \'value\'', **{"a.test": "value"})
    assert not matches('"a.test" = \'value\'', a="value")
    assert compile('"a.test" = \'value\'').identifiers == {"a.test"}
    assert matches('"x-y:z w" > 2 AND "żółw/1" IS NULL', **{"x-y:z w": 3})
    assert matches('"1st" = 1', **{"1st": 1})   # not a Java identifier: fine when quoted


def test_a_doubled_double_quote_is_one_quote_in_the_name() -> None:
    assert compile('"say ""hi""" = 1').identifiers == {'say "hi"'}
    assert matches('"a""b"=1', **{'a"b': 1})
    assert compile('"""" IS NULL').identifiers == {'"'}


def test_a_quoted_identifier_is_never_a_keyword_and_quoting_changes_nothing_else() -> None:
    assert matches('"AND" = 1 AND "null" IS NOT NULL', **{"AND": 1, "null": "x"})
    assert compile('"name" = 1').identifiers == compile("name = 1").identifiers
    # A bare quoted identifier is a condition, as a bare property is.
    assert matches('"a.flag"', **{"a.flag": True})
    assert not matches('"a.flag"', **{"a.flag": False})
    # Single quotes still make a string: this compares the property with the text.
    assert matches("\"a.b\" = 'a.b'", **{"a.b": "a.b"})
    assert not matches("\"a.b\" = \"a.c\"", **{"a.b": "1"})   # two properties; a.c is NULL


def test_quoted_identifiers_work_in_every_construct() -> None:
    props = {"a.n": 5, "a.s": "abc", "a.m": 2}
    assert matches('"a.n" BETWEEN 1 AND 9 AND "a.s" LIKE \'a%\' AND "a.s" IN (\'abc\')', **props)
    assert matches('"a.n" + "a.m" * 2 = 9 AND -"a.n" < 0 AND NOT "a.n" = 4', **props)
    assert compile('"a.n" = 5').evaluate({"a.n": 5}) is True
    assert compile('"a.n" = 5').matches_headers({"a.n": "5"})


def test_quoted_jms_names_read_the_jms_header() -> None:
    from pagemq.core.message import Message
    from pagemq.core.selector.properties import message_view

    view = message_view(Message(1, "a", {"JMSPriority": "0"}, b"", priority=7))
    assert compile('"JMSPriority" = 7').matches_headers(view)
    assert compile("JMSPriority = 7").matches_headers(view)


@pytest.mark.parametrize(
    ("text", "position"),
    [('"a.test = 1', 0), ('x = 1 AND "a""', 10), ('"', 0)],
)
def test_an_unterminated_quoted_identifier_is_an_error_at_its_quote(text: str, position: int) -> None:
    with pytest.raises(SelectorError, match="unterminated quoted identifier") as info:
        compile(text)
    assert info.value.position == position


def test_source_generation_is_safe_for_any_quoted_name() -> None:
    # The name reaches generated Python only as a repr(): quotes, backslashes and newlines
    # in it cannot change the code.
    name = "a\\'\")\n import os #"
    text = '"' + name.replace('"', '""') + '" = 1'
    selector = compile(text)
    assert selector.identifiers == {name}
    assert selector.matches({name: 1}) and not selector.matches({})
    assert selector.matches_headers({name: "1"})


@pytest.mark.parametrize("keyword", ["NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN",
                                     "IS", "ESCAPE"])
def test_keyword_cannot_be_an_identifier(keyword: str) -> None:
    with pytest.raises(SelectorError):
        compile(f"{keyword.lower()} = 1")


# -- precedence -----------------------------------------------------------------------------


def test_and_binds_tighter_than_or() -> None:
    tree = parse("a OR b AND c")
    assert isinstance(tree, ast.Or) and isinstance(tree.items[1], ast.And)
    assert matches("a OR b AND c", a=True, b=False, c=False)
    assert not matches("(a OR b) AND c", a=True, b=False, c=False)


def test_not_binds_looser_than_comparisons() -> None:
    tree = parse("NOT a = 1")
    assert isinstance(tree, ast.Not) and isinstance(tree.operand, ast.Compare)
    assert matches("NOT a = 1", a=2)


def test_not_binds_tighter_than_and() -> None:
    tree = parse("NOT a AND b")
    assert isinstance(tree, ast.And) and isinstance(tree.items[0], ast.Not)


def test_arithmetic_precedence_and_associativity() -> None:
    assert matches("1 + 2 * 3 = 7")
    assert matches("(1 + 2) * 3 = 9")
    assert matches("10 - 2 - 3 = 5")
    assert matches("12 / 2 / 3 = 2")
    assert matches("-2 * -3 = 6")
    assert matches("- -x = 4", x=4)


def test_literal_on_the_left_is_flipped() -> None:
    tree = parse("5 < x")
    assert isinstance(tree, ast.Compare) and tree.op == ">" and isinstance(tree.left, ast.Ident)
    assert matches("5 < x", x=6) and not matches("5 < x", x=5)


def test_and_chains_are_flattened() -> None:
    tree = parse("a AND b AND c AND d")
    assert isinstance(tree, ast.And) and len(tree.items) == 4


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("color = 'red' AND AND weight > 2", "unexpected keyword 'AND' (expected a value, a property name or "
                                             "'(') at position 18 (0-based)"),
        ("a = 1 b = 2",
         "unexpected identifier 'b' (expected AND, OR or the end of the selector) at position 6"),
        ("a = ", "unexpected end of selector (expected a value, a property name or '(') at position 4"),
        ("(a = 1", "unexpected end of selector (expected ')') at position 6"),
        ("a != 1", "unexpected character '!' at position 2"),
        ("3 + 5", "a selector must be a condition, not a number expression at position 0"),
        ("a AND 'x'", "an AND operand must be a condition, not a string expression at position 6"),
        ("NOT 2", "a NOT operand must be a condition, not a number expression at position 4"),
        ("a > 'x'", "'>' compares numbers only, not a string at position 4"),
        ("a BETWEEN 'a' AND 'b'", "'BETWEEN' compares numbers only, not a string at position 10"),
        ("'a' = 1", "cannot compare a string with a number at position 4"),
        ("TRUE = 1", "cannot compare a boolean with a number at position 5"),
        ("a = NULL", "NULL is only allowed in IS NULL / IS NOT NULL at position 4"),
        ("a + 1 IN ('x')", "IN needs a property name on its left at position 0"),
        ("a IN (1, 2)", "expected a string literal in the IN list"),
        ("a IN ()", "expected a string literal in the IN list"),
        ("a LIKE 'x' ESCAPE '!!'", "ESCAPE takes exactly one character, not '!!' at position 18"),
        ("a LIKE b", "expected a string literal in the LIKE pattern"),
        ("1 LIKE 'x'", "LIKE needs a string, not a number at position 0"),
        ("a IS 1", "expected NULL after IS [NOT]"),
        ("a NOT = 1", "expected BETWEEN, IN or LIKE after NOT"),
        ("'a' * 2 = 1", "cannot use a string in arithmetic ('*') at position 4"),
        ("'a' + 2 = 1", "cannot add a number and a string at position 4"),
        ("(a = 1) + 2 = 3", "cannot use a boolean in arithmetic ('+') at position 8"),
        ("-'a' = 'b'", "unary '-' needs a number, not a string at position 0"),
        ("a = 1 = 2", "unexpected operator '='"),
    ],
)
def test_error_message_names_the_problem_and_its_position(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as info:
        compile(text)
    assert message in str(info.value)
    assert info.value.text == text


def test_selector_error_is_a_value_error() -> None:
    assert issubclass(SelectorError, ValueError)


def test_deep_nesting_is_refused_not_a_crash() -> None:
    deep = "(" * (MAX_DEPTH + 5) + "a = 1" + ")" * (MAX_DEPTH + 5)
    with pytest.raises(SelectorError, match="nests deeper"):
        compile(deep)
    long_sum = " + ".join(["a"] * 5000) + " = 1"
    with pytest.raises(SelectorError, match="nests deeper"):
        compile(long_sum)
    with pytest.raises(SelectorError, match="nests deeper"):
        compile("NOT " * 5000 + "a")


def test_deepest_allowed_selector_compiles_in_every_mode() -> None:
    nested = "a = 1"
    while ast.depth(parse(nested)) < MAX_DEPTH - 1:
        nested = f"NOT (x - (y * -z) / 2 > 1 OR {nested})"
    selector = compile(nested)
    assert ast.depth(selector.tree) <= MAX_DEPTH
    assert selector.matches({"a": 1, "x": 0, "y": 0, "z": 0}) in (True, False)
    assert selector.matches_headers({"a": "1"}) in (True, False)
    assert selector.evaluate({}) is None
    assert selector.evaluate({}, headers=True) is None


def test_long_flat_and_chain_compiles() -> None:
    text = " AND ".join(f"p{i} = {i}" for i in range(2000))
    selector = compile(text)
    assert selector.matches({f"p{i}": i for i in range(2000)})
    assert not selector.matches({f"p{i}": i for i in range(1999)})


# -- the public object ----------------------------------------------------------------------


def test_empty_selector_matches_everything() -> None:
    assert compile("").matches({})
    assert compile("   ").matches_headers({"a": "b"})


def test_selector_exposes_text_and_identifiers() -> None:
    selector = compile("color = 'red' AND weight > 2.5 OR JMSPriority BETWEEN 1 AND 4")
    assert isinstance(selector, Selector)
    assert selector.text == "color = 'red' AND weight > 2.5 OR JMSPriority BETWEEN 1 AND 4"
    assert selector.identifiers == frozenset({"color", "weight", "JMSPriority"})


def test_compile_caches_a_bounded_number_of_selectors() -> None:
    assert compile("a = 1") is compile("a = 1")
    for i in range(api.CACHE_SIZE + 10):
        compile(f"a = {i}")
    info = api._compile_cached.cache_info()
    assert info.currsize <= api.CACHE_SIZE


def test_compile_refuses_a_non_string() -> None:
    with pytest.raises(TypeError):
        compile(42)  # type: ignore[arg-type]


def test_public_facade_re_exports_the_core_objects() -> None:
    import pagemq.core.selector as core
    import pagemq.selector as public

    assert public.compile is core.compile
    assert public.Selector is core.Selector
    assert public.SelectorError is core.SelectorError

"""The selector's run-time semantics, one small function per operation.

These functions are the reference: `Selector.evaluate` is built from them alone, and the fast
`matches` functions the compiler inlines must give `evaluate(...) is True` (the property
tests check it). Values are JMS-typed Python values: `str`, `int`, `float`, `bool`; `None`
is SQL NULL, i.e. unknown. Three-valued results are `True`, `False` and `None` (unknown).

The rules, from Jakarta Messaging §3.8.1.2 where it speaks and ActiveMQ where it does not:

* an operand that is NULL makes a comparison, arithmetic, BETWEEN, IN or LIKE unknown;
* comparing values of different types is FALSE ("non-like types"), never an error, and so are
  `<`-style comparisons of strings or booleans, IN/LIKE on a non-string, and a property used
  as a condition that holds no boolean;
* int and float compare and compute together as numbers (Python's exact int/float
  comparison, where Java would round the long to a double);
* arithmetic that fails (division by zero, a float overflow) is unknown, never an exception;
  `+` also concatenates two strings, as ActiveMQ does.

STOMP header mode adds `read_number` / `read_bool`: where the selector uses a property as a
number, a string that reads as one is that number (see `compiler` for where that applies).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Final

NUMBER_TYPES: Final = frozenset({int, float})
JMS_TYPES: Final = frozenset({str, bool, int, float})
# A number as a STOMP header may carry it: decimal int or float literal syntax with an optional
# sign; no hex, octal, suffixes, blanks, `_`, "inf" or "nan" (all of which float() accepts).
_NUMBER_RE: Final = re.compile(r"[+-]?(?:\d+(\.\d*)?|(\.)\d+)([eE][+-]?\d+)?", re.ASCII)


def read_number(text: str) -> int | float | None:
    """The number a header value spells, or None when it is not one."""
    if text.isdigit() and text.isascii():
        return _to_int(text)
    if text.replace(".", "", 1).isdigit() and text.isascii():   # fast path for "2.5", ".5", "7."
        return float(text)
    match = _NUMBER_RE.fullmatch(text)
    if match is None:
        return None
    if match.group(1) is None and match.group(2) is None and match.group(3) is None:
        return _to_int(text)
    return float(text)


def _to_int(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:   # over CPython's int-parsing digit limit: still a (huge) number
        return float(text)


def hnum(value: object) -> object:
    """Header mode, numeric use: a numeric-looking string becomes its number."""
    if value.__class__ is str:
        number = read_number(value)
        if number is not None:
            return number
    return value


def hbool(value: object) -> object:
    """Header mode, boolean use: 'true' / 'false' (any case) become booleans, as ActiveMQ."""
    if value.__class__ is str:
        lowered = value.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
    return value


def is_number(value: object) -> bool:
    return value.__class__ in NUMBER_TYPES


# -- three-valued logic ---------------------------------------------------------------------


def and3(*values: bool | None) -> bool | None:
    if False in values:   # bools only: False == 0 never meets an int here
        return False
    return None if None in values else True


def or3(*values: bool | None) -> bool | None:
    if True in values:
        return True
    return None if None in values else False


def not3(value: bool | None) -> bool | None:
    return None if value is None else not value


def as_condition(value: object) -> bool | None:
    """A property used as a condition: its boolean, unknown when NULL, else FALSE."""
    if value is None:
        return None
    return value if value.__class__ is bool else False


# -- comparisons ----------------------------------------------------------------------------


def eq(left: object, right: object) -> bool | None:
    if left is None or right is None:
        return None
    if _comparable(left, right):
        return left == right
    return False


def ne(left: object, right: object) -> bool | None:
    """Not `not3(eq)`: values of different types are FALSE for `<>` too (§3.8.1.2), where
    ActiveMQ, building `<>` as NOT `=`, would say TRUE."""
    if left is None or right is None:
        return None
    if _comparable(left, right):
        return left != right
    return False


def _comparable(left: object, right: object) -> bool:
    kind = left.__class__
    if kind is right.__class__:
        return kind in JMS_TYPES
    return kind in NUMBER_TYPES and right.__class__ in NUMBER_TYPES


def _ordering(compare: Callable[[object, object], bool]) -> Callable[[object, object], bool | None]:
    def ordered(left: object, right: object) -> bool | None:
        if left is None or right is None:
            return None
        return is_number(left) and is_number(right) and compare(left, right)

    return ordered


lt = _ordering(lambda a, b: a < b)  # type: ignore[operator]
le = _ordering(lambda a, b: a <= b)  # type: ignore[operator]
gt = _ordering(lambda a, b: a > b)  # type: ignore[operator]
ge = _ordering(lambda a, b: a >= b)  # type: ignore[operator]


def heq(left: object, right: object) -> bool | None:
    """Header mode `=` between two properties: a string meets a number or boolean half-way."""
    return eq(*_meet(left, right))


def hne(left: object, right: object) -> bool | None:
    return ne(*_meet(left, right))


def _meet(left: object, right: object) -> tuple[object, object]:
    if left.__class__ is str and right.__class__ is not str:
        left = hbool(left) if right.__class__ is bool else hnum(left)
    elif right.__class__ is str and left.__class__ is not str:
        right = hbool(right) if left.__class__ is bool else hnum(right)
    return left, right


def in_list(value: object, values: frozenset[str], negated: bool) -> bool | None:
    if value is None:
        return None
    if value.__class__ is not str:
        return False
    return (value in values) is not negated


def like(value: object, matcher: Callable[[str], bool], negated: bool) -> bool | None:
    if value is None:
        return None
    if value.__class__ is not str:
        return False
    return matcher(value) is not negated


# -- arithmetic -----------------------------------------------------------------------------


def plus(left: object, right: object) -> object:
    if left.__class__ is str and right.__class__ is str:
        return left + right
    return _arith(left, right, _add)


def add(left: object, right: object) -> object:
    """`+` where the selector wants a number: never concatenation."""
    return _arith(left, right, _add)


def hplus(left: object, right: object) -> object:
    """Header mode `+` between two properties: numbers if both read as numbers, else strings."""
    left_number, right_number = hnum(left), hnum(right)
    if is_number(left_number) and is_number(right_number):
        return _arith(left_number, right_number, _add)
    return plus(left, right)


def minus(left: object, right: object) -> object:
    return _arith(left, right, _sub)


def times(left: object, right: object) -> object:
    return _arith(left, right, _mul)


def divide(left: object, right: object) -> object:
    return _arith(left, right, _div)


def negate(value: object) -> object:
    return -value if is_number(value) else None  # type: ignore[operator]


def positive(value: object) -> object:
    return value if is_number(value) else None


def _add(a: float, b: float) -> float:
    return a + b


def _sub(a: float, b: float) -> float:
    return a - b


def _mul(a: float, b: float) -> float:
    return a * b


def _div(a: float, b: float) -> float:
    return a / b   # always true division, as ActiveMQ's divide() returns a double


def _arith(left: object, right: object, op: Callable[[float, float], float]) -> object:
    if not (is_number(left) and is_number(right)):
        return None
    try:
        result = op(left, right)  # type: ignore[arg-type]
    except ArithmeticError:   # ZeroDivisionError, OverflowError (huge int to float)
        return None
    return None if result != result else result   # NaN (inf - inf) is no value: unknown


# -- LIKE -----------------------------------------------------------------------------------


class Wildcard(enum.Enum):
    ANY = "%"
    ONE = "_"


LikePart = str | Wildcard


def like_plan(pattern: str, escape: str | None) -> tuple[str, str | re.Pattern[str]]:
    """How to test `LIKE pattern`: ("exact" | "prefix" | "suffix" | "contains", text) for the
    shapes `abc`, `abc%`, `%abc`, `%abc%` (plain string methods, several times faster than a
    regular expression), else ("regex", compiled pattern for fullmatch)."""
    parts = like_parts(pattern, escape)
    shape = tuple(p if isinstance(p, Wildcard) else "x" for p in parts)
    fixed = next((p for p in parts if isinstance(p, str)), "")
    if shape in ((), ("x",)):
        return "exact", fixed
    if shape == ("x", Wildcard.ANY):
        return "prefix", fixed
    if shape == (Wildcard.ANY, "x"):
        return "suffix", fixed
    if shape in ((Wildcard.ANY, "x", Wildcard.ANY), (Wildcard.ANY,)):
        return "contains", fixed
    return "regex", re.compile("".join(_to_regex(p) for p in parts), re.DOTALL)


def like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """The reference predicate for `LIKE pattern ESCAPE escape`: always a regular expression,
    so that the property tests check `like_plan`'s shortcuts against it."""
    regex = re.compile("".join(_to_regex(p) for p in like_parts(pattern, escape)), re.DOTALL)
    fullmatch = regex.fullmatch
    return lambda s: fullmatch(s) is not None


def like_parts(pattern: str, escape: str | None) -> list[LikePart]:
    """The pattern as literal runs and wildcards (consecutive `%` merged into one).

    The escape character escapes only `%`, `_` and itself; before any other character, or at
    the end, it is an ordinary character (or a wildcard, if it is % or _ itself). This is
    ActiveMQ's `LikeExpression.shouldEscapeNext` rule, and the selector test cases rely on it.
    """
    parts: list[LikePart] = []
    literal: list[str] = []
    index = 0
    while index < len(pattern):
        ch = pattern[index]
        following = pattern[index + 1 : index + 2]
        if ch == escape and following in ("%", "_", escape):
            literal.append(following)
            index += 2
            continue
        if ch in "%_":
            if literal:
                parts.append("".join(literal))
                literal = []
            wildcard = Wildcard(ch)
            if not (wildcard is Wildcard.ANY and parts and parts[-1] is Wildcard.ANY):
                parts.append(wildcard)
        else:
            literal.append(ch)
        index += 1
    if literal:
        parts.append("".join(literal))
    return parts


def _to_regex(part: LikePart) -> str:
    if part is Wildcard.ANY:
        return ".*"
    if part is Wildcard.ONE:
        return "."
    return re.escape(part)

"""`Selector.may_match(summary)`: can any message of a page match? An abstract evaluation.

Each condition gets two flags over the page: can it be TRUE for some message, can it be FALSE
for some message. They are over-approximations (True when unsure), combined as three-valued
logic requires: `a AND b` can be TRUE only if both can, can be FALSE if either can; NOT swaps
the flags. The page may be skipped when the whole selector cannot be TRUE.

A condition that reads one property (a leaf such as `a > 1`, or a whole `NOT a = 1 AND
NOT a = 2`) is decided exactly when the summary lists that property's values: its own
compiled header-mode function runs on each distinct value (and on NULL if some message lacks
the property). Without a value list, leaves comparing the property with numeric literals use
the page's numeric range, IS [NOT] NULL the presence count; anything else is "unsure", and
so are leaves reading two properties (the page does not say which values go together).
Header-mode semantics throughout, as the broker evaluates selectors on STOMP headers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from pagemq.core.selector import ast
from pagemq.core.selector.compiler import compile_reference
from pagemq.core.selector.summary import PageSummary, PropertyStats

Bounds = tuple[bool, bool]   # (can be TRUE, can be FALSE)
_UNSURE: Final = (True, True)


class _Part:
    """A condition of the selector, with the properties it reads; compiled when first needed."""

    __slots__ = ("_evaluate", "names", "node")

    def __init__(self, node: ast.Node) -> None:
        self.node = node
        self.names = sorted(ast.identifiers(node))
        self._evaluate: Callable[[Mapping[str, object]], bool | None] | None = None

    def evaluate(self, properties: Mapping[str, object]) -> bool | None:
        if self._evaluate is None:
            self._evaluate = compile_reference(self.node, headers=True)
        return self._evaluate(properties)


class Pruner:
    """Built once per selector, on its first `may_match`."""

    __slots__ = ("_parts", "_tree")

    def __init__(self, tree: ast.Node) -> None:
        self._tree = tree
        self._parts: dict[int, _Part] = {}
        stack = [tree]
        while stack:   # the logic skeleton and its leaves; what is below a leaf is the leaf's
            node = stack.pop()
            self._parts[id(node)] = _Part(node)
            if isinstance(node, ast.And | ast.Or | ast.Not):
                stack.extend(ast.children(node))

    def may_match(self, summary: PageSummary) -> bool:
        if summary.count == 0:
            return False
        return self._bounds(self._tree, summary)[0]

    def _bounds(self, node: ast.Node, summary: PageSummary) -> Bounds:
        part = self._parts[id(node)]
        if len(part.names) <= 1:
            # A condition on one property (NOT a = 1 AND NOT a = 2, too) is decided exactly
            # when the property's values are listed: run it on each of them.
            exact = _exact_bounds(part, summary)
            if exact is not None:
                return exact
        if isinstance(node, ast.Not):
            can_true, can_false = self._bounds(node.operand, summary)
            return can_false, can_true
        if isinstance(node, ast.And | ast.Or):
            results = [self._bounds(item, summary) for item in node.items]
            trues = [t for t, _ in results]
            falses = [f for _, f in results]
            if isinstance(node, ast.And):
                return all(trues), any(falses)
            return any(trues), all(falses)
        if len(part.names) == 1:
            stats = summary.stats(part.names[0])
            assert stats is not None   # else _exact_bounds would have answered
            return _range_bounds(node, stats, summary.count)
        return _UNSURE


def _exact_bounds(part: _Part, summary: PageSummary) -> Bounds | None:
    """Bounds from running `part` on every value the page has, or None if they are unlisted."""
    if not part.names:
        result = part.evaluate({})
        return result is True, result is False
    name = part.names[0]
    stats = summary.stats(name)
    if stats is None:
        candidates: list[object] = [None]
    elif stats.values is not None:
        candidates = list(stats.values)
        if stats.present < summary.count:
            candidates.append(None)
    else:
        return None
    results = {part.evaluate({} if value is None else {name: value}) for value in candidates}
    return True in results, False in results


def _range_bounds(node: ast.Node, stats: PropertyStats, count: int) -> Bounds:
    """Bounds from presence counts and the numeric range alone (values too many to list)."""
    low, high = stats.min_number, stats.max_number
    match node:
        case ast.IsNull(operand=ast.Ident()):
            can_be_null, can_be_set = stats.present < count, stats.present > 0
            return (can_be_set, can_be_null) if node.negated else (can_be_null, can_be_set)
        case ast.Compare(left=ast.Ident(), right=ast.Literal(value=int() | float() as value)) if (
            not isinstance(value, bool)
        ):
            if low is None or high is None:   # no number in the page: never TRUE
                return False, True
            return _compare_possible(node.op, value, low, high), True
        case ast.Between(operand=ast.Ident(), low=ast.Literal(value=lo), high=ast.Literal(value=hi)):
            if low is None or high is None:
                return False, True
            assert isinstance(lo, int | float) and isinstance(hi, int | float)
            if node.negated:
                return low < lo or high > hi, True
            return lo <= hi and high >= lo and low <= hi, True
    return _UNSURE


def _compare_possible(op: str, value: float, low: float, high: float) -> bool:
    """Could some number in [low, high] satisfy `number op value`?"""
    if op == ">":
        return high > value
    if op == ">=":
        return high >= value
    if op == "<":
        return low < value
    if op == "<=":
        return low <= value
    if op == "=":
        return low <= value <= high
    return True   # <>

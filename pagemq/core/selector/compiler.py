"""Syntax tree to Python functions, generated as source and compiled once per selector.

Why source generation: a selector runs for every message and every selective consumer, and a
closure tree pays one Python call per node, while generated code is one call per message and
lets CPython's specialising interpreter see plain comparisons (benchmarks/selector_bench.py
measures both: the generated matcher runs about 5x as fast as a tree of closures).

Two shapes of function are generated from the same tree:

* `reference` functions return the three-valued result and call `runtime` for every
  operation. They define the semantics and back `Selector.evaluate`.
* `match` functions return a plain bool, True exactly when the reference says TRUE. Unknown
  never matches, so each condition is compiled twice, as "is TRUE" (`_true`) and "is FALSE"
  (`_false`, needed under NOT): `NOT a` is TRUE when `a` is FALSE, `a AND b` is FALSE when
  either is. Simple predicates (a value against literals) are inlined; others fall back to
  the reference code.

Header mode (STOMP, all values strings) differs only in how a property is read, decided here
from the static kinds of the surrounding expression: as a number (`_hnum`) where the selector
uses it as one (arithmetic, `<`-style comparisons, BETWEEN, `=` against a number), as a
boolean (`_hbool`) where it is a condition or compared with TRUE/FALSE, and as it is
elsewhere. `=` and `+` between two properties decide at run time (`heq`, `hplus`).

Safety: user text reaches the generated source only through `repr()` of a str, int or finite
float; everything else (sets, patterns) is passed in the namespace. `MAX_DEPTH` in the parser
bounds the nesting of the generated expressions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Final

from pagemq.core.selector import ast, runtime
from pagemq.core.selector.ast import ANY, BOOL, NUM, STR, Node

MatchFunction = Callable[[Mapping[str, object]], bool]
EvalFunction = Callable[[Mapping[str, object]], "bool | None"]

# Run-time errors the generated code turns into "unknown": only reachable with values outside
# the JMS types (an unhashable value tested by IN, an object whose __eq__ raises TypeError).
RUNTIME_ERRORS: Final = (TypeError, ValueError, ArithmeticError)

_NAMESPACE: Final[dict[str, object]] = {
    "__builtins__": {},
    "str": str,
    "_ERRORS": RUNTIME_ERRORS,
    "_NUM": runtime.NUMBER_TYPES,
    "_hnum": runtime.hnum,
    "_hbool": runtime.hbool,
    "_and3": runtime.and3,
    "_or3": runtime.or3,
    "_not3": runtime.not3,
    "_as_condition": runtime.as_condition,
    "_eq": runtime.eq,
    "_ne": runtime.ne,
    "_heq": runtime.heq,
    "_hne": runtime.hne,
    "_lt": runtime.lt,
    "_le": runtime.le,
    "_gt": runtime.gt,
    "_ge": runtime.ge,
    "_in_list": runtime.in_list,
    "_like": runtime.like,
    "_plus": runtime.plus,
    "_add": runtime.add,
    "_hplus": runtime.hplus,
    "_minus": runtime.minus,
    "_times": runtime.times,
    "_divide": runtime.divide,
    "_negate": runtime.negate,
    "_positive": runtime.positive,
}
_COMPARE_FUNCTIONS: Final = {"=": "_eq", "<>": "_ne", "<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}
_ARITH_FUNCTIONS: Final = {"-": "_minus", "*": "_times", "/": "_divide"}
_ORDERING: Final = frozenset({"<", "<=", ">", ">="})


def compile_match(node: Node, *, headers: bool) -> MatchFunction:
    """properties -> bool: True only when the selector is TRUE for them."""
    gen = _Generator(headers)
    return gen.function(gen.true(node), "False")  # type: ignore[return-value]


def compile_reference(node: Node, *, headers: bool) -> EvalFunction:
    """properties -> True / False / None (unknown), straight from `runtime`."""
    gen = _Generator(headers)
    return gen.function(gen.tri(node), "None")  # type: ignore[return-value]


def source_of(node: Node, *, headers: bool) -> str:
    """The generated match function's source, for debugging and the docs."""
    gen = _Generator(headers)
    return gen.source(gen.true(node), "False")


def compare_context(node: ast.Compare) -> str:
    """How each side of a comparison reads a property in header mode (NUM, STR, BOOL or ANY)."""
    if node.op in _ORDERING:
        return NUM
    known = {node.left.kind, node.right.kind} - {ANY}
    return known.pop() if known else ANY


class _Generator:
    def __init__(self, headers: bool) -> None:
        self.headers = headers
        self.variables: dict[str, str] = {}    # property name -> local variable
        self.constants: dict[str, object] = {}
        self.temporaries = 0

    # -- assembly -------------------------------------------------------------------------

    def source(self, expression: str, on_error: str) -> str:
        lines = ["def _selector(p):", "    try:"]
        if len(self.variables) > 1:
            lines.append("        get = p.get")
            lines += [f"        {var} = get({name!r})" for name, var in self.variables.items()]
        else:
            lines += [f"        {var} = p.get({name!r})" for name, var in self.variables.items()]
        lines += [f"        return {expression}", "    except _ERRORS:", f"        return {on_error}"]
        return "\n".join(lines) + "\n"

    def function(self, expression: str, on_error: str) -> Callable[[Mapping[str, object]], object]:
        namespace = dict(_NAMESPACE, **self.constants)
        exec(compile(self.source(expression, on_error), "<selector>", "exec"), namespace)
        return namespace["_selector"]  # type: ignore[return-value]

    def constant(self, value: object) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def literal(self, value: ast.Value) -> str:
        if isinstance(value, float) and not math.isfinite(value):
            return self.constant(value)
        return repr(value)

    def temporary(self) -> str:
        self.temporaries += 1
        return f"t{self.temporaries}"

    def bind(self, expression: str) -> tuple[str, str]:
        """(first use, later uses) of a value, naming it once with := unless it is a name."""
        if expression.isidentifier():
            return expression, expression
        name = self.temporary()
        return f"({name} := {expression})", name

    # -- values ---------------------------------------------------------------------------

    def value(self, node: Node, context: str) -> str:
        """Python expression for a value (None = NULL); `context`: how header mode reads it."""
        match node:
            case ast.Literal():
                return self.literal(node.value)
            case ast.Ident():
                var = self.variables.setdefault(node.name, f"v{len(self.variables)}")
                if self.headers and context == NUM:
                    return f"_hnum({var})"
                if self.headers and context == BOOL:
                    return f"_hbool({var})"
                return var
            case ast.Unary():
                function = "_negate" if node.op == "-" else "_positive"
                return f"{function}({self.value(node.operand, NUM)})"
            case ast.Arith():
                return self.arith(node, context)
        return self.tri(node)   # a condition used as a value: (a = 1) = TRUE

    def arith(self, node: ast.Arith, context: str) -> str:
        if node.op != "+":
            function, operands = _ARITH_FUNCTIONS[node.op], NUM
        elif node.kind == NUM or (node.kind == ANY and self.headers and context == NUM):
            function, operands = "_add", NUM
        elif node.kind == STR or not self.headers or context == STR:
            function, operands = "_plus", STR
        else:
            function, operands = "_hplus", ANY
        left, right = self.value(node.left, operands), self.value(node.right, operands)
        return f"{function}({left}, {right})"

    # -- three-valued (reference) ---------------------------------------------------------

    def tri(self, node: Node) -> str:
        match node:
            case ast.Literal():
                return repr(node.value)
            case ast.Ident():
                return f"_as_condition({self.value(node, BOOL)})"
            case ast.Not():
                return f"_not3({self.tri(node.operand)})"
            case ast.And() | ast.Or():
                function = "_and3" if isinstance(node, ast.And) else "_or3"
                return f"{function}({', '.join(self.tri(item) for item in node.items)})"
            case ast.Compare():
                context = compare_context(node)
                function = _COMPARE_FUNCTIONS[node.op]
                if self.headers and context == ANY and node.op in ("=", "<>"):
                    function = function.replace("_", "_h", 1)
                left, right = self.value(node.left, context), self.value(node.right, context)
                return f"{function}({left}, {right})"
            case ast.Between():
                value = self.value(node.operand, NUM)
                low, high = self.value(node.low, NUM), self.value(node.high, NUM)
                if node.negated:
                    return f"_or3(_lt({value}, {low}), _gt({value}, {high}))"
                return f"_and3(_ge({value}, {low}), _le({value}, {high}))"
            case ast.In():
                values = self.constant(frozenset(node.values))
                return f"_in_list({self.value(node.operand, STR)}, {values}, {node.negated})"
            case ast.Like():
                matcher = self.constant(runtime.like_matcher(node.pattern, node.escape))
                return f"_like({self.value(node.operand, STR)}, {matcher}, {node.negated})"
            case ast.IsNull():
                return f"({self.value(node.operand, ANY)} is {'not ' if node.negated else ''}None)"
        raise AssertionError(f"not a condition: {node!r}")

    # -- two-valued (fast) ----------------------------------------------------------------

    def true(self, node: Node) -> str:
        """Python expression that is True exactly when `node` is TRUE."""
        match node:
            case ast.Literal():
                return repr(node.value is True)
            case ast.Ident():
                return f"({self.value(node, BOOL)} is True)"
            case ast.Not():
                return self.false(node.operand)
            case ast.And() | ast.Or():
                joiner = " and " if isinstance(node, ast.And) else " or "
                return "(" + joiner.join(self.true(item) for item in node.items) + ")"
            case ast.IsNull():
                return f"({self.value(node.operand, ANY)} is {'not ' if node.negated else ''}None)"
        simple = self.simple(node)
        if simple is None:
            return f"({self.tri(node)} is True)"
        subject, test = simple
        first, later = self.bind(subject)
        return test(first, later)

    def false(self, node: Node) -> str:
        """Python expression that is True exactly when `node` is FALSE."""
        match node:
            case ast.Literal():
                return repr(node.value is False)
            case ast.Ident():
                first, later = self.bind(self.value(node, BOOL))
                return f"({first} is not None and {later} is not True)"
            case ast.Not():
                return self.true(node.operand)
            case ast.And() | ast.Or():
                joiner = " or " if isinstance(node, ast.And) else " and "
                return "(" + joiner.join(self.false(item) for item in node.items) + ")"
            case ast.IsNull():
                return f"({self.value(node.operand, ANY)} is {'' if node.negated else 'not '}None)"
        simple = self.simple(node)
        if simple is None:
            return f"({self.tri(node)} is False)"
        # A simple predicate is unknown only when its subject is NULL, so FALSE = not NULL and
        # not TRUE. (Not "the negated test": with NaN, neither x < 1 nor x >= 1 holds.)
        subject, test = simple
        first, later = self.bind(subject)
        return f"({first} is not None and not {test(later, later)})"

    def simple(self, node: Node) -> tuple[str, Callable[[str, str], str]] | None:
        """(subject, test) when `node` is one value tested against literals only.

        `test(first, later)` writes the "is TRUE" check, using `first` for the subject's first
        mention (which may bind it with :=) and `later` after.
        """
        match node:
            case ast.Compare(right=ast.Literal() as right) if not isinstance(node.left, ast.Literal):
                subject = self.value(node.left, compare_context(node))
                return subject, _compare_test(node.op, right.value, self.literal(right.value))
            case ast.Between(low=ast.Literal() as low, high=ast.Literal() as high):
                lo, hi = self.literal(low.value), self.literal(high.value)
                if node.negated:
                    return self.value(node.operand, NUM), (
                        lambda f, n: f"({f}.__class__ in _NUM and ({n} < {lo} or {n} > {hi}))"
                    )
                return self.value(node.operand, NUM), (
                    lambda f, n: f"({f}.__class__ in _NUM and {lo} <= {n} <= {hi})"
                )
            case ast.In():
                values = self.constant(frozenset(node.values))
                if node.negated:
                    return self.value(node.operand, STR), (
                        lambda f, n: f"({f}.__class__ is str and {n} not in {values})"
                    )
                return self.value(node.operand, STR), lambda f, n: f"({f} in {values})"
            case ast.Like():
                return self.value(node.operand, STR), self.like_test(node)
        return None

    def like_test(self, node: ast.Like) -> Callable[[str, str], str]:
        how, arg = runtime.like_plan(node.pattern, node.escape)
        if how == "exact" and not node.negated:
            return lambda f, n: f"({f} == {arg!r})"
        if isinstance(arg, re.Pattern):
            fullmatch = self.constant(arg.fullmatch)
            check: Callable[[str], str] = lambda n: f"{fullmatch}({n}) is not None"  # noqa: E731
        else:
            text = repr(arg)
            check = {
                "exact": lambda n: f"{n} == {text}",
                "prefix": lambda n: f"{n}.startswith({text})",
                "suffix": lambda n: f"{n}.endswith({text})",
                "contains": lambda n: f"{text} in {n}",
            }[how]
        negation = "not " if node.negated else ""
        return lambda f, n: f"({f}.__class__ is str and {negation}{check(n)})"


def _compare_test(op: str, value: ast.Value, literal: str) -> Callable[[str, str], str]:
    """The inline "is TRUE" test of `subject op literal` under the runtime's typing rules."""
    if isinstance(value, bool):
        wanted = value if op == "=" else not value
        return lambda f, n: f"({f} is {wanted})"
    if isinstance(value, str):
        if op == "=":
            return lambda f, n: f"({f} == {literal})"
        return lambda f, n: f"({f}.__class__ is str and {n} != {literal})"
    if op == "=":
        if value in (0, 1):   # True == 1 and False == 0 in Python, but not in a selector
            return lambda f, n: f"({f}.__class__ in _NUM and {n} == {literal})"
        return lambda f, n: f"({f} == {literal})"
    python_op = "!=" if op == "<>" else op
    return lambda f, n: f"({f}.__class__ in _NUM and {n} {python_op} {literal})"

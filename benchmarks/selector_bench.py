"""Selector evaluation speed: evaluations per second on one core.

Run: .venv/bin/python benchmarks/selector_bench.py [--quick]

Measures the generated matchers (`matches` on typed values, `matches_headers` on STOMP
string headers and on a broker message's view), the three-valued reference functions, and,
for comparison, a closure-tree evaluator built here from the same syntax tree: the design
alternative the compiler rejected (see pagemq/core/selector/compiler.py). Also compile time
and `may_match` over a page summary. Figures are best-of-five; the target is 500,000/s for
`matches()` on the selector below.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping

from pagemq.core.message import Message
from pagemq.core.selector import api, ast, runtime
from pagemq.core.selector.properties import message_view
from pagemq.core.selector.summary import PageSummary
from pagemq.selector import compile

SELECTOR = "color = 'red' AND weight > 2.5 AND region IN ('eu','us')"
TARGET = 500_000


def rate(function: Callable[[], object], loops: int) -> float:
    """Best of five: calls per second of `function` (loop overhead included)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(loops):
            function()
        best = min(best, time.perf_counter() - start)
    return loops / best


# -- the alternative: a closure per node -------------------------------------------------------

Evaluator = Callable[[Mapping[str, object]], object]


def closure_tree(node: ast.Node) -> Evaluator:
    """Three-valued closures over `runtime`, strict mode: one Python call per node per message."""
    match node:
        case ast.Literal(value=value):
            return lambda p: value
        case ast.Ident(name=name):
            return lambda p: p.get(name)
        case ast.And(items=items):
            parts = [closure_tree(i) for i in items]
            return lambda p: runtime.and3(*(f(p) for f in parts))
        case ast.Or(items=items):
            parts = [closure_tree(i) for i in items]
            return lambda p: runtime.or3(*(f(p) for f in parts))
        case ast.Not(operand=operand):
            inner = closure_tree(operand)
            return lambda p: runtime.not3(inner(p))
        case ast.Compare(op=op, left=left, right=right):
            compare = {"=": runtime.eq, "<>": runtime.ne, "<": runtime.lt, "<=": runtime.le,
                       ">": runtime.gt, ">=": runtime.ge}[op]
            lf, rf = closure_tree(left), closure_tree(right)
            return lambda p: compare(lf(p), rf(p))
        case ast.In(operand=operand, values=values, negated=negated):
            inner, members = closure_tree(operand), frozenset(values)
            return lambda p: runtime.in_list(inner(p), members, negated)
    raise NotImplementedError(type(node).__name__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer loops (CI smoke run)")
    loops = 50_000 if parser.parse_args().quick else 1_000_000

    selector = compile(SELECTOR)
    typed_hit = {"color": "red", "weight": 3.0, "region": "eu", "JMSPriority": 4, "id": "m-1"}
    typed_miss = {"color": "blue", "weight": 3.0, "region": "eu", "JMSPriority": 4, "id": "m-2"}
    typed_late_miss = {"color": "red", "weight": 3.0, "region": "asia", "JMSPriority": 4, "id": "m-3"}
    header_hit = {"color": "red", "weight": "3.0", "region": "eu", "id": "m-1"}
    header_miss = {"color": "red", "weight": "2", "region": "eu", "id": "m-2"}
    message = Message(1, "orders", dict(header_hit), b"payload", priority=4)
    closures = closure_tree(selector.tree)
    assert selector.matches(typed_hit) and not selector.matches(typed_miss)
    assert selector.matches_headers(header_hit) and not selector.matches_headers(header_miss)
    assert closures(typed_hit) is True and closures(typed_miss) is False

    print(f"selector: {SELECTOR}")
    print(f"loops: {loops:,} per run, best of 5, one core\n")
    cases: list[tuple[str, Callable[[], object], int]] = [
        ("matches()            typed, matching", lambda: selector.matches(typed_hit), loops),
        ("matches()            typed, not matching (1st term)", lambda: selector.matches(typed_miss), loops),
        ("matches()            typed, not matching (3rd term)",
         lambda: selector.matches(typed_late_miss), loops),
        ("matches_headers()    str headers, matching", lambda: selector.matches_headers(header_hit), loops),
        ("matches_headers()    str headers, not matching (2nd term)",
         lambda: selector.matches_headers(header_miss), loops),
        ("matches_headers(message_view(msg)) incl. the view",
         lambda: selector.matches_headers(message_view(message)), loops),
        ("evaluate()           reference, three-valued, typed",
         lambda: selector.evaluate(typed_hit), loops // 4),
        ("closure tree         alternative design, typed", lambda: closures(typed_hit), loops // 4),
    ]
    rows = [(label, rate(function, count)) for label, function, count in cases]
    for label, value in rows:
        flag = "" if not label.startswith("matches()") else ("  ok" if value >= TARGET else "  BELOW TARGET")
        print(f"{label:<60} {value:>12,.0f} /s{flag}")

    texts = [f"color = 'c{i}' AND weight > {i}.5 AND region IN ('eu','us')" for i in range(2000)]
    start = time.perf_counter()
    for text in texts:
        api.Selector(text, api.parse(text))
    per_compile = (time.perf_counter() - start) / len(texts)
    print(f"\n{'compile, uncached':<60} {per_compile * 1e6:>12,.0f} us/selector")
    print(f"{'compile, cached (LRU hit)':<60} {rate(lambda: compile(SELECTOR), loops // 10):>12,.0f} /s")

    summary = PageSummary()
    for i in range(1000):
        summary.add({"color": ["blue", "green"][i % 2], "weight": str(i % 50), "region": "eu"})
    assert not selector.may_match(summary)
    print(f"{'may_match() over a 1,000-message page summary':<60} "
          f"{rate(lambda: selector.may_match(summary), loops // 20):>12,.0f} /s")


if __name__ == "__main__":
    main()

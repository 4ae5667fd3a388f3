"""`compile(text) -> Selector`, the object the broker keeps per filtered queue and consumer.

A Selector holds four functions generated from one syntax tree: the two fast matchers
(`matches` for JMS-typed values, `matches_headers` for STOMP's string headers), built at
compile time, and the three-valued reference functions behind `evaluate`, plus the page-summary
pruner behind `may_match`, built on first use since the broker's hot path never calls them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from pagemq.core.selector import ast
from pagemq.core.selector.compiler import compile_match, compile_reference, source_of
from pagemq.core.selector.parser import parse

if TYPE_CHECKING:
    from pagemq.core.selector.prune import Pruner
    from pagemq.core.selector.summary import PageSummary

CACHE_SIZE: Final = 256   # compiled selectors kept by `compile`; SUBSCRIBEs repeat their text


class Selector:
    """A compiled message selector. Immutable and safe to share between consumers.

    `matches(properties)` and `matches_headers(headers)` are plain functions stored on the
    instance (one call per message, no method dispatch); both return True only when the
    selector is TRUE, never for FALSE or unknown, and never raise.
    """

    __slots__ = ("_pruner", "_reference", "identifiers", "matches", "matches_headers", "text", "tree")

    text: str
    tree: ast.Node
    identifiers: frozenset[str]
    matches: Callable[[Mapping[str, object]], bool]
    matches_headers: Callable[[Mapping[str, object]], bool]

    def __init__(self, text: str, tree: ast.Node) -> None:
        self.text = text
        self.tree = tree
        self.identifiers = ast.identifiers(tree)
        self.matches = compile_match(tree, headers=False)
        self.matches_headers = compile_match(tree, headers=True)
        self._reference: dict[bool, Callable[[Mapping[str, object]], bool | None]] = {}
        self._pruner: Pruner | None = None

    def evaluate(self, properties: Mapping[str, object], *, headers: bool = False) -> bool | None:
        """The three-valued result: True, False, or None for unknown (SQL NULL).

        Slower than `matches`; for tests, tools and explaining why a message did not match.
        """
        function = self._reference.get(headers)
        if function is None:
            function = self._reference[headers] = compile_reference(self.tree, headers=headers)
        return function(properties)

    def may_match(self, summary: PageSummary) -> bool:
        """False only if no message folded into `summary` can match (header-mode semantics).

        Lets the paging store skip a page file without reading it; True whenever unsure.
        """
        if self._pruner is None:
            from pagemq.core.selector.prune import Pruner

            self._pruner = Pruner(self.tree)
        return self._pruner.may_match(summary)

    def python_source(self, *, headers: bool = False) -> str:
        """The generated matcher's source, for debugging."""
        return source_of(self.tree, headers=headers)

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def compile(text: str) -> Selector:
    """Compile a selector; raises SelectorError (with a 0-based position) on bad text.

    Results are kept in a bounded LRU cache (`CACHE_SIZE` entries), so a text subscribed to
    again and again is compiled once; errors are not cached.
    """
    if not isinstance(text, str):
        raise TypeError(f"a selector is a str, not {type(text).__name__}")
    return _compile_cached(text)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compile_cached(text: str) -> Selector:
    return Selector(text, parse(text))

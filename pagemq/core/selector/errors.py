"""The one exception a selector raises, carrying where in the text the problem is.

Positions are 0-based character offsets into the selector text, and every message says so,
because the text reaches users through STOMP ERROR frames and config errors where a bare
number would be ambiguous.
"""

from __future__ import annotations


class SelectorError(ValueError):
    """A selector that cannot be compiled: bad syntax, a bad literal or a type error.

    Never raised while matching: evaluation turns every runtime problem into "unknown".
    """

    def __init__(self, problem: str, position: int | None = None, text: str | None = None) -> None:
        where = f" at position {position} (0-based)" if position is not None else ""
        super().__init__(f"{problem}{where}")
        self.problem = problem
        self.position = position
        self.text = text

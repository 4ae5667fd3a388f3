"""Selector syntax tree: immutable nodes, each remembering its offset for error messages.

Every node has a static type (`kind`), known at compile time for literals, arithmetic and
predicates and `ANY` for a property, whose type is only known per message. The parser uses
kinds to refuse selectors that can never be evaluated (`3 + 5` as a whole selector,
`'a' > 1`), and the compiler uses them to decide, in STOMP header mode, whether a property
is read as a number, a string or a boolean (see `compiler`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

# Static kinds.
NUM: Final = "number"
STR: Final = "string"
BOOL: Final = "boolean"
ANY: Final = "property"

Value = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Literal:
    value: Value
    pos: int

    @property
    def kind(self) -> str:
        if isinstance(self.value, bool):
            return BOOL
        return STR if isinstance(self.value, str) else NUM


@dataclass(frozen=True, slots=True)
class Ident:
    name: str
    pos: int
    kind = ANY


@dataclass(frozen=True, slots=True)
class Unary:
    """Unary `+` or `-` on something that is not a literal (those are folded)."""

    op: str
    operand: Node
    pos: int
    kind = NUM


@dataclass(frozen=True, slots=True)
class Arith:
    op: str                # + - * /
    left: Node
    right: Node
    pos: int
    kind: str = NUM        # `+` is STR for string concatenation, ANY for property + property


@dataclass(frozen=True, slots=True)
class Compare:
    op: str                # = <> < <= > >=; a literal operand is always on the right
    left: Node
    right: Node
    pos: int
    kind = BOOL


@dataclass(frozen=True, slots=True)
class Between:
    operand: Node
    low: Node
    high: Node
    negated: bool
    pos: int
    kind = BOOL


@dataclass(frozen=True, slots=True)
class In:
    operand: Ident
    values: tuple[str, ...]
    negated: bool
    pos: int
    kind = BOOL


@dataclass(frozen=True, slots=True)
class Like:
    operand: Node
    pattern: str
    escape: str | None
    negated: bool
    pos: int
    kind = BOOL


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    negated: bool
    pos: int
    kind = BOOL


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    pos: int
    kind = BOOL


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Node, ...]   # flattened: a AND b AND c is one node
    pos: int
    kind = BOOL


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Node, ...]
    pos: int
    kind = BOOL


Node = Literal | Ident | Unary | Arith | Compare | Between | In | Like | IsNull | Not | And | Or

PREDICATES: Final = (Compare, Between, In, Like, IsNull)


def children(node: Node) -> tuple[Node, ...]:
    match node:
        case Unary() | Not() | In() | Like() | IsNull():
            return (node.operand,)
        case Arith() | Compare():
            return (node.left, node.right)
        case Between():
            return (node.operand, node.low, node.high)
        case And() | Or():
            return node.items
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node, parents before children; iterative, so any depth is safe."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def depth(node: Node) -> int:
    """Height of the tree, computed without recursion (the parser bounds it with this)."""
    best = 0
    stack = [(node, 1)]
    while stack:
        current, level = stack.pop()
        best = max(best, level)
        stack.extend((child, level + 1) for child in children(current))
    return best


def identifiers(node: Node) -> frozenset[str]:
    return frozenset(n.name for n in walk(node) if isinstance(n, Ident))

"""Recursive-descent parser for the Jakarta Messaging selector grammar (§3.8.1), with type checks.

Precedence, loosest first, as SQL-92: OR, AND, NOT, comparisons (`= <> < <= > >=`,
`[NOT] BETWEEN`, `[NOT] IN`, `[NOT] LIKE`, `IS [NOT] NULL`; not associative), `+ -`,
`* /`, unary `+ -`. So `NOT a = 1` is `NOT (a = 1)`.

The compile-time type checks follow ActiveMQ's (`ComparisonExpression.checkLessThanOperand`,
`checkEqualOperand`, `SelectorParser.asBooleanExpression`, read for ideas; nothing copied):
a selector must be boolean; AND/OR/NOT take predicates or bare properties; `<`-style
comparisons take no string or boolean operand; NULL appears only in `IS [NOT] NULL`; IN takes
a property and string literals. We also refuse comparisons whose two sides have different
known types (`'a' = 1`), which could never be true.
"""

from __future__ import annotations

from typing import Final

from pagemq.core.selector import ast
from pagemq.core.selector.ast import ANY, BOOL, NUM, STR, Node
from pagemq.core.selector.errors import SelectorError
from pagemq.core.selector.lexer import END, IDENT, KEYWORD, NUMBER, OP, STRING, Token, tokenize

MAX_DEPTH: Final = 48   # keeps our recursion and the generated Python's nesting bounded
_LONG_MAX: Final = 2**63 - 1
_ORDERING: Final = frozenset({"<", "<=", ">", ">="})
_FLIPPED: Final = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_KIND_NAMES: Final = {NUM: "a number", STR: "a string", BOOL: "a boolean", ANY: "a property"}


def parse(text: str) -> Node:
    """The syntax tree of `text`; an empty (all-blank) selector is TRUE, as no selector."""
    parser = _Parser(text)
    node = parser.selector()
    if ast.depth(node) > MAX_DEPTH:
        raise SelectorError(f"selector nests deeper than {MAX_DEPTH} levels", 0, text)
    return node


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.nesting = 0

    # -- token helpers --------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        if token.kind != END:
            self.index += 1
        return token

    def at(self, kind: str, value: object = None) -> bool:
        token = self.tokens[self.index]
        return token.kind == kind and (value is None or token.value == value)

    def at_keyword(self, *words: str) -> bool:
        token = self.tokens[self.index]
        return token.kind == KEYWORD and token.value in words

    def expect(self, kind: str, value: object, what: str) -> Token:
        if not self.at(kind, value):
            raise self.unexpected(f"expected {what}")
        return self.advance()

    def unexpected(self, hint: str | None = None) -> SelectorError:
        token = self.token
        problem = f"unexpected {token.describe()}"
        if hint:
            problem += f" ({hint})"
        return SelectorError(problem, token.pos, self.text)

    def error(self, problem: str, pos: int) -> SelectorError:
        return SelectorError(problem, pos, self.text)

    def enter(self, pos: int) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(f"selector nests deeper than {MAX_DEPTH} levels", pos)

    # -- grammar --------------------------------------------------------------------------

    def selector(self) -> Node:
        if self.at(END):
            return ast.Literal(True, 0)
        node = self.or_expr()
        if not self.at(END):
            raise self.unexpected("expected AND, OR or the end of the selector")
        self.check_boolean(node, "a selector")
        return node

    def or_expr(self) -> Node:
        items = [self.and_expr()]
        while self.at_keyword("OR"):
            self.advance()
            items.append(self.and_expr())
        if len(items) == 1:
            return items[0]
        for item in items:
            self.check_boolean(item, "an OR operand")
        return ast.Or(tuple(items), items[0].pos)

    def and_expr(self) -> Node:
        items = [self.not_expr()]
        while self.at_keyword("AND"):
            self.advance()
            items.append(self.not_expr())
        if len(items) == 1:
            return items[0]
        for item in items:
            self.check_boolean(item, "an AND operand")
        return ast.And(tuple(items), items[0].pos)

    def not_expr(self) -> Node:
        if not self.at_keyword("NOT"):
            return self.comparison()
        pos = self.advance().pos
        self.enter(pos)
        operand = self.not_expr()
        self.nesting -= 1
        self.check_boolean(operand, "a NOT operand")
        return ast.Not(operand, pos)

    def comparison(self) -> Node:
        left = self.additive()
        token = self.token
        if token.kind == OP and token.value in _FLIPPED:
            self.advance()
            return self.compare(str(token.value), left, self.additive(), token.pos)
        if token.kind != KEYWORD or token.value not in ("IS", "NOT", "BETWEEN", "IN", "LIKE"):
            return left
        if token.value == "IS":
            return self.is_null(left)
        negated = token.value == "NOT"
        if negated:
            self.advance()
            if not self.at_keyword("BETWEEN", "IN", "LIKE"):
                raise self.unexpected("expected BETWEEN, IN or LIKE after NOT")
        keyword = self.advance()
        if keyword.value == "BETWEEN":
            return self.between(left, negated)
        if keyword.value == "IN":
            return self.in_list(left, negated)
        return self.like(left, negated)

    def compare(self, op: str, left: Node, right: Node, pos: int) -> Node:
        start = left.pos
        if isinstance(left, ast.Literal) and not isinstance(right, ast.Literal):
            left, right, op = right, left, _FLIPPED[op]
        if op in _ORDERING:
            self.check_orderable(left, op)
            self.check_orderable(right, op)
        elif {left.kind, right.kind} - {ANY} not in ({NUM}, {STR}, {BOOL}, set()):
            raise self.error(
                f"cannot compare {_KIND_NAMES[left.kind]} with {_KIND_NAMES[right.kind]}", pos
            )
        return ast.Compare(op, left, right, start)

    def is_null(self, left: Node) -> Node:
        self.advance()
        negated = self.at_keyword("NOT")
        if negated:
            self.advance()
        self.expect(KEYWORD, "NULL", "NULL after IS [NOT]")
        return ast.IsNull(left, negated, left.pos)

    def between(self, operand: Node, negated: bool) -> Node:
        low = self.additive()
        self.expect(KEYWORD, "AND", "AND in BETWEEN ... AND ...")
        high = self.additive()
        for node in (operand, low, high):
            self.check_orderable(node, "BETWEEN")
        return ast.Between(operand, low, high, negated, operand.pos)

    def in_list(self, operand: Node, negated: bool) -> Node:
        if not isinstance(operand, ast.Ident):
            raise self.error("IN needs a property name on its left", operand.pos)
        self.expect(OP, "(", "'(' after IN")
        values = [self.string_literal("IN list")]
        while self.at(OP, ","):
            self.advance()
            values.append(self.string_literal("IN list"))
        self.expect(OP, ")", "',' or ')' in the IN list")
        return ast.In(operand, tuple(values), negated, operand.pos)

    def like(self, operand: Node, negated: bool) -> Node:
        if operand.kind in (NUM, BOOL):
            raise self.error(f"LIKE needs a string, not {_KIND_NAMES[operand.kind]}", operand.pos)
        pattern = self.string_literal("LIKE pattern")
        escape = None
        if self.at_keyword("ESCAPE"):
            self.advance()
            escape_pos = self.token.pos
            escape = self.string_literal("ESCAPE character")
            if len(escape) != 1:
                raise self.error(f"ESCAPE takes exactly one character, not {escape!r}", escape_pos)
        return ast.Like(operand, pattern, escape, negated, operand.pos)

    def string_literal(self, what: str) -> str:
        if not self.at(STRING):
            raise self.unexpected(f"expected a string literal in the {what}")
        return str(self.advance().value)

    def additive(self) -> Node:
        left = self.multiplicative()
        while self.at(OP, "+") or self.at(OP, "-"):
            token = self.advance()
            left = self.arith(str(token.value), left, self.multiplicative(), token.pos)
        return left

    def multiplicative(self) -> Node:
        left = self.unary()
        while self.at(OP, "*") or self.at(OP, "/"):
            token = self.advance()
            left = self.arith(str(token.value), left, self.unary(), token.pos)
        return left

    def arith(self, op: str, left: Node, right: Node, pos: int) -> Node:
        kinds = {left.kind, right.kind}
        if BOOL in kinds:
            raise self.error(f"cannot use a boolean in arithmetic ('{op}')", pos)
        if op == "+" and STR in kinds:
            if NUM in kinds:
                raise self.error("cannot add a number and a string", pos)
            return ast.Arith(op, left, right, left.pos, STR)
        if STR in kinds:
            raise self.error(f"cannot use a string in arithmetic ('{op}')", pos)
        kind = ANY if op == "+" and kinds == {ANY} else NUM
        return ast.Arith(op, left, right, left.pos, kind)

    def unary(self) -> Node:
        if not (self.at(OP, "+") or self.at(OP, "-")):
            return self.primary()
        token = self.advance()
        if token.value == "-" and self.at(NUMBER):
            # Folded here so that LONG_MIN, whose magnitude is no long, can be written.
            number = self.advance()
            assert isinstance(number.value, int | float)
            return ast.Literal(-number.value, token.pos)
        self.enter(token.pos)
        operand = self.unary()
        self.nesting -= 1
        if operand.kind in (STR, BOOL):
            raise self.error(
                f"unary '{token.value}' needs a number, not {_KIND_NAMES[operand.kind]}", token.pos
            )
        if isinstance(operand, ast.Literal):
            value = operand.value
            assert isinstance(value, int | float)
            return ast.Literal(-value if token.value == "-" else value, token.pos)
        return ast.Unary(str(token.value), operand, token.pos)

    def primary(self) -> Node:
        token = self.token
        if token.kind == NUMBER:
            self.advance()
            if isinstance(token.value, int) and token.value > _LONG_MAX:
                raise self.error(f"integer literal {token.raw} out of range for a long", token.pos)
            return ast.Literal(token.value, token.pos)  # type: ignore[arg-type]
        if token.kind == STRING:
            self.advance()
            return ast.Literal(str(token.value), token.pos)
        if token.kind == IDENT:
            self.advance()
            return ast.Ident(str(token.value), token.pos)
        if token.kind == KEYWORD and token.value in ("TRUE", "FALSE"):
            self.advance()
            return ast.Literal(token.value == "TRUE", token.pos)
        if token.kind == KEYWORD and token.value == "NULL":
            raise self.error("NULL is only allowed in IS NULL / IS NOT NULL", token.pos)
        if token.kind == OP and token.value == "(":
            self.advance()
            self.enter(token.pos)
            node = self.or_expr()
            self.nesting -= 1
            self.expect(OP, ")", "')'")
            return node
        raise self.unexpected("expected a value, a property name or '('")

    # -- type checks ------------------------------------------------------------------------

    def check_boolean(self, node: Node, role: str) -> None:
        """Predicates, TRUE/FALSE and bare properties (tested at run time) can be conditions."""
        if node.kind == BOOL or isinstance(node, ast.Ident):
            return
        raise self.error(f"{role} must be a condition, not {_KIND_NAMES[node.kind]} expression",
                         node.pos)

    def check_orderable(self, node: Node, op: str) -> None:
        if node.kind in (STR, BOOL):
            raise self.error(f"'{op}' compares numbers only, not {_KIND_NAMES[node.kind]}", node.pos)

"""Selector text to tokens, each with its 0-based offset for error messages.

The literal syntax is Java's, because Jakarta Messaging §3.8.1.1 defines selector literals
as "the integer literal syntax" and "the floating-point literal syntax of the Java
programming language": decimal, hex (`0x1F`) and octal (`017`) integers with an optional
`L`, and floats such as `7.`, `.5`, `1.5e3`. Java's `F`/`D` float suffixes, binary
literals and `_` digit separators are not accepted (ActiveMQ's grammar refuses them too).

Identifiers are Java identifiers, plus Artemis' quoted identifiers (ARTEMIS-2761, after
Qpid JMS): `"a.test"` names the property `a.test`, whatever characters it holds, with `""`
standing for one `"` inside. A quoted identifier is never a keyword (`"AND"` is a property)
and reads exactly like the unquoted name when that is a valid identifier (`"JMSPriority"`
is JMSPriority).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final

from pagemq.core.selector.errors import SelectorError

KEYWORDS: Final = frozenset(
    {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}
)
OPERATORS: Final = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")

# Kinds of token.
NUMBER: Final = "number"
STRING: Final = "string"
IDENT: Final = "identifier"
KEYWORD: Final = "keyword"
OP: Final = "operator"
END: Final = "end"

_LONG_MAX: Final = 2**63 - 1
_DECIMAL = re.compile(r"(\d+)(\.\d*)?([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?", re.ASCII)
_HEX = re.compile(r"0[xX]([0-9a-fA-F]+)", re.ASCII)
_ASCII_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_ASCII_PART: Final = _ASCII_START | frozenset("0123456789")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    value: object   # int | float | str; keywords are upper-cased, operators as written
    pos: int
    raw: str        # the source text of the token, for error messages

    def describe(self) -> str:
        return "end of selector" if self.kind == END else f"{self.kind} {self.raw!r}"


def is_identifier_start(ch: str) -> bool:
    """Java's `Character.isJavaIdentifierStart`: letters, `$` and other currency signs, `_`."""
    if ch in _ASCII_START:
        return True
    return ch.isalpha() or unicodedata.category(ch) in ("Sc", "Pc", "Nl")


def is_identifier_part(ch: str) -> bool:
    if ch in _ASCII_PART:
        return True
    return is_identifier_start(ch) or unicodedata.category(ch) in ("Nd", "Mn", "Mc")


def tokenize(text: str) -> list[Token]:
    """All tokens of `text`, ending with one END token; SelectorError on a bad character."""
    tokens: list[Token] = []
    pos, size = 0, len(text)
    while True:
        while pos < size and text[pos].isspace():
            pos += 1
        if pos >= size:
            tokens.append(Token(END, None, pos, ""))
            return tokens
        ch = text[pos]
        if ch == "'":
            token = _string(text, pos)
        elif ch == '"':
            token = _quoted_identifier(text, pos)
        elif "0" <= ch <= "9" or (ch == "." and "0" <= text[pos + 1 : pos + 2] <= "9"):
            token = _number(text, pos)
        elif is_identifier_start(ch):
            token = _word(text, pos)
        else:
            token = _operator(text, pos)
        tokens.append(token)
        pos += len(token.raw)


def _string(text: str, start: int) -> Token:
    """A quoted string; a doubled quote `''` stands for one quote character (SQL)."""
    parts: list[str] = []
    pos = start + 1
    while True:
        end = text.find("'", pos)
        if end < 0:
            raise SelectorError("unterminated string literal", start, text)
        parts.append(text[pos:end])
        if text.startswith("''", end):
            parts.append("'")
            pos = end + 2
            continue
        return Token(STRING, "".join(parts), start, text[start : end + 1])


def _quoted_identifier(text: str, start: int) -> Token:
    """A double-quoted property name (Artemis' StrictParser QUOTED_ID); `""` is one quote."""
    parts: list[str] = []
    pos = start + 1
    while True:
        end = text.find('"', pos)
        if end < 0:
            raise SelectorError("unterminated quoted identifier", start, text)
        parts.append(text[pos:end])
        if text.startswith('""', end):
            parts.append('"')
            pos = end + 2
            continue
        return Token(IDENT, "".join(parts), start, text[start : end + 1])


def _word(text: str, start: int) -> Token:
    pos = start + 1
    while pos < len(text) and is_identifier_part(text[pos]):
        pos += 1
    raw = text[start:pos]
    upper = raw.upper()
    if upper in KEYWORDS:
        return Token(KEYWORD, upper, start, raw)
    return Token(IDENT, raw, start, raw)


def _operator(text: str, pos: int) -> Token:
    for op in OPERATORS:
        if text.startswith(op, pos):
            return Token(OP, op, pos, op)
    raise SelectorError(f"unexpected character {text[pos]!r}", pos, text)


def _number(text: str, start: int) -> Token:
    hex_match = _HEX.match(text, start)
    if hex_match is not None:
        end = hex_match.end()
        value: int | float = int(hex_match.group(1), 16)
        end = _long_suffix(text, end)
    else:
        match = _DECIMAL.match(text, start)
        assert match is not None  # the caller saw a digit, or a dot and a digit
        end = match.end()
        if match.group(1) is not None and match.group(2) is None and match.group(3) is None:
            value = _integer(match.group(1), start, text)
            end = _long_suffix(text, end)
        else:
            value = float(match.group(0))
            if value == float("inf"):
                raise SelectorError("floating-point literal out of range", start, text)
    if end < len(text) and (is_identifier_part(text[end]) or text[end] == "."):
        raise SelectorError(f"unexpected character {text[end]!r} after a number", end, text)
    raw = text[start:end]
    if isinstance(value, int) and value > _LONG_MAX + 1:  # LONG_MAX + 1 is legal after '-'
        raise SelectorError(f"integer literal {raw} out of range for a long", start, text)
    return Token(NUMBER, value, start, raw)


def _integer(digits: str, start: int, text: str) -> int:
    if len(digits) > 1 and digits[0] == "0":
        if any(d in "89" for d in digits):
            raise SelectorError(f"invalid octal literal {digits}", start, text)
        return int(digits, 8)
    if len(digits) > 20:
        raise SelectorError(f"integer literal {digits[:20]}... out of range for a long", start, text)
    return int(digits)


def _long_suffix(text: str, end: int) -> int:
    return end + 1 if text[end : end + 1] in ("l", "L") else end

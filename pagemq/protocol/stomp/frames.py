"""STOMP frames: the `Frame` value, header escaping per version, and the encoder.

Role-agnostic: the server encodes MESSAGE/RECEIPT/ERROR with it and the perf client encodes
SEND/ACK with it. Encoding is on the broker's hot path (one MESSAGE per delivery), so the
common case — no header needs escaping — costs one comprehension, one `str.join`, four
C-speed scans and one `bytes.join`; escaping is only done when a scan finds something.

Escaping (STOMP 1.1 "Value Encoding", 1.2 adds `\\r`): `\\` -> `\\\\`, LF -> `\\n`,
`:` -> `\\c`, CR -> `\\r` (1.2 only). STOMP 1.0 has no escapes, so a 1.0 header cannot
carry a line feed (or a colon in its name). CONNECT, STOMP and CONNECTED frames are never
escaped in any version (1.2 spec, "Value Encoding").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

from pagemq.protocol.errors import FrameError, LocalProtocolError

__all__ = [
    "CLIENT_COMMANDS",
    "COMMANDS",
    "HEARTBEAT",
    "SERVER_COMMANDS",
    "UNESCAPED_COMMANDS",
    "VERSIONS",
    "Frame",
    "encode_frame",
    "escape",
    "header_pairs",
    "sanitize_unescaped",
    "unescape",
]

HEARTBEAT = b"\n"
VERSIONS = ("1.0", "1.1", "1.2")

CLIENT_COMMANDS = frozenset(
    {"CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT",
     "ABORT", "DISCONNECT"}
)
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
COMMANDS = CLIENT_COMMANDS | SERVER_COMMANDS
UNESCAPED_COMMANDS = frozenset({"CONNECT", "STOMP", "CONNECTED"})


class Frame:
    """One decoded frame. `headers` keeps the first occurrence of a repeated header (spec)."""

    __slots__ = ("body", "command", "headers")

    def __init__(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.command = command
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"Frame({self.command!r}, {self.headers!r}, {self.body!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (self.command, self.headers, self.body) == (other.command, other.headers, other.body)

    # No __hash__: a class defining __eq__ alone is unhashable, as a mutable value should be.


# -- escaping -------------------------------------------------------------------------------

_UNESCAPES = {
    "1.1": {"\\\\": "\\", "\\n": "\n", "\\c": ":"},
    "1.2": {"\\\\": "\\", "\\n": "\n", "\\c": ":", "\\r": "\r"},
}
# A backslash and whatever follows it (possibly nothing, at the end of the text).
_ESCAPE_RE = re.compile(r"\\.?", re.DOTALL)
# Per version, the sequences other than the escaped backslash: a text without `\\\\` is
# unescaped by replacing each (a plain `str.replace` is several times cheaper than the
# regular expression's callback per sequence, and ids such as the Spark sink's
# `_AMQ_DUPL_ID` carry four `\\c` each).
_SIMPLE_UNESCAPES = {
    version: tuple((sequence, char) for sequence, char in table.items() if sequence != "\\\\")
    for version, table in _UNESCAPES.items()
}


def escape(text: str, version: str) -> str:
    """Escape one header name or value for `version` (1.0: returned unchanged)."""
    if version == "1.0":
        return text
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    if version != "1.1":
        text = text.replace("\r", "\\r")
    return text


def unescape(text: str, version: str) -> str:
    """Undo `escape`; an undefined sequence (`\\t`, a trailing `\\`) is a FrameError (spec)."""
    table = _UNESCAPES.get(version)
    if table is None or "\\" not in text:
        return text
    if "\\\\" not in text:  # every backslash starts a sequence: replace the known ones
        simple = text
        for sequence, char in _SIMPLE_UNESCAPES[version]:
            simple = simple.replace(sequence, char)
        if "\\" not in simple:
            return simple
        # an undefined sequence is left: the general path names it

    def replace(match: re.Match[str]) -> str:
        sequence = match.group()
        try:
            return table[sequence]
        except KeyError:
            raise FrameError(
                f"invalid escape sequence {sequence!r} in header {text!r} (STOMP {version})"
            ) from None

    return _ESCAPE_RE.sub(replace, text)


# -- encoding -------------------------------------------------------------------------------


def encode_frame(
    command: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    body: bytes = b"",
    *,
    version: str = "1.2",
) -> bytes:
    """Encode one frame; adds `content-length` when the body is non-empty and none was given.

    A body always gets a content-length so it may contain NUL bytes, and so the receiver can
    take it in one slice instead of searching for the NUL.
    """
    pairs = header_pairs(headers)
    if version == "1.0" or command in UNESCAPED_COMMANDS:
        text = _header_text_raw(pairs)
    else:
        text = _header_text(pairs, version)
    return _assemble(command, text, body)


def _header_text(pairs: Collection[tuple[str, str]], version: str) -> str:
    """`name:value` lines joined by LF, escaped for 1.1/1.2 only where needed."""
    lines = [f"{name}:{value}" for name, value in pairs]
    if not lines:
        return ""
    text = "\n".join(lines)
    if (
        text.count(":") != len(lines)
        or text.count("\n") > len(lines) - 1
        or "\\" in text
        or "\r" in text
    ):
        text = "\n".join([f"{escape(n, version)}:{escape(v, version)}" for n, v in pairs])
    return text


def header_pairs(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
) -> Collection[tuple[str, str]]:
    """Headers as a re-iterable collection of pairs; exact type checks first (hot path)."""
    if isinstance(headers, dict):
        return headers.items()
    if isinstance(headers, (list, tuple)):
        return headers
    if isinstance(headers, Mapping):
        return headers.items()
    return list(headers)


def _header_text_raw(pairs: Iterable[tuple[str, str]]) -> str:
    """Unescaped header lines (STOMP 1.0, CONNECT, CONNECTED): refuse what cannot be carried.

    A colon in a value is fine (the first colon splits); a line feed anywhere, or a colon in
    a name, would change the frame's meaning.
    """
    lines = []
    for name, value in pairs:
        if ":" in name or "\n" in name or "\n" in value:
            raise LocalProtocolError(
                f"header {name!r}: {value!r} cannot be sent without escaping "
                "(a colon in the name or a line feed)"
            )
        lines.append(f"{name}:{value}")
    return "\n".join(lines)


def sanitize_unescaped(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Make headers sendable without escaping: line breaks become spaces, a colon in a name `_`.

    For delivering to a STOMP 1.0 consumer a message whose producer spoke 1.1/1.2: losing a
    line break is better than failing the delivery or corrupting the stream.
    """
    return [
        (
            name.replace(":", "_").replace("\r", " ").replace("\n", " "),
            value.replace("\r", " ").replace("\n", " "),
        )
        for name, value in pairs
    ]


def _assemble(command: str, text: str, body: bytes) -> bytes:
    if text:
        has_length = text.startswith("content-length:") or "\ncontent-length:" in text
        if has_length:
            _check_given_length(text, body)
        elif body:
            text = f"{text}\ncontent-length:{len(body)}"
        head = f"{command}\n{text}\n\n"
    elif body:
        head = f"{command}\ncontent-length:{len(body)}\n\n"
    else:
        return f"{command}\n\n\x00".encode()
    return b"".join((head.encode(), body, b"\x00"))


def _check_given_length(text: str, body: bytes) -> None:
    """A caller-given content-length must match the body, or the stream would be corrupt."""
    start = text.find("content-length:") if text.startswith("content-length:") else (
        text.find("\ncontent-length:") + 1
    )
    end = text.find("\n", start)
    given = text[start + len("content-length:") : None if end < 0 else end]
    if given != str(len(body)):
        raise LocalProtocolError(f"content-length {given!r} does not match a body of {len(body)} bytes")

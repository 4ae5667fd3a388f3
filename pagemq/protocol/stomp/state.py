"""The server-side connection state table, as data (h11's `_state.py` idea).

`TRANSITIONS` maps (state, event type) to the next state; any pair not in it is a protocol
error, raised by `StompConnection` with the message `unexpected_message` gives. ERRORED is
entered by any error (ours or the peer's) and left by nothing: the shell sends one ERROR and
closes. `render_into()` writes the table into docs/stomp.md (`python -m
pagemq.protocol.stomp.state docs/stomp.md`); a test keeps the document in step with the code.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

from pagemq.protocol.stomp.events import (
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Disconnect,
    Nack,
    Send,
    Subscribe,
    Unsubscribe,
)
from pagemq.protocol.stomp.frames import SERVER_COMMANDS

__all__ = [
    "COMMAND_EVENTS",
    "TRANSITIONS",
    "State",
    "render_into",
    "render_markdown",
    "unexpected_message",
]


class State(enum.Enum):
    AWAITING_CONNECT = "AWAITING_CONNECT"
    CONNECTED = "CONNECTED"
    DISCONNECTED = "DISCONNECTED"
    ERRORED = "ERRORED"


# The client command each event type comes from (STOMP is CONNECT's 1.1+ spelling).
COMMAND_EVENTS: dict[str, type] = {
    "CONNECT": Connect,
    "STOMP": Connect,
    "SEND": Send,
    "SUBSCRIBE": Subscribe,
    "UNSUBSCRIBE": Unsubscribe,
    "ACK": Ack,
    "NACK": Nack,
    "BEGIN": Begin,
    "COMMIT": Commit,
    "ABORT": Abort,
    "DISCONNECT": Disconnect,
}

_WHILE_CONNECTED = (Send, Subscribe, Unsubscribe, Ack, Nack, Begin, Commit, Abort)

TRANSITIONS: dict[tuple[State, type], State] = {
    (State.AWAITING_CONNECT, Connect): State.CONNECTED,
    **{(State.CONNECTED, event): State.CONNECTED for event in _WHILE_CONNECTED},
    (State.CONNECTED, Disconnect): State.DISCONNECTED,
}


def unexpected_message(state: State, command: str) -> str:
    """The ERROR message for `command` arriving in `state` (a pair not in TRANSITIONS)."""
    if command in SERVER_COMMANDS:
        return f"{command} is a server frame; a client may not send it"
    if state is State.AWAITING_CONNECT:
        return f"expected CONNECT or STOMP frame, got {command}"
    if state is State.CONNECTED:
        return f"already connected: a second {command} frame is not allowed"
    if state is State.DISCONNECTED:
        return f"got {command} after DISCONNECT"
    return f"got {command} on a connection that has already failed"


def render_markdown() -> str:
    """The transition table as Markdown: one row per client frame, one column per state."""
    commands: dict[type, list[str]] = {}
    for command, event in COMMAND_EVENTS.items():
        commands.setdefault(event, []).append(command)
    rows = [
        "| frame (event) | " + " | ".join(state.name for state in State) + " |",
        "|---|" + "---|" * len(State),
    ]
    for event, names in commands.items():
        cells = []
        for state in State:
            target = TRANSITIONS.get((state, event))
            cells.append(f"→ {target.name}" if target is not None else "error")
        rows.append(f"| {', '.join(names)} (`{event.__name__}`) | " + " | ".join(cells) + " |")
    rows.append("| MESSAGE, RECEIPT, ERROR, CONNECTED | " + " | ".join("error" for _ in State) + " |")
    return "\n".join(rows) + "\n"


BEGIN_MARKER = "<!-- state-table:begin (python -m pagemq.protocol.stomp.state docs/stomp.md) -->"
END_MARKER = "<!-- state-table:end -->"


def render_into(document: str) -> str:
    """`document` with the text between the state-table markers replaced by the table."""
    start = document.index(BEGIN_MARKER) + len(BEGIN_MARKER)
    end = document.index(END_MARKER, start)
    return f"{document[:start]}\n{render_markdown()}{document[end:]}"


def main(argv: list[str]) -> None:
    """Print the table, or with a path rewrite that Markdown file's table section in place."""
    if not argv:
        print(render_markdown(), end="")
        return
    path = Path(argv[0])
    path.write_text(render_into(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])

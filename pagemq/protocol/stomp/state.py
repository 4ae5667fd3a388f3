"""The server-side connection state table, as data (h11's `_state.py` idea), and the script
that writes every STOMP state table into docs/stomp.md.

`TRANSITIONS` maps (state, event type) to the next state; any pair not in it is a protocol
error, raised by `StompConnection` with the message `unexpected_message` gives. ERRORED is
entered by any error (ours or the peer's) and left by nothing: the shell sends one ERROR and
closes. The per-name tables the session follows live beside this one
(`subscription_state.SUBSCRIPTIONS` and `ACK_SCOPES`, `transaction_state.TRANSACTIONS`).
`render_into()` writes all of them into docs/stomp.md (`python -m
pagemq.protocol.stomp.state docs/stomp.md`); a test keeps the document in step with the code.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
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
from pagemq.protocol.stomp.subscription_state import SUBSCRIPTIONS, render_ack_modes
from pagemq.protocol.stomp.transaction_state import TRANSACTIONS

__all__ = [
    "COMMAND_EVENTS",
    "SECTIONS",
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


# docs/stomp.md section name -> what is written between its markers.
SECTIONS: dict[str, Callable[[], str]] = {
    "state-table": render_markdown,
    "subscription-table": SUBSCRIPTIONS.render_markdown,
    "ack-mode-table": render_ack_modes,
    "transaction-table": TRANSACTIONS.render_markdown,
}


def markers(section: str) -> tuple[str, str]:
    """The comments that open and close `section` in the document."""
    return (f"<!-- {section}:begin (python -m pagemq.protocol.stomp.state docs/stomp.md) -->",
            f"<!-- {section}:end -->")


def render_into(document: str) -> str:
    """`document` with the text between each section's markers replaced by its table."""
    for section, render in SECTIONS.items():
        begin, end = markers(section)
        start = document.index(begin) + len(begin)
        stop = document.index(end, start)
        document = f"{document[:start]}\n{render()}{document[stop:]}"
    return document


def main(argv: list[str]) -> None:
    """Print the tables, or with a path rewrite that Markdown file's table sections in place."""
    if not argv:
        print("\n".join(f"{section}:\n{render()}" for section, render in SECTIONS.items()), end="")
        return
    path = Path(argv[0])
    path.write_text(render_into(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])

"""The server-side connection state table, as data (h11's `_state.py` idea).

`TRANSITIONS` maps (state, event type) to the next state; any pair not in it is a protocol
error, raised by `StompConnection` with the message `unexpected_message` gives. ERRORED is
entered by any error (ours or the peer's) and left by nothing: the shell sends one ERROR and
closes. `render_markdown()` writes the table into docs/stomp.md (`python -m
pagemq.protocol.stomp.state`); a test keeps the document in step with the code.
"""

from __future__ import annotations

import enum

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

__all__ = ["COMMAND_EVENTS", "TRANSITIONS", "State", "render_markdown", "unexpected_message"]


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
    """The transition table as Markdown: one row per state, one column per event."""
    events = list(dict.fromkeys(COMMAND_EVENTS.values()))
    header = "| state | " + " | ".join(event.__name__ for event in events) + " |"
    rule = "|---|" + "---|" * len(events)
    rows = [header, rule]
    for state in State:
        cells = []
        for event in events:
            target = TRANSITIONS.get((state, event))
            cells.append(f"→ {target.name}" if target is not None else "error")
        rows.append(f"| {state.name} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render_markdown(), end="")

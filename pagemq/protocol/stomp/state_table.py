"""A per-name state table as data: the shape shared by the subscription and transaction tables.

A STOMP connection names things the server must track: subscriptions (by `id`) and
transactions (by `transaction`). What a frame may do to one depends on the state of the thing
it names, and a frame the state does not allow is answered with an ERROR. Keeping each
machine as a table (h11's `_state.py` idea, as `state.TRANSITIONS` does for the connection)
puts every allowed move and every refusal message in one place that the session follows and
that `state.render_into()` writes into docs/stomp.md, so code and documentation cannot drift.

The table holds no objects and runs no I/O: the session keeps each subscription's or
transaction's state and asks `step()` for the next one. A pair the table does not allow
raises `RemoteProtocolError` carrying the refusal's message, which the session answers with
an ERROR frame like any other protocol error.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pagemq.protocol.errors import RemoteProtocolError

__all__ = ["ConnectionEnds", "StateTable"]

S = TypeVar("S", bound=enum.Enum)


class ConnectionEnds:
    """Not a frame: the connection is going (DISCONNECT, ERROR or a lost socket), so every
    subscription closes and every open transaction rolls back."""


@dataclass(frozen=True, slots=True)
class StateTable(Generic[S]):
    """`moves` says where each allowed (state, event type) goes; `refusals` holds the ERROR
    message (a `str.format` template with `{name}`: the id or transaction name the frame
    gave) for each pair a client can reach but may not take. States in `waiting` carry out no
    frame: the connection holds its frames until the state is left. `rows` lists
    (label, event type) in the order the documentation shows them."""

    states: type[S]
    moves: Mapping[tuple[S, type], S]
    refusals: Mapping[tuple[S, type], str]
    rows: Sequence[tuple[str, type]]
    waiting: frozenset[S] = frozenset()

    def step(self, state: S, event: type, name: str | None) -> S:
        """The state after `event` in `state`; raises the refusal if the table has no move."""
        target = self.moves.get((state, event))
        if target is None:
            raise self.refuse(state, event, name)
        return target

    def refuse(self, state: S, event: type, name: str | None) -> RemoteProtocolError:
        """The error for `event` in `state` (a pair with a refusal), for the caller to raise."""
        return RemoteProtocolError(self.refusals[(state, event)].format(name=name))

    def terminal(self) -> list[S]:
        """States nothing leaves (the thing is gone; its name may be used again)."""
        left = {state for state, _event in self.moves}
        return [state for state in self.states if state not in left and state not in self.waiting]

    def render_markdown(self) -> str:
        """One row per event, one column per state that is not terminal; a cell is the next
        state, `error: <message>`, `waits` (the frame is held) or `—` (cannot happen)."""
        columns = [state for state in self.states if state not in self.terminal()]
        lines = [
            "| frame (event) | " + " | ".join(state.name for state in columns) + " |",
            "|---|" + "---|" * len(columns),
        ]
        for label, event in self.rows:
            lines.append(f"| {label} | " + " | ".join(self._cell(state, event) for state in columns) + " |")
        return "\n".join(lines) + "\n"

    def _cell(self, state: S, event: type) -> str:
        target = self.moves.get((state, event))
        if target is not None:
            return f"→ {target.name}"
        refusal = self.refusals.get((state, event))
        if refusal is not None:
            return "error: " + refusal.format(name="…")
        if state in self.waiting and event is not ConnectionEnds:
            return "waits"
        return "—"

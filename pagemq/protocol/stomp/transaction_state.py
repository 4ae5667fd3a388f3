"""Transaction states per name, as data.

A transaction name is NONE until BEGIN makes it BEGUN; SEND, ACK and NACK carrying its
`transaction` header add to it. COMMIT makes it COMMITTING: the broker has taken the commit,
and while its page files are still being written every later frame of the connection waits
(a SEND right behind a COMMIT must not overtake it). Once they are written it is COMMITTED.
ABORT, or the connection ending, makes it ABORTED (its ACKs and NACKs are undone). COMMITTED
and ABORTED are terminal for that transaction and free its name: a later BEGIN with the same
name starts a new one from NONE.

Transactions belong to the connection that began them: a frame naming a transaction another
connection began finds NONE here and is refused like one naming no transaction at all.
"""

from __future__ import annotations

import enum

from pagemq.protocol.stomp.events import Abort, Ack, Begin, Commit, Nack, Send
from pagemq.protocol.stomp.state_table import ConnectionEnds, StateTable

__all__ = ["TRANSACTIONS", "CommitApplied", "TxState"]


class TxState(enum.Enum):
    NONE = "NONE"
    BEGUN = "BEGUN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


class CommitApplied:
    """Not a frame: a COMMIT's writes are done and it has taken effect (at once when it
    paged nothing)."""


_NOT_BEGUN = "transaction {name!r} was not begun"

TRANSACTIONS: StateTable[TxState] = StateTable(
    states=TxState,
    moves={
        (TxState.NONE, Begin): TxState.BEGUN,
        (TxState.BEGUN, Send): TxState.BEGUN,
        (TxState.BEGUN, Ack): TxState.BEGUN,
        (TxState.BEGUN, Nack): TxState.BEGUN,
        (TxState.BEGUN, Commit): TxState.COMMITTING,
        (TxState.BEGUN, Abort): TxState.ABORTED,
        (TxState.BEGUN, ConnectionEnds): TxState.ABORTED,
        (TxState.COMMITTING, CommitApplied): TxState.COMMITTED,
        # A COMMIT already taken is not undone by the connection going: its writes finish.
        (TxState.COMMITTING, ConnectionEnds): TxState.COMMITTING,
    },
    refusals={
        (TxState.BEGUN, Begin): "transaction {name!r} is already active",
        **{(TxState.NONE, event): _NOT_BEGUN for event in (Send, Ack, Nack, Commit, Abort)},
    },
    rows=[
        ("BEGIN", Begin),
        ("SEND with `transaction`", Send),
        ("ACK with `transaction`", Ack),
        ("NACK with `transaction`", Nack),
        ("COMMIT", Commit),
        ("ABORT", Abort),
        ("(commit applied)", CommitApplied),
        ("(connection ends)", ConnectionEnds),
    ],
    waiting=frozenset({TxState.COMMITTING}),
)

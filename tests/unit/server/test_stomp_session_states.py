"""The session follows the protocol layer's subscription and transaction tables: for every
(state, frame) pair a client can reach, a move leaves the subscription or transaction in the
table's next state, and a refusal is an ERROR carrying the table's message (and the frame's
receipt) — the same messages the e2e tests expect on the wire."""

from __future__ import annotations

import pytest
from session_harness import Harness

from pagemq.protocol.stomp import events as ev
from pagemq.protocol.stomp.state_table import ConnectionEnds
from pagemq.protocol.stomp.subscription_state import ACK_SCOPES, SUBSCRIPTIONS, AckScope, SubState
from pagemq.protocol.stomp.transaction_state import TRANSACTIONS, CommitApplied, TxState

COMMANDS = {ev.Subscribe: "SUBSCRIBE", ev.Unsubscribe: "UNSUBSCRIBE", ev.Ack: "ACK", ev.Nack: "NACK",
            ev.Begin: "BEGIN", ev.Commit: "COMMIT", ev.Abort: "ABORT", ev.Send: "SEND"}
UNKNOWN_ACK_ID = "77.1"


def _subscribed(h: Harness, ack: str = "client-individual", messages: int = 1) -> list[str]:
    """Subscription `s` on /queue/q with `messages` delivered to it; their ack ids."""
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": ack})
    for n in range(messages):
        h.receive("SEND", {"destination": "/queue/q"}, f"m{n}")
    return [m.headers["ack"] for m in h.transport.messages()]


def _error(h: Harness) -> tuple[str, str | None] | None:
    frames = [f for f in h.transport.frames() if f.command == "ERROR"]
    return (frames[0].headers["message"], frames[0].headers.get("receipt-id")) if frames else None


def _pairs(table, skip=(ConnectionEnds, CommitApplied)):  # type: ignore[no-untyped-def]
    return [(state, event) for state in table.states if state not in table.terminal()
            and state not in table.waiting for _label, event in table.rows if event not in skip]


@pytest.mark.parametrize(("state", "event"), _pairs(SUBSCRIPTIONS), ids=str)
def test_subscription_frames_follow_the_table(state: SubState, event: type) -> None:
    h = Harness()
    ack_ids = _subscribed(h) if state is SubState.SUBSCRIBED else []
    before = h.session.subscriptions.get("s")
    name = "s"
    headers = {"id": "s", "receipt": "r"}
    if event is ev.Subscribe:
        headers["destination"] = "/queue/q"
    if event in (ev.Ack, ev.Nack):
        name = headers["id"] = ack_ids[0] if ack_ids else UNKNOWN_ACK_ID
    h.receive(COMMANDS[event], headers)
    h.store.complete()
    h.loop.run_ready()
    if (state, event) in SUBSCRIPTIONS.refusals:
        assert _error(h) == (SUBSCRIPTIONS.refusals[(state, event)].format(name=name), "r")
        assert h.transport.closed
        return
    assert _error(h) is None
    target = SUBSCRIPTIONS.moves[(state, event)]
    sub = h.session.subscriptions.get("s") or before
    assert sub is not None and sub.state is target
    assert ("s" in h.session.subscriptions) == (target is SubState.SUBSCRIBED)


def test_an_unsubscribe_by_durable_name_alone_is_not_refused() -> None:
    h = Harness()
    h.receive("UNSUBSCRIBE", {"durable-subscription-name": "never", "receipt": "r"})
    h.store.complete()
    h.loop.run_ready()
    assert h.transport.commands() == ["CONNECTED:", "RECEIPT:r"]


def test_a_subscription_id_is_free_again_after_unsubscribe() -> None:
    h = Harness()
    _subscribed(h)
    h.receive("UNSUBSCRIBE", {"id": "s"})
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "receipt": "again"})
    assert h.transport.commands()[-1] == "RECEIPT:again"
    assert h.session.subscriptions["s"].state is SubState.SUBSCRIBED


@pytest.mark.parametrize("mode", list(ACK_SCOPES))
def test_what_an_ack_settles_follows_the_ack_mode_table(mode: str) -> None:
    h = Harness()
    _first, second = _subscribed(h, mode, messages=2)
    h.receive("ACK", {"id": second, "receipt": "r"})
    h.store.complete()
    h.loop.run_ready()
    scope = ACK_SCOPES[mode]
    if scope is None:
        assert _error(h) == (f"subscription uses ack mode {mode}: nothing to acknowledge", "r")
        return
    assert _error(h) is None
    consumer = h.session.subscriptions["s"].consumer
    assert consumer is not None
    assert len(consumer.in_flight) == (0 if scope is AckScope.CUMULATIVE else 1)


def _tx_frame(event: type, ack_id: str) -> tuple[str, dict[str, str]]:
    headers = {"transaction": "t", "receipt": "r"}
    if event is ev.Send:
        headers["destination"] = "/queue/other"
    if event in (ev.Ack, ev.Nack):
        headers["id"] = ack_id
    return COMMANDS[event], headers


@pytest.mark.parametrize(("state", "event"), _pairs(TRANSACTIONS), ids=str)
def test_transaction_frames_follow_the_table(state: TxState, event: type) -> None:
    h = Harness()
    (ack_id,) = _subscribed(h)
    if state is TxState.BEGUN:
        h.receive("BEGIN", {"transaction": "t"})
    before = h.session.transactions.get("t")
    h.receive(*_tx_frame(event, ack_id))
    h.store.complete()
    h.loop.run_ready()
    if (state, event) in TRANSACTIONS.refusals:
        assert _error(h) == (TRANSACTIONS.refusals[(state, event)].format(name="t"), "r")
        return
    assert _error(h) is None
    target = TRANSACTIONS.moves[(state, event)]
    tx = h.session.transactions.get("t") or before
    assert tx is not None
    if target is TxState.COMMITTING:  # nothing paged: it took effect at once
        target = TRANSACTIONS.moves[(target, CommitApplied)]
    assert tx.state is target
    assert ("t" in h.session.transactions) == (target is TxState.BEGUN)


@pytest.mark.parametrize("event", [event for _label, event in TRANSACTIONS.rows if event in COMMANDS])
def test_every_frame_waits_while_a_commit_is_committing(event: type) -> None:
    h = Harness()
    (ack_id,) = _subscribed(h)
    h.broker.hold_commits = True
    h.receive("BEGIN", {"transaction": "c"})
    h.receive("COMMIT", {"transaction": "c"})
    assert TxState.COMMITTING in TRANSACTIONS.waiting
    h.receive(*_tx_frame(event, ack_id))
    h.store.complete()
    h.loop.run_ready()
    assert h.transport.commands()[-1] == "MESSAGE:" and not h.transport.closed, "it did not wait"
    h.broker.apply_commits()
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    assert h.transport.commands()[-1] in ("RECEIPT:r", "ERROR:r")


def test_the_connection_ending_aborts_open_transactions_and_closes_subscriptions() -> None:
    h = Harness()
    (ack_id,) = _subscribed(h)
    h.receive("BEGIN", {"transaction": "t"})
    h.receive("ACK", {"id": ack_id, "transaction": "t"})
    tx, sub = h.session.transactions["t"], h.session.subscriptions["s"]
    h.receive("DISCONNECT", {})
    assert tx.state is TRANSACTIONS.moves[(TxState.BEGUN, ConnectionEnds)] is TxState.ABORTED
    assert sub.state is SUBSCRIPTIONS.moves[(SubState.SUBSCRIBED, ConnectionEnds)]
    assert [ref.message.body for ref in h.broker.queues["q"]] == [b"m0"], "the ACK was not undone"


def test_a_transaction_of_another_connection_is_not_begun_here() -> None:
    h = Harness()
    (ack_id,) = _subscribed(h)
    other, _transport = h.connect()
    other.receive(b"BEGIN\ntransaction:t\n\n\x00")
    h.receive("ACK", {"id": ack_id, "transaction": "t", "receipt": "r"})
    assert _error(h) == ("transaction 't' was not begun", "r")

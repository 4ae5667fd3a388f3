"""The subscription and transaction tables as data: complete, consistent, and rendered with
the messages a client reads in its ERROR frames."""

from __future__ import annotations

import pytest

from pagemq.protocol.errors import RemoteProtocolError
from pagemq.protocol.stomp import events as ev
from pagemq.protocol.stomp.state_table import ConnectionEnds, StateTable
from pagemq.protocol.stomp.subscription_state import (
    ACK_SCOPES,
    SUBSCRIPTIONS,
    SubState,
    ack_mode_error,
    render_ack_modes,
)
from pagemq.protocol.stomp.transaction_state import TRANSACTIONS, CommitApplied, TxState

TABLES = [SUBSCRIPTIONS, TRANSACTIONS]
NOT_FRAMES = (ConnectionEnds, CommitApplied)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.states.__name__)
def test_every_frame_in_every_live_state_is_either_a_move_or_a_refusal(table: StateTable) -> None:  # type: ignore[type-arg]
    for state in table.states:
        if state in table.terminal() or state in table.waiting:
            continue
        for _label, event in table.rows:
            if event in NOT_FRAMES:
                continue
            pair = (state, event)
            assert (pair in table.moves) != (pair in table.refusals), pair


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.states.__name__)
def test_refusals_are_only_for_pairs_with_no_move_and_every_row_is_shown(table: StateTable) -> None:  # type: ignore[type-arg]
    assert not set(table.moves) & set(table.refusals)
    shown = {event for _label, event in table.rows}
    assert {event for _state, event in [*table.moves, *table.refusals]} <= shown


def test_terminal_states_free_the_name() -> None:
    assert SUBSCRIPTIONS.terminal() == [SubState.UNSUBSCRIBED]
    assert TRANSACTIONS.terminal() == [TxState.COMMITTED, TxState.ABORTED]
    assert TRANSACTIONS.waiting == {TxState.COMMITTING}
    assert TRANSACTIONS.step(TxState.COMMITTING, CommitApplied, "t") is TxState.COMMITTED


@pytest.mark.parametrize(
    ("table", "state", "event", "name", "message"),
    [
        (SUBSCRIPTIONS, SubState.SUBSCRIBED, ev.Subscribe, "s", "subscription id 's' is already in use"),
        (SUBSCRIPTIONS, SubState.NONE, ev.Unsubscribe, "s", "no subscription with id 's'"),
        (SUBSCRIPTIONS, SubState.NONE, ev.Ack, "3.1", "ACK/NACK of unknown id '3.1'"),
        (SUBSCRIPTIONS, SubState.NONE, ev.Nack, "m-9", "ACK/NACK of unknown id 'm-9'"),
        (TRANSACTIONS, TxState.BEGUN, ev.Begin, "t", "transaction 't' is already active"),
        (TRANSACTIONS, TxState.NONE, ev.Commit, "t", "transaction 't' was not begun"),
        (TRANSACTIONS, TxState.NONE, ev.Send, "t", "transaction 't' was not begun"),
    ],
)
def test_a_refused_step_raises_the_message_of_today(table, state, event, name, message):  # type: ignore[no-untyped-def]
    with pytest.raises(RemoteProtocolError) as caught:
        table.step(state, event, name)
    assert caught.value.message == message
    assert caught.value.receipt_id is None  # the session answers with the frame's receipt


def test_ack_modes_are_those_a_subscribe_may_name() -> None:
    assert set(ACK_SCOPES) == set(ev.ACK_MODES)
    assert ack_mode_error("auto").message == "subscription uses ack mode auto: nothing to acknowledge"
    assert "| auto | error: subscription uses ack mode auto: nothing to acknowledge |" in render_ack_modes()


def test_rendered_tables_show_moves_refusals_and_waits() -> None:
    subs = SUBSCRIPTIONS.render_markdown()
    assert subs.splitlines()[0] == "| frame (event) | NONE | SUBSCRIBED |"
    assert "| SUBSCRIBE | → SUBSCRIBED | error: subscription id '…' is already in use |" in subs
    txs = TRANSACTIONS.render_markdown()
    assert txs.splitlines()[0] == "| frame (event) | NONE | BEGUN | COMMITTING |"
    assert "| COMMIT | error: transaction '…' was not begun | → COMMITTING | waits |" in txs
    assert "| (commit applied) | — | — | → COMMITTED |" in txs

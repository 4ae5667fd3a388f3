"""The reference model's own rules, without a broker: a model that is wrong would blame the
broker for its own mistakes (or excuse the broker's), so each rule it applies is pinned here
as the user-level scenario it stands for."""

from __future__ import annotations

import pytest
from model_program import from_json, generate, to_json
from model_reference import Model, Status, Sub, Violation


def _model(max_read: int = -1) -> Model:
    return Model(max_read_page_messages=max_read)


def _send(model: Model, mid: str, dest: str = "/queue/q0", color: str = "red", slot: int = 0,
          receipted: bool = True) -> None:
    model.route(model.new_message(mid, slot, dest, color), receipted=receipted, slot=slot)


def _subscribe(model: Model, slot: int = 1, dest: str = "/queue/q0", ack: str = "client-individual",
               prefetch: int = 10, selector: str | None = None, durable: str | None = None) -> Sub:
    return model.subscribe(slot, f"s{slot}", dest, ack, prefetch, selector, durable)


def _deliver(model: Model, sub: Sub, mid: str, redelivered: bool = False) -> None:
    model.delivered(sub, mid, f"ack-{mid}", redelivered)


def _ack_all(model: Model, sub: Sub, receipted: bool = True) -> None:
    while sub.held:
        taken = model.take(sub, 0.0)
        assert taken is not None
        model.acked(taken[0], receipted=receipted, slot=sub.slot, how="ACKed")


def test_a_message_acknowledged_with_a_receipt_never_comes_back_even_after_a_kill() -> None:
    model = _model()
    _send(model, "m1")
    sub = _subscribe(model)
    _deliver(model, sub, "m1")
    _ack_all(model, sub)
    model.broker_stopped(killed=True)
    again = _subscribe(model)
    with pytest.raises(Violation) as found:
        _deliver(model, again, "m1")
    assert found.value.kind == "resurrected"


def test_an_ack_without_receipt_may_be_undone_by_a_kill_but_not_by_a_graceful_restart() -> None:
    for killed, allowed in ((True, True), (False, False)):
        model = _model()
        _send(model, "m1")
        sub = _subscribe(model)
        _deliver(model, sub, "m1")
        _ack_all(model, sub, receipted=False)
        model.sync(sub.slot)  # a later receipt on the connection: the ACK was carried out
        model.broker_stopped(killed=killed)
        again = _subscribe(model)
        if allowed:
            _deliver(model, again, "m1")
        else:
            with pytest.raises(Violation, match="resurrected"):
                _deliver(model, again, "m1")


def test_receipted_messages_must_survive_a_kill_and_unreceipted_ones_may_vanish() -> None:
    model = _model()
    _send(model, "m1")
    _send(model, "m2", receipted=False)
    model.sync(0)  # carried out, never promised durable
    model.broker_stopped(killed=True)
    queue = model.queues["q0"]
    assert queue.copies["m1"].status is Status.MUST
    assert queue.copies["m2"].status is Status.MAY
    assert model.expected(queue) == ({"m1"}, {"m2"})


def test_a_message_sent_to_one_queue_delivered_on_another_is_a_phantom() -> None:
    model = _model()
    _send(model, "m1", dest="/queue/q0")
    sub = _subscribe(model, dest="/queue/q1")
    with pytest.raises(Violation, match="phantom"):
        _deliver(model, sub, "m1")


def test_a_message_held_by_one_consumer_delivered_to_another_is_a_duplicate() -> None:
    model = _model()
    _send(model, "m1")
    first = _subscribe(model, slot=1)
    second = _subscribe(model, slot=2)
    _deliver(model, first, "m1")
    with pytest.raises(Violation, match="duplicate"):
        _deliver(model, second, "m1")


def test_first_deliveries_to_a_lone_consumer_follow_each_producers_send_order() -> None:
    model = _model()
    for mid in ("m1", "m2", "m3"):
        _send(model, mid)
    sub = _subscribe(model)
    _deliver(model, sub, "m1")
    _deliver(model, sub, "m3")
    with pytest.raises(Violation, match="order"):
        _deliver(model, sub, "m2")


def test_fifo_is_not_asserted_across_producers_redeliveries_or_shared_queues() -> None:
    model = _model()
    _send(model, "a1", slot=0)
    _send(model, "b1", slot=5)
    _send(model, "a2", slot=0)
    sub = _subscribe(model)
    _deliver(model, sub, "b1")
    _deliver(model, sub, "a2")
    _deliver(model, sub, "a1", redelivered=True)  # the broker says it was delivered before
    model2 = _model()
    for mid in ("m1", "m2"):
        _send(model2, mid)
    one, two = _subscribe(model2, slot=1), _subscribe(model2, slot=2)
    _deliver(model2, two, "m2")
    _deliver(model2, one, "m1")


def test_a_non_durable_subscription_loses_its_messages_when_it_closes() -> None:
    model = _model()
    sub = _subscribe(model, dest="/topic/t0")
    _send(model, "m1", dest="/topic/t0")
    model.connection_closed(sub.slot, "dropped")
    assert not model.queues_with_names()
    assert all(c.status is Status.GONE for q in model.dead_queues for c in q.copies.values())


def test_a_durable_subscription_keeps_its_messages_and_a_new_selector_starts_it_afresh() -> None:
    model = _model()
    sub = _subscribe(model, dest="/topic/t0", durable="d0")
    model.connection_closed(sub.slot, "dropped")
    _send(model, "m1", dest="/topic/t0", color="blue")
    queue = model.durables["c1.t0-d0"]
    assert queue.copies["m1"].status is Status.MUST
    again = _subscribe(model, dest="/topic/t0", durable="d0", selector="color = 'red'")
    assert again.queue is not queue and queue.copies["m1"].status is Status.GONE
    _send(model, "m2", dest="/topic/t0", color="blue")  # filtered out by the new selector
    assert "m2" not in again.queue.copies


def test_an_auto_ack_subscriber_that_vanishes_may_have_swallowed_what_it_would_accept() -> None:
    model = _model()
    sub = _subscribe(model, ack="auto", selector="color = 'red'")
    _send(model, "red", color="red")
    _send(model, "blue", color="blue")
    model.connection_closed(sub.slot, "dropped")
    queue = model.queues["q0"]
    assert queue.copies["red"].status is Status.MAY
    assert queue.copies["blue"].status is Status.MUST


def test_a_send_carried_out_later_stays_a_may_when_a_vanished_auto_ack_subscriber_may_have_had_it() -> None:
    """Seed 504: slot 0 sends m6 without receipt to a topic; the auto-ack durable subscriber of
    slot 1 drops its connection (the broker delivered and auto-acked m6 first, unseen); a later
    receipt on slot 0 proves the SEND was carried out, not that m6 is still there."""
    model = _model()
    sub = _subscribe(model, dest="/topic/t0", ack="auto", durable="d0")
    _send(model, "m6", dest="/topic/t0", receipted=False)
    model.connection_closed(sub.slot, "connection dropped")
    model.sync(0)
    queue = model.durables["c1.t0-d0"]
    assert queue.copies["m6"].status is Status.MAY
    assert queue.count_range() == (0, 1)


def test_an_ack_without_receipt_lost_with_its_connection_is_not_undone_by_the_senders_receipt() -> None:
    model = _model()
    _send(model, "m1", receipted=False)
    sub = _subscribe(model)
    _deliver(model, sub, "m1")
    _ack_all(model, sub, receipted=False)
    model.connection_closed(sub.slot, "connection dropped")  # the ACK may or may not have happened
    model.sync(0)
    assert model.queues["q0"].copies["m1"].status is Status.MAY


def test_a_consumer_with_credit_must_get_what_it_accepts_unless_a_read_limit_holds_it() -> None:
    model = _model(max_read=1)
    _send(model, "m1")
    _send(model, "m2")
    sub = _subscribe(model, prefetch=5)
    assert [c.message.mid for c, _ in model.stalls()] == ["m1", "m2"]
    _deliver(model, sub, "m1")
    assert model.stalls() == []  # one paged message held = max-read-page-messages
    selective = _subscribe(model, slot=2, selector="color = 'red'")
    assert [(c.message.mid, s) for c, s in model.stalls()] == [("m2", selective)]


def test_a_transaction_routes_its_sends_at_commit_and_returns_its_acks_on_abort() -> None:
    model = _model()
    _send(model, "m1")
    sub = _subscribe(model)
    _deliver(model, sub, "m1")
    model.begin(sub.slot, "tx")
    model.txs[sub.slot].sends.append(model.new_message("m2", sub.slot, "/queue/q0", "red"))
    taken = model.take(sub, 0.0)
    assert taken is not None
    model.tx_ack(model.txs[sub.slot], sub, taken[0])
    assert sub.credit == 9  # an ACK inside a transaction does not free credit before COMMIT
    model.rollback(sub.slot, "aborted")
    assert "m2" not in model.queues["q0"].copies
    assert model.queues["q0"].copies["m1"].deliverable
    model.begin(sub.slot, "tx2")
    model.txs[sub.slot].sends.append(model.new_message("m3", sub.slot, "/queue/q0", "red"))
    model.commit(sub.slot, receipted=True)
    assert model.queues["q0"].copies["m3"].status is Status.MUST


def test_the_counts_the_broker_may_report_span_what_the_model_is_unsure_of() -> None:
    model = _model()
    _send(model, "m1")
    _send(model, "m2", receipted=False)
    assert model.queues["q0"].count_range() == (1, 2)


def test_a_seed_always_gives_the_same_program_and_a_program_survives_json() -> None:
    assert to_json(generate(1234)) == to_json(generate(1234))
    program = generate(99)
    assert to_json(from_json(to_json(program))) == to_json(program)
    assert len({to_json(generate(seed)) for seed in range(20)}) == 20

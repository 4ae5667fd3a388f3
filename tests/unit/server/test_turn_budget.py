"""The loop turn's time for frames (server/turn_budget.py) and how sessions share it.

A fake clock that moves a fixed step each time it is read stands for the work of a frame
(the session reads it once per frame), so what one callback carries out is exact."""

from __future__ import annotations

import pytest
from manual_loop import ManualLoop
from session_harness import Harness, RecordingTransport, frame

from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import Frame
from pagemq.server import stomp_session
from pagemq.server.stomp_session import StompSession
from pagemq.server.turn_budget import MAX_DEBT, MIN_SLICE, TurnBudget

STEP = 0.0001  # seconds the fake clock moves per read: a frame's work


class StepClock:
    def __init__(self, step: float = STEP) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _session(h: Harness, turn: TurnBudget, client_id: str) -> tuple[StompSession, RecordingTransport]:
    transport = RecordingTransport()
    session = StompSession(h.broker, StompConnection(), transport, h.loop, turn=turn)
    transport.session = session
    session.receive(frame("CONNECT", {"accept-version": "1.2", "client-id": client_id}))
    return session, transport


def _deliver(h: Harness, session: StompSession, transport: RecordingTransport, queue: str,
             count: int) -> bytes:
    """`count` messages on `queue` delivered to `session` (client-individual); their ACKs as
    one read."""
    h.receive("SEND", {"destination": f"/queue/{queue}"}, "x")  # the queue exists
    h.loop.run_ready()
    session.receive(frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "s",
                                        "ack": "client-individual", "activemq.prefetchSize": str(count + 1)}))
    messages = []
    for start in range(1, count, 1000):  # taking the output as a socket would
        h.session.receive(b"".join(frame("SEND", {"destination": f"/queue/{queue}"}, f"m{n}")
                                   for n in range(start, min(count, start + 1000))))
        h.loop.run_ready()
        messages += transport.messages()
        transport.out.clear()
        session.set_writable(True)
        h.loop.run_ready()
    messages += transport.messages()
    transport.out.clear()
    assert len(messages) == count
    return b"".join(frame("ACK", {"id": m.headers["ack"]}) for m in messages)


def test_the_turns_time_is_shared_equally_by_the_callbacks_that_have_more_to_do() -> None:
    loop, clock = ManualLoop(), StepClock(0.0)
    turn = TurnBudget(loop, 0.010, floor=1, clock=clock)
    turn.begin()
    assert not turn.spent()  # the floor: not timed
    clock.now = 0.0099
    assert not turn.spent()
    clock.now = 0.0101
    assert turn.spent()  # cut short
    for _ in range(3):  # three more callbacks cut short in this turn, and one that is not...
        turn.begin()
        assert not turn.spent()
        clock.now += 0.1
        assert turn.spent()
    turn.begin()
    assert not turn.spent()
    loop.run_once()  # ...the turn ends
    start = clock.now = 1.0
    turn.begin()  # ...so each of the next turn's gets a quarter
    assert not turn.spent()
    clock.now = start + 0.0024
    assert not turn.spent()
    clock.now = start + 0.0026
    assert turn.spent()


def test_a_callback_gets_its_floor_however_late_the_turn() -> None:
    loop, clock = ManualLoop(), StepClock(0.0)
    turn = TurnBudget(loop, 0.010, floor=8, clock=clock)
    turn.begin()
    clock.now = 1.0  # long past the turn's time
    assert [turn.spent() for _ in range(10)] == [False] * 8 + [True] * 2
    turn.begin()  # the next callback of the same turn: its own floor
    assert [turn.spent() for _ in range(10)] == [False] * 8 + [True] * 2
    assert turn.deferrals == 4


def test_slices_have_a_minimum_and_no_slice_outlasts_one_and_a_half_turns() -> None:
    loop, clock = ManualLoop(), StepClock(0.0)
    turn = TurnBudget(loop, 0.010, floor=1, clock=clock)
    for _ in range(1_000):
        turn.begin()
        assert not turn.spent()
        clock.now += 0.1
        assert turn.spent()
    loop.run_once()  # a turn that cut 1,000 callbacks short: the next ones get MIN_SLICE, not 10 us
    clock.now = 5.0
    turn.begin()
    assert not turn.spent()
    clock.now = 5.0 + MIN_SLICE * 0.9
    assert not turn.spent()
    clock.now = 5.0 + MIN_SLICE * 1.1
    assert turn.spent()
    for n in range(40):  # 40 more callbacks in that turn: the 1.5 x 10 ms bound cuts them short
        clock.now = 5.0 + 0.0145 + n * 0.0001
        turn.begin()
        assert not turn.spent()
        clock.now += MIN_SLICE * 0.5
        assert turn.spent() == (clock.now >= 5.0 + 0.015), n


def test_the_turn_is_late_for_new_input_once_one_and_a_half_turns_are_over() -> None:
    loop, clock = ManualLoop(), StepClock(0.0)
    turn = TurnBudget(loop, 0.010, clock=clock)
    assert not turn.late()  # no turn running: input is parsed
    turn.begin()
    clock.now = 0.014
    assert not turn.late()
    clock.now = 0.016
    assert turn.late()
    loop.run_once()  # the next turn
    assert not turn.late()
    turn.begin()
    clock.now = 0.030
    assert not turn.late()


def test_time_run_past_a_slice_is_owed_and_taken_off_the_next_slices() -> None:
    """Deficit round robin: a callback that ran past its slice after its last frame (a
    refill, a group append) gets that much less next time, so its share holds over turns."""
    loop, clock = ManualLoop(), StepClock(0.0)
    turn = TurnBudget(loop, 0.010, floor=1, clock=clock)
    turn.begin()
    clock.now = 0.013  # 3 ms past its 10 ms slice
    owed = turn.debt()
    assert owed == pytest.approx(0.003)
    loop.run_once()
    clock.now = 1.0
    turn.begin(owed)
    assert not turn.spent()
    clock.now = 1.0 + 0.0069
    assert not turn.spent()
    clock.now = 1.0 + 0.0071  # the 10 ms slice less the 3 ms owed
    assert turn.spent()
    assert turn.debt() == pytest.approx(0.0001)  # paid, but for the 0.1 ms its last frame ran over
    loop.run_once()
    clock.now = 2.0
    turn.begin()
    clock.now = 3.0  # a second past: owed at most MAX_DEBT turns
    assert turn.debt() == pytest.approx(MAX_DEBT * 0.010)
    loop.run_once()
    clock.now = 4.0
    turn.begin(MAX_DEBT * 0.010)  # owing more than a slice: only the floor
    assert [turn.spent() for _ in range(3)] == [False, True, True]
    assert TurnBudget(loop, None).debt() == 0.0


def test_without_seconds_only_frame_caps_apply() -> None:
    loop, clock = ManualLoop(), StepClock(1.0)
    turn = TurnBudget(loop, None, clock=clock)
    turn.begin()
    assert not any(turn.spent() for _ in range(10_000))
    assert loop.pending == 0  # no turn is tracked


def test_20000_acks_in_one_read_are_carried_out_over_many_turns_each_within_the_turns_time() -> None:
    h = Harness()
    clock = StepClock()
    turn = TurnBudget(h.loop, 0.010, clock=clock)
    session, transport = _session(h, turn, "consumer")
    acks = _deliver(h, session, transport, "q", 20_000)
    acked_per_turn = []
    session.receive(acks)
    left = h.broker.queue_info("q")["messages"]
    acked_per_turn.append(20_000 - left)
    while left:
        h.loop.run_once()
        now = h.broker.queue_info("q")["messages"]
        acked_per_turn.append(left - now)
        left = now
        assert len(acked_per_turn) < 1_000, "the ACKs are not carried out"
    # ~10 ms of 0.1 ms frames per turn (the first 8 of a share are not timed)
    assert max(acked_per_turn) <= 0.010 / STEP + 8
    assert sum(acked_per_turn) == 20_000
    assert len([n for n in acked_per_turn if n]) >= 20_000 / (0.010 / STEP + 8)
    assert h.broker.queue_info("q")["messages_acknowledged"] == 20_000


def test_two_connections_bursting_at_once_progress_equally() -> None:
    """Were the turn's time first come first served, the connection whose callback comes first
    in the loop's ready queue would take all of it every turn (its share is deferred in the
    order it ran) and the other would carry out its floor of 8 frames a turn."""
    h = Harness()
    clock = StepClock()
    turn = TurnBudget(h.loop, 0.010, clock=clock)
    (a, a_out), (b, b_out) = _session(h, turn, "a"), _session(h, turn, "b")
    a_acks, b_acks = _deliver(h, a, a_out, "qa", 3_000), _deliver(h, b, b_out, "qb", 3_000)
    a.receive(a_acks)
    b.receive(b_acks)
    for _ in range(10):
        h.loop.run_once()
    done_a = 3_000 - h.broker.queue_info("qa")["messages"]
    done_b = 3_000 - h.broker.queue_info("qb")["messages"]
    assert done_a > 200 and done_b > 200
    assert min(done_a, done_b) / max(done_a, done_b) > 0.6, (done_a, done_b)
    h.loop.run_ready()
    assert h.broker.queue_info("qa")["messages"] == h.broker.queue_info("qb")["messages"] == 0


def test_a_read_arriving_while_earlier_bytes_wait_to_be_parsed_keeps_its_place() -> None:
    h = Harness()
    count = 2 * stomp_session.FRAMES_PER_TURN + 10
    h.session.receive(b"".join(frame("SEND", {"destination": "/queue/q", "receipt": f"r{n}"}, f"m{n}")
                               for n in range(count)))
    assert h.session.protocol.buffered > 0, "the read was parsed at once"
    h.session.receive(frame("SEND", {"destination": "/queue/q", "receipt": "late"}, "late"))
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    receipts = [c for c in h.transport.commands() if c.startswith("RECEIPT:")]
    assert receipts == [f"RECEIPT:r{n}" for n in range(count)] + ["RECEIPT:late"]
    assert h.broker.queue_info("q")["messages"] == count + 1


def test_a_read_arriving_while_earlier_frames_wait_for_their_turn_is_only_taken_not_parsed() -> None:
    """Parsing it could only defer its frames behind the others, and libuv hands a busy
    producer's socket over in up to 32 reads a poll: each parsed read was ~3 ms of a turn
    already over."""
    h = Harness()
    clock = StepClock()
    turn = TurnBudget(h.loop, 0.010, clock=clock)
    session, transport = _session(h, turn, "producer")
    h.loop.run_ready()
    sends = [frame("SEND", {"destination": "/queue/q", "receipt": f"r{n}"}, f"m{n}") for n in range(600)]
    session.receive(b"".join(sends[:200]))  # ~10 ms of 0.1 ms frames: some wait for a later turn
    assert session._deferred_frames > 0
    buffered = session.protocol.buffered
    for n in range(200, 600, 50):
        session.receive(b"".join(sends[n:n + 50]))
    assert session.protocol.buffered == buffered + sum(map(len, sends[200:]))  # not parsed
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    receipts = [c for c in transport.commands() if c.startswith("RECEIPT:")]
    assert receipts == [f"RECEIPT:r{n}" for n in range(600)]


def _subscribed_with_a_turn(h: Harness) -> tuple[TurnBudget, StompSession, RecordingTransport, list[Frame]]:
    """400 messages on queue q, a session on a 10 ms turn subscribed to it with a window
    of 200: the turn, the session, its transport and the MESSAGE frames it got."""
    turn = TurnBudget(h.loop, 0.010, clock=StepClock())
    for n in range(400):
        h.receive("SEND", {"destination": "/queue/q"}, f"m{n}")
    h.loop.run_ready()
    session, transport = _session(h, turn, "consumer")
    session.receive(frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client-individual",
                                        "activemq.prefetchSize": "200"}))
    h.loop.run_ready()
    return turn, session, transport, transport.messages()


def test_acks_ending_a_subscription_refill_nothing_when_the_turn_cuts_them_short() -> None:
    """The UNSUBSCRIBE behind 200 ACKs waits for a later turn: the room the first ACKs made
    is not filled before it (those messages would spend a delivery attempt unseen)."""
    h = Harness()
    _turn, session, transport, first = _subscribed_with_a_turn(h)
    assert len(first) == 200
    session.receive(b"".join(frame("ACK", {"id": m.headers["ack"]}) for m in first)
                    + frame("UNSUBSCRIBE", {"id": "s", "receipt": "end"}))
    assert session._deferred_frames > 0  # cut short: the UNSUBSCRIBE waits
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    assert len(transport.messages()) == 200
    assert "RECEIPT:end" in transport.commands()
    assert h.broker.queue_info("q")["messages"] == 200


def test_a_subscription_ending_in_a_later_turn_gets_nothing_from_other_connections_refills() -> None:
    """While the UNSUBSCRIBE behind 200 ACKs waits for a later turn, another connection's
    frames make the queue dispatch (a SEND to it, ACKs of its own on another queue): the
    subscription being ended is sent none of it."""
    h = Harness()
    turn, session, transport, first = _subscribed_with_a_turn(h)
    other, other_transport = _session(h, turn, "other")
    other_acks = _deliver(h, other, other_transport, "r", 50)
    session.receive(b"".join(frame("ACK", {"id": m.headers["ack"]}) for m in first)
                    + frame("UNSUBSCRIBE", {"id": "s", "receipt": "end"}))
    assert session._deferred_frames > 0  # cut short: the UNSUBSCRIBE waits
    other.receive(other_acks)
    h.receive("SEND", {"destination": "/queue/q"}, "late")
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    assert len(transport.messages()) == 200
    assert "RECEIPT:end" in transport.commands()
    assert h.broker.queue_info("q")["messages"] == 201


def test_a_connect_arriving_late_in_a_turn_is_answered_at_once() -> None:
    """The shell starts heart-beats once a read has made the connection CONNECTED."""
    h = Harness()
    clock = StepClock()
    turn = TurnBudget(h.loop, 0.010, clock=clock)
    turn.begin()
    clock.now += 1.0  # the turn is long over for everybody
    session, transport = _session(h, turn, "late")
    assert session.protocol.version == "1.2"
    assert transport.commands() == ["CONNECTED:"]
    session.receive(frame("SEND", {"destination": "/queue/q", "receipt": "r"}, "m"))
    assert "q" not in h.broker.queues  # the SEND waits for the next turn
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    assert transport.commands() == ["CONNECTED:", "RECEIPT:r"]


@pytest.mark.parametrize("bad", [b"BOGUS\n\n\x00", b"SEND\ndestination:/queue/q\ncontent-length:x\n\n\x00"])
def test_a_bad_frame_behind_frames_not_yet_parsed_ends_the_connection_after_them(bad: bytes) -> None:
    h = Harness()
    count = 2 * stomp_session.FRAMES_PER_TURN + 10
    sends = b"".join(frame("SEND", {"destination": "/queue/q"}, f"m{n}") for n in range(count))
    h.session.receive(sends + bad + frame("SEND", {"destination": "/queue/q"}, "after the bad one"))
    assert not h.session.closing, "the bad frame was reached before its turn"
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    assert h.broker.queue_info("q")["messages"] == count
    assert h.transport.commands()[-1].startswith("ERROR")
    assert h.session.closing

"""StompSession over a real Broker, with no socket and no event loop (`session_harness`): a
store whose writes complete when the test says, a manual loop whose turns the test runs.
Receipts before an ERROR, receipts that wait for durable records, the bounded read-ahead of
a blocked connection and its retry, frames held behind a COMMIT taking effect, failed writes,
browse batches."""

from __future__ import annotations

from session_harness import Harness, RecordingTransport, frame

from pagemq.core import ledger
from pagemq.core.queue import Queue
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import Frame
from pagemq.server import stomp_session
from pagemq.server.stomp_session import StompSession

# -- receipts and ERROR ---------------------------------------------------------------------


def test_error_waits_for_the_receipts_of_stored_sends_and_comes_after_them() -> None:
    h = Harness()
    sends = b"".join(frame("SEND", {"destination": "/queue/q", "persistent": "true",
                                    "receipt": f"r{n}"}, "m") for n in range(3))
    h.session.receive(sends + b"SEND\nno colon\n\n\x00")
    h.loop.run_ready()
    assert h.transport.commands() == ["CONNECTED:"], "ERROR written ahead of receipts due"
    assert not h.transport.closed
    h.store.complete()
    assert h.transport.commands() == ["CONNECTED:"], "a receipt went out before its write was heard of"
    h.loop.run_ready()
    assert h.transport.commands() == ["CONNECTED:", "RECEIPT:r0", "RECEIPT:r1", "RECEIPT:r2", "ERROR:"]
    assert h.transport.closed


def test_receipts_go_out_in_arrival_order_whatever_their_durability() -> None:
    h = Harness()
    h.receive("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "stored"}, "m")
    h.receive("BEGIN", {"transaction": "t", "receipt": "begin"})  # due at once, but behind
    h.receive("SEND", {"destination": "/queue/q", "receipt": "plain"}, "m")
    h.loop.run_ready()
    assert h.transport.commands() == ["CONNECTED:"]
    h.store.complete()
    h.loop.run_ready()
    assert h.transport.commands() == ["CONNECTED:", "RECEIPT:stored", "RECEIPT:begin", "RECEIPT:plain"]


def test_a_failed_write_drops_its_receipt_and_ends_with_an_error_naming_it() -> None:
    h = Harness()
    h.receive("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r0"}, "m")
    h.store.complete()
    h.receive("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r1"}, "m")
    h.store.complete(OSError(28, "No space left on device"))
    h.loop.run_ready()
    frames = h.transport.frames()
    assert [f.command for f in frames] == ["CONNECTED", "RECEIPT", "ERROR"]
    assert frames[1].headers["receipt-id"] == "r0"
    assert frames[2].headers["receipt-id"] == "r1"
    assert "could not be stored" in frames[2].headers["message"]
    assert "No space left" in frames[2].headers["message"]


def test_a_failed_write_of_a_send_without_receipt_is_reported() -> None:
    h = Harness()
    h.receive("SEND", {"destination": "/queue/q", "persistent": "true"}, "m")
    h.store.complete(OSError(5, "Input/output error"))
    h.loop.run_ready()
    frames = h.transport.frames()
    assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
    assert "Input/output error" in frames[1].headers["message"]
    assert h.transport.closed


def test_a_store_refusing_a_write_at_once_is_an_error_not_an_exception() -> None:
    h = Harness()
    h.store.refuse = OSError(27, "journal refuses appends after a failure")
    h.receive("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r0"}, "m")
    h.loop.run_ready()
    frames = h.transport.frames()
    assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
    assert frames[1].headers["receipt-id"] == "r0"
    assert "refuses appends" in frames[1].headers["message"]


def test_connect_and_a_bad_frame_in_one_read_answer_connected_then_error() -> None:
    h = Harness()
    transport = RecordingTransport()
    other = StompSession(h.broker, StompConnection(), transport, h.loop)
    transport.session = other
    other.receive(frame("CONNECT", {"accept-version": "1.2"}) + b"BOGUS\n\n\x00")
    frames = transport.frames()
    assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
    assert "unknown command" in frames[1].headers["message"]


def test_disconnect_closes_only_after_the_receipts_before_it() -> None:
    h = Harness()
    h.receive("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r0"}, "m")
    h.receive("DISCONNECT", {"receipt": "bye"})
    h.loop.run_ready()
    assert not h.transport.closed
    h.store.complete()
    h.loop.run_ready()
    assert h.transport.commands() == ["CONNECTED:", "RECEIPT:r0", "RECEIPT:bye"]
    assert h.transport.closed


# -- receipts that promise durable records ---------------------------------------------------


def test_durable_subscribe_and_unsubscribe_receipts_wait_for_their_records() -> None:
    h = Harness()
    headers = {"destination": "/topic/t", "id": "s1", "durable-subscription-name": "d"}
    h.receive("SUBSCRIBE", {**headers, "receipt": "sub"})
    h.loop.run_ready()
    assert h.store.queues == ["c1.d"]
    assert h.transport.commands() == ["CONNECTED:"], "durable SUBSCRIBE receipted before its record"
    h.store.complete()
    h.loop.run_ready()
    assert h.transport.commands()[-1] == "RECEIPT:sub"
    h.receive("UNSUBSCRIBE", {**headers, "receipt": "unsub"})
    h.loop.run_ready()
    assert h.transport.commands()[-1] == "RECEIPT:sub", "UNSUBSCRIBE receipted before the delete"
    h.store.complete()
    h.loop.run_ready()
    assert h.transport.commands()[-1] == "RECEIPT:unsub"


def test_subscribe_to_an_existing_queue_is_receipted_at_once() -> None:
    h = Harness()
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s1", "receipt": "a"})
    h.store.complete()
    h.loop.run_ready()
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s2", "receipt": "b"})
    assert h.transport.commands()[-1] == "RECEIPT:b"


# -- BLOCK: the read-ahead and the retry ------------------------------------------------------


BLOCK = {"#": {"max-size-messages": 2, "address-full-policy": "BLOCK"}}


def test_blocked_send_holds_later_frames_but_an_ack_goes_ahead_and_unblocks_it() -> None:
    h = Harness(BLOCK)
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client-individual"})
    for n in range(3):
        h.receive("SEND", {"destination": "/queue/q", "receipt": f"r{n}"}, f"m{n}")
    assert h.session.blocked
    h.receive("BEGIN", {"transaction": "t", "receipt": "begin"})
    messages = h.transport.messages()
    assert [m.body for m in messages] == [b"m0", b"m1"]
    assert "RECEIPT:begin" not in h.transport.commands(), "a frame behind a blocked SEND went ahead"
    h.receive("ACK", {"id": messages[0].headers["ack"], "receipt": "ack"})
    assert not h.session.blocked, "the ACK freed room but the SEND is not retried"
    assert "RECEIPT:r2" not in h.transport.commands(), "the retry ran inside the ACK, not on a later turn"
    h.store.complete()
    h.loop.run_ready()
    commands = h.transport.commands()
    assert commands.index("RECEIPT:ack") < commands.index("RECEIPT:r2") < commands.index("RECEIPT:begin")
    assert [m.body for m in h.transport.messages()] == [b"m0", b"m1", b"m2"]


def test_read_ahead_is_bounded_then_the_socket_is_not_read() -> None:
    h = Harness(BLOCK)
    for body in ("a", "b", "c"):
        h.receive("SEND", {"destination": "/queue/q"}, body)
    assert h.session.blocked and not h.transport.paused
    chunk = frame("SEND", {"destination": "/queue/q"}, "x" * 65536)
    for _ in range(stomp_session.READ_AHEAD_BYTES // 65536 + 1):
        h.session.receive(chunk)
    assert h.transport.paused
    queue = h.broker.queues["q"]
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s"})  # held
    assert not queue.consumers
    auto, _transport = h.connect()
    auto.receive(frame("SUBSCRIBE", {"destination": "/queue/q", "id": "drain"}))  # auto ack
    h.loop.run_ready()
    assert not h.transport.paused and not h.session.blocked
    assert len(queue.consumers) == 2, "the held SUBSCRIBE was carried out"


def test_a_heart_beat_only_connection_is_never_held() -> None:
    h = Harness(BLOCK)
    for n in range(3):
        h.receive("SEND", {"destination": "/queue/q"}, f"m{n}")
    assert h.session.blocked
    for _ in range(10_000):
        h.session.receive(b"\n")
    assert not h.transport.paused


# -- a COMMIT taking effect holds what follows ------------------------------------------------


def test_frames_after_a_commit_wait_until_it_has_taken_effect() -> None:
    h = Harness()
    h.broker.hold_commits = True
    h.receive("BEGIN", {"transaction": "t"})
    h.receive("SEND", {"destination": "/queue/q", "transaction": "t"}, "in-tx")
    h.receive("COMMIT", {"transaction": "t", "receipt": "commit"})
    tx = h.session._committing
    assert tx is not None and tx.state.name == "COMMITTING"
    h.receive("SEND", {"destination": "/queue/q", "receipt": "after"}, "after")
    h.receive("BEGIN", {"transaction": "t", "receipt": "again"})  # the name is not free yet
    h.store.complete()
    h.loop.run_ready()
    assert "RECEIPT:after" not in h.transport.commands(), "a SEND overtook the COMMIT"
    assert [ref.message.body for ref in h.broker.queues["q"]] == [b"in-tx"]
    h.broker.apply_commits()
    h.loop.run_ready()
    assert tx.state.name == "COMMITTED"
    h.store.complete()
    h.loop.run_ready()
    commands = h.transport.commands()
    assert commands == ["CONNECTED:", "RECEIPT:commit", "RECEIPT:after", "RECEIPT:again"]
    assert h.session.transactions["t"].state.name == "BEGUN"


# -- transactions and acks ------------------------------------------------------------------


def test_nack_in_a_transaction_waits_for_commit() -> None:
    h = Harness()
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client-individual"})
    h.receive("SEND", {"destination": "/queue/q"}, "m")
    (message,) = h.transport.messages()
    assert message.headers["redelivered"] == "false"
    h.receive("BEGIN", {"transaction": "t"})
    h.receive("NACK", {"id": message.headers["ack"], "transaction": "t"})
    assert len(h.transport.messages()) == 1
    h.receive("COMMIT", {"transaction": "t"})
    again = h.transport.messages()
    assert len(again) == 2 and again[1].headers["redelivered"] == "true"


def test_stomp_1_1_acks_the_same_message_on_two_subscriptions() -> None:
    h = Harness()
    old, transport = h.connect("1.1")
    for sub_id in ("a", "b"):
        old.receive(frame("SUBSCRIBE", {"destination": "/topic/t", "id": sub_id, "ack": "client-individual"}))
    old.receive(frame("SEND", {"destination": "/topic/t"}, "m"))
    messages = transport.messages()
    assert len(messages) == 2
    for message in messages:
        old.receive(frame("ACK", {"message-id": message.headers["message-id"],
                                  "subscription": message.headers["subscription"],
                                  "receipt": message.headers["subscription"]}))
    h.store.complete()  # an ACK's receipt waits for the flush
    h.loop.run_ready()
    commands = [f.command for f in transport.frames()]
    assert commands.count("RECEIPT") == 2 and "ERROR" not in commands
    assert not old._msgid_acks


# -- browsing ---------------------------------------------------------------------------------


def test_a_browse_goes_out_in_batches_one_per_loop_turn_then_browser_end() -> None:
    h = Harness()
    count = stomp_session.BROWSE_BATCH * 2 + 10
    for n in range(count):
        h.receive("SEND", {"destination": "/queue/q"}, f"m{n}")
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "b", "browser": "true"})
    assert len(h.transport.messages()) == stomp_session.BROWSE_BATCH
    h.loop.run_once()
    assert len(h.transport.messages()) == stomp_session.BROWSE_BATCH * 2
    h.loop.run_once()
    messages = h.transport.messages()
    assert [m.body for m in messages[:-1]] == [f"m{n}".encode() for n in range(count)]
    assert messages[-1].headers["browser"] == "end"
    assert len(list(h.broker.queues["q"])) == count, "browsing took messages"
    assert h.loop.pending == 0


def test_a_browse_stops_while_the_peer_does_not_read_and_resumes_after() -> None:
    h = Harness()
    for n in range(5):
        h.receive("SEND", {"destination": "/queue/q"}, f"m{n}")
    h.session.set_writable(False)
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "b", "browser": "true"})
    assert h.transport.messages() == [], "the SUBSCRIBE was not held while unwritable"
    h.session.set_writable(True)
    h.loop.run_ready()
    assert [m.body for m in h.transport.messages()[:-1]] == [f"m{n}".encode() for n in range(5)]


def test_a_read_of_many_frames_is_carried_out_over_several_turns_in_order() -> None:
    h = Harness()
    count = 3 * stomp_session.FRAMES_PER_TURN + 5
    sends = b"".join(frame("SEND", {"destination": "/queue/q", "receipt": f"r{n}"}, "m")
                     for n in range(count))
    h.session.receive(sends)
    assert h.broker.queue_info("q")["messages"] == stomp_session.FRAMES_PER_TURN
    turns = 0
    while h.broker.queue_info("q")["messages"] < count:
        h.loop.run_once()
        turns += 1
        assert turns <= 10, "the deferred frames were not carried out"
    assert turns >= 3  # a share per turn, not all at once
    h.loop.run_ready()
    receipts = [c for c in h.transport.commands() if c.startswith("RECEIPT:")]
    assert receipts == [f"RECEIPT:r{n}" for n in range(count)]


# -- acknowledgements -------------------------------------------------------------------------


def _subscribed(h: Harness, sent: int, prefetch: int) -> list[Frame]:
    """`sent` messages on queue q and a client-individual subscription to it with a window of
    `prefetch`: the MESSAGE frames it got."""
    for n in range(sent):
        h.receive("SEND", {"destination": "/queue/q"}, f"m{n}")
    h.receive("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client-individual",
                            "activemq.prefetchSize": str(prefetch)})
    first = h.transport.messages()
    assert [m.body for m in first] == [f"m{n}".encode() for n in range(prefetch)]
    return first


def _acks(messages: list[Frame]) -> bytes:
    return b"".join(frame("ACK", {"id": m.headers["ack"]}) for m in messages)


def _counting_dispatches(queue: Queue) -> list[int]:
    """Count `queue`'s dispatches: the list's one item, updated in place."""
    counts = [0]
    dispatch = queue.dispatch

    def counted() -> None:
        counts[0] += 1
        dispatch()

    queue.dispatch = counted  # type: ignore[method-assign]
    return counts


def test_the_acks_of_one_read_refill_the_window_with_one_dispatch() -> None:
    """A burst of ACK frames makes room once: the queue fills the consumer's window after the
    read's frames, in one dispatch, not once per ACK (each of which would send one message)."""
    h = Harness()
    first = _subscribed(h, 30, 10)
    dispatches = _counting_dispatches(h.broker.queues["q"])
    h.session.receive(_acks(first))
    assert dispatches == [1]
    assert [m.body for m in h.transport.messages()[10:]] == [f"m{n}".encode() for n in range(10, 20)]
    assert h.broker.queue_info("q")["messages"] == 20


def test_a_long_burst_of_acks_refills_as_it_goes_so_its_time_counts_in_the_turn() -> None:
    """The turn budget asks before each frame whether the connection's slice is over; a
    refill of 200 messages after the read's last frame would run unseen by it."""
    h = Harness()
    first = _subscribed(h, 400, 200)
    dispatches = _counting_dispatches(h.broker.queues["q"])
    h.session.receive(_acks(first))
    assert dispatches == [200 // ledger.DISPATCH_EVERY + 1]  # every DISPATCH_EVERY, then the rest
    assert [m.body for m in h.transport.messages()[200:]] == [f"m{n}".encode() for n in range(200, 400)]


def test_a_long_burst_of_acks_ending_its_subscription_refills_nothing() -> None:
    h = Harness()
    first = _subscribed(h, 300, 200)
    h.session.receive(_acks(first) + frame("UNSUBSCRIBE", {"id": "s", "receipt": "end"}))
    h.loop.run_ready()
    assert len(h.transport.messages()) == 200  # no refill went out ahead of the UNSUBSCRIBE
    assert "RECEIPT:end" in h.transport.commands()
    assert h.broker.queue_info("q")["messages"] == 100


def test_a_nack_in_a_read_ending_its_subscription_sends_it_nothing_more() -> None:
    """The NACK returns its message and the queue dispatches at once: the subscription the
    read ends is already closed to new messages, so it is not sent one it would hand back
    unseen (each a delivery attempt)."""
    h = Harness()
    first = _subscribed(h, 30, 10)
    h.session.receive(_acks(first[:9]) + frame("NACK", {"id": first[9].headers["ack"]})
                      + frame("UNSUBSCRIBE", {"id": "s", "receipt": "end"}))
    h.loop.run_ready()
    assert len(h.transport.messages()) == 10
    assert "RECEIPT:end" in h.transport.commands()
    assert h.broker.queue_info("q")["messages"] == 21


def test_a_commit_of_acks_in_a_read_ending_its_subscription_sends_it_nothing_more() -> None:
    h = Harness()
    first = _subscribed(h, 30, 10)
    acks = b"".join(frame("ACK", {"id": m.headers["ack"], "transaction": "t"}) for m in first)
    h.session.receive(frame("BEGIN", {"transaction": "t"}) + acks + frame("COMMIT", {"transaction": "t"})
                      + frame("DISCONNECT", {"receipt": "bye"}))
    h.loop.run_ready()
    assert len(h.transport.messages()) == 10
    assert "RECEIPT:bye" in h.transport.commands()
    assert h.broker.queue_info("q")["messages"] == 20

"""Batch SEND (docs/stomp.md, "Batch SEND"): many messages in one SEND frame, in a transaction.

The Spark sink sends this way to a pagemq broker; here a raw socket sends the frames, and a
stomp.py consumer receives what they stand for: each message with the frame's headers and
its own, exactly as that many SENDs in the transaction would be."""

from __future__ import annotations

from pathlib import Path

from brokerproc import RawStomp, bodies, unique

from pagemq.protocol.stomp.batch import encode_batch, encode_batch_body
from pagemq.protocol.stomp.frames import encode_frame

BATCH = {"pagemq-batch": "1"}


def _connect(proc, **headers) -> RawStomp:
    raw = RawStomp(proc.stomp_port)
    raw.connect(headers={**BATCH, **headers})
    return raw


def _commit(raw: RawStomp, tx: str) -> None:
    raw.send_frame("COMMIT", {"transaction": tx, "receipt": f"commit-{tx}"})
    frame = raw.read_frame()
    assert frame is not None and frame.command == "RECEIPT", frame
    assert frame.headers["receipt-id"] == f"commit-{tx}"


def _send_batch(raw: RawStomp, queue: str, tx: str, messages, headers=None) -> None:
    raw.send_frame("BEGIN", {"transaction": tx})
    raw.send(encode_batch(f"/queue/{queue}", tx, messages, headers))
    _commit(raw, tx)


def test_connected_offers_batches_only_to_a_client_that_asks(broker):
    with RawStomp(broker.stomp_port) as plain:
        assert "pagemq-batch" not in plain.connect().headers
    with RawStomp(broker.stomp_port) as asking:
        connected = asking.connect(headers=BATCH).headers
        assert connected["pagemq-batch"] == "1"
        assert int(connected["pagemq-max-frame-size"]) > 1 << 20


def test_a_batch_is_delivered_as_its_messages_with_the_frames_headers_and_their_own(broker, stomp_client):
    queue = unique("batch")
    messages = [([("colour", "red"), ("note", "a:b\nc")], b"first"),
                ([], b""),
                ([("persistent", "false"), ("priority", "7"), ("unicode", "żółw")], "third ✓".encode())]
    with _connect(broker) as raw:
        _send_batch(raw, queue, "tx1", messages, {"persistent": "true", "shared": "yes"})
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue}")
    frames = sorted(consumer.wait_for(3), key=lambda f: f.headers.get("priority", "4"))
    consumer.listener.assert_no_more(3)
    first, second, third = frames
    assert bodies(frames) == ["first", "", "third ✓"]
    assert [first.headers[name] for name in ("colour", "note", "shared")] == ["red", "a:b\nc", "yes"]
    assert first.headers["persistent"] == "true" and second.headers["persistent"] == "true"
    assert third.headers["persistent"] == "false"  # a message's own header beats the frame's
    assert (third.headers["priority"], third.headers["unicode"]) == ("7", "żółw")


def test_a_batch_is_stored_at_commit_and_survives_a_kill(start_broker, stomp_client):
    proc, queue = start_broker({"address-settings": {"#": {"max-size-bytes": 0}}}), unique("batch")
    with _connect(proc) as raw:
        raw.send_frame("BEGIN", {"transaction": "t"})
        raw.send(encode_batch(f"/queue/{queue}", "t", [([], f"m{n}".encode()) for n in range(500)],
                              {"persistent": "true"}))
        raw.send_frame("BEGIN", {"transaction": "t2", "receipt": "begun"})
        assert raw.read_frame().headers["receipt-id"] == "begun"
        assert _absent(proc, queue)  # staged, not stored
        _commit(raw, "t")
    proc.restart(kill=True)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}")
    assert bodies(consumer.wait_for(500)) == [f"m{n}" for n in range(500)]


def test_duplicate_ids_in_a_batch_are_stored_once_as_plain_sends_are(broker, stomp_client):
    queue = unique("batch")
    first = [([("_AMQ_DUPL_ID", f"id-{n}")], f"m{n}".encode()) for n in range(4)]
    again = [([("_AMQ_DUPL_ID", f"id-{n}")], f"again{n}".encode()) for n in range(2, 6)]
    with _connect(broker) as raw:
        _send_batch(raw, queue, "a", [*first, first[0]])  # a repeat within the batch, too
        _send_batch(raw, queue, "b", again)
    assert broker.queue(queue)["messages"] == 6
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue}")
    assert bodies(consumer.wait_for(6)) == ["m0", "m1", "m2", "m3", "again4", "again5"]


def test_an_aborted_batch_stores_nothing(broker):
    queue = unique("batch")
    with _connect(broker) as raw:
        raw.send_frame("BEGIN", {"transaction": "t"})
        raw.send(encode_batch(f"/queue/{queue}", "t", [([], b"x")] * 10))
        raw.send_frame("ABORT", {"transaction": "t", "receipt": "aborted"})
        assert raw.read_frame().headers["receipt-id"] == "aborted"
    assert _absent(broker, queue)


def test_a_batch_outside_a_transaction_is_refused_and_stores_nothing(broker):
    queue = unique("batch")
    with _connect(broker) as raw:
        frame = encode_frame("SEND", {"destination": f"/queue/{queue}", "pagemq-batch": "1", "receipt": "r"},
                             encode_batch_body([([], b"x")]))
        raw.send(frame)
        error = raw.expect_error()
    assert error.headers["receipt-id"] == "r"
    assert "a batch goes in a transaction" in error.headers["message"]
    assert _absent(broker, queue)


def test_a_malformed_batch_gets_an_error_naming_the_problem_and_its_transaction_is_dropped(broker):
    queue = unique("batch")
    good = encode_batch_body([([], b"kept?")])
    cases = {
        "lengths describe": good[:-1],
        "which only the frame's headers may": encode_batch_body([([("destination", "/queue/other")], b"x")]),
        "unknown pagemq-batch version '2'": None,
    }
    for problem, body in cases.items():
        with _connect(broker) as raw:
            raw.send_frame("BEGIN", {"transaction": "t"})
            version, sent = ("2", good) if body is None else ("1", body)
            raw.send_frame("SEND", {"destination": f"/queue/{queue}", "transaction": "t", "receipt": "r",
                                    "pagemq-batch": version}, sent)
            raw.send_frame("COMMIT", {"transaction": "t"})
            error = raw.expect_error()
        assert problem in error.headers["message"], error
        assert error.headers["receipt-id"] == "r"
    assert _absent(broker, queue)  # nothing of any of them was stored, nor an address made


def _absent(proc, queue: str) -> bool:
    """The queue was never made: a transaction's sends make it only at COMMIT."""
    return proc.http_get(f"/api/queues/{queue}")[0] == 404


def test_a_batch_larger_than_max_frame_size_is_refused(start_broker):
    proc, queue = start_broker({"stomp": {"max-frame-size": "64KiB"}}), unique("batch")
    with _connect(proc) as raw:
        raw.send_frame("BEGIN", {"transaction": "t"})
        raw.send_while_reading(encode_batch(f"/queue/{queue}", "t", [([], b"x" * 1024)] * 100))
        error = raw.expect_error()
    assert "max-frame-size" in error.headers["message"]


def test_a_batch_that_would_pass_global_max_size_is_refused_whole(start_broker):
    proc, queue = start_broker({"broker": {"global-max-size": "2MiB"}}), unique("batch")
    with _connect(proc) as raw:
        raw.send_frame("BEGIN", {"transaction": "t"})
        raw.send(encode_batch(f"/queue/{queue}", "t", [([], b"x" * 1024)] * 3000, receipt="big"))
        error = raw.expect_error()
    assert error.headers["receipt-id"] == "big"
    assert "cannot hold these sends" in error.headers["message"]
    assert "global-max-size" in error.headers["message"]
    assert _absent(proc, queue)
    assert proc.http_get("/api/broker")[1]["memory"]["used_bytes"] < 1 << 20  # nothing left staged


def test_a_batch_of_millions_of_empty_messages_is_weighed_before_it_is_decoded(start_broker):
    """Two million empty messages fit a 16 MB frame but would take many times that decoded:
    the batch is refused by its lengths, before any message of it is made."""
    proc, queue = start_broker({"broker": {"global-max-size": "64MiB"}}), unique("batch")
    before = proc.rss_bytes()
    with _connect(proc) as raw:
        raw.send_frame("BEGIN", {"transaction": "t"})
        raw.send_while_reading(encode_batch(f"/queue/{queue}", "t", [([], b"")] * 2_000_000, receipt="huge"))
        error = raw.expect_error()
    assert "cannot hold these sends" in error.headers["message"]
    status = Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines()
    peak = int(next(line.split()[1] for line in status if line.startswith("VmHWM:"))) * 1024
    assert peak - before < 100 << 20, f"RSS grew by {(peak - before) >> 20} MiB for a 16 MB frame"
    assert _absent(proc, queue)

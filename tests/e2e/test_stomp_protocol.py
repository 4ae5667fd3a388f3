"""STOMP frames end to end: CONNECT/STOMP, versions, heart-beats, receipts, escaping, bodies."""

from __future__ import annotations

import time

import pytest
from brokerproc import bodies, broker_still_serves


def _heart_beat(frame) -> tuple[int, int]:
    sx, sy = (int(part) for part in frame.headers.get("heart-beat", "0,0").split(","))
    return sx, sy


# -- CONNECT, STOMP and version negotiation -----------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [("1.0,1.1,1.2", "1.2"), ("1.0,1.1", "1.1"), ("1.1", "1.1"), ("1.0", "1.0"), ("1.2,9.9", "1.2")],
)
def test_connect_negotiates_the_highest_common_version(broker, raw_stomp, accept, expected):
    raw = raw_stomp(broker)
    connected = raw.connect(accept)
    assert connected.headers.get("version") == expected


def test_connect_without_accept_version_speaks_stomp_1_0(broker, raw_stomp):
    raw = raw_stomp(broker)
    connected = raw.connect(version=None)
    assert connected.headers.get("version", "1.0") == "1.0"


def test_stomp_frame_connects_like_connect(broker, raw_stomp):
    raw = raw_stomp(broker)
    connected = raw.connect("1.2", command="STOMP")
    assert connected.headers["version"] == "1.2"
    raw.send_frame("SEND", {"destination": "/queue/stomp-frame-check", "receipt": "r1"}, "x")
    assert raw.read_until_receipt("r1")[-1].headers["receipt-id"] == "r1"


def test_connected_frame_carries_a_session(broker, raw_stomp):
    connected = raw_stomp(broker).connect("1.2")
    assert connected.headers.get("session"), connected


def test_no_common_version_gets_error_listing_served_versions_and_close(broker, raw_stomp):
    raw = raw_stomp(broker)
    raw.send_frame("CONNECT", {"accept-version": "2.0,3.1", "host": "127.0.0.1"})
    error = raw.expect_error()
    assert set(error.headers.get("version", "").split(",")) == {"1.0", "1.1", "1.2"}, error
    assert error.headers.get("message"), error
    broker_still_serves(broker.stomp_port)


def test_no_common_version_error_answers_the_connects_receipt(broker, raw_stomp):
    raw = raw_stomp(broker)
    raw.send_frame("CONNECT", {"accept-version": "2.0", "host": "127.0.0.1", "receipt": "c-1"})
    error = raw.expect_error()
    assert error.headers.get("receipt-id") == "c-1", error


# -- heart-beats ----------------------------------------------------------------------------


def test_server_sends_heartbeats_at_the_negotiated_interval(broker, raw_stomp):
    raw = raw_stomp(broker)
    connected = raw.connect("1.2", headers={"heart-beat": "0,500"})
    server_send, _ = _heart_beat(connected)
    assert server_send > 0, f"server offers no heart-beats: {connected.headers}"
    interval = max(server_send, 500) / 1000
    started = time.monotonic()
    # One beat is enough: nothing else is sent, so it is due one interval after CONNECTED.
    raw.wait_heartbeats(1, timeout=interval * 1.5 + 0.5)
    assert raw.heartbeat_times[0] - started >= interval * 0.4, "heart-beat long before the interval"


def test_client_that_stops_heartbeating_is_disconnected(broker, raw_stomp):
    raw = raw_stomp(broker)
    connected = raw.connect("1.2", headers={"heart-beat": "300,0"})
    _, server_expects = _heart_beat(connected)
    assert server_expects > 0, f"server does not ask for heart-beats: {connected.headers}"
    interval = max(300, server_expects) / 1000

    # While the client beats, the connection stays up past one interval.
    until = time.monotonic() + interval * 1.2
    while time.monotonic() < until:
        assert raw.send(b"\n"), "connection closed although the client sends heart-beats"
        time.sleep(interval / 4)
    last_beat = time.monotonic()
    assert not raw.wait_closed(timeout=interval * 0.8), "closed less than one interval after the last beat"
    assert raw.wait_closed(timeout=interval * 3 + 1), f"still open {interval * 3.8 + 1:.1f}s after silence"
    assert time.monotonic() - last_beat >= interval * 0.8
    broker_still_serves(broker.stomp_port)


# -- receipts -------------------------------------------------------------------------------


def _message_with_receipt(raw, receipt_id):
    """Read the RECEIPT `receipt_id` and a MESSAGE, in whichever order they come."""
    frames = raw.read_until_receipt(receipt_id)
    message = next((f for f in frames if f.command == "MESSAGE"), None)
    return message or raw.read_until(lambda f: f.command == "MESSAGE")[-1]


def test_subscribe_send_ack_nack_unsubscribe_each_get_their_receipt(broker, raw_stomp, queue_name):
    raw = raw_stomp(broker)
    raw.connect("1.2")
    dest = f"/queue/{queue_name}"
    raw.send_frame("SUBSCRIBE", {"id": "s1", "destination": dest, "ack": "client-individual",
                                 "receipt": "r-sub"})
    raw.read_until_receipt("r-sub")
    raw.send_frame("SEND", {"destination": dest, "receipt": "r-send"}, "one")
    message = _message_with_receipt(raw, "r-send")
    raw.send_frame("NACK", {"id": message.headers["ack"], "receipt": "r-nack"})
    redelivered = _message_with_receipt(raw, "r-nack")
    assert redelivered.headers.get("redelivered") == "true"
    raw.send_frame("ACK", {"id": redelivered.headers["ack"], "receipt": "r-ack"})
    raw.read_until_receipt("r-ack")
    raw.send_frame("UNSUBSCRIBE", {"id": "s1", "receipt": "r-unsub"})
    raw.read_until_receipt("r-unsub")
    broker.wait_queue(queue_name, messages=0, consumers=0)


def test_begin_commit_abort_each_get_their_receipt(broker, raw_stomp, queue_name):
    raw = raw_stomp(broker)
    raw.connect("1.2")
    raw.send_frame("BEGIN", {"transaction": "t1", "receipt": "r-begin1"})
    raw.read_until_receipt("r-begin1")
    raw.send_frame("SEND", {"destination": f"/queue/{queue_name}", "transaction": "t1",
                            "receipt": "r-txsend"}, "in tx")
    raw.read_until_receipt("r-txsend")
    raw.send_frame("COMMIT", {"transaction": "t1", "receipt": "r-commit"})
    raw.read_until_receipt("r-commit")
    raw.send_frame("BEGIN", {"transaction": "t2", "receipt": "r-begin2"})
    raw.read_until_receipt("r-begin2")
    raw.send_frame("ABORT", {"transaction": "t2", "receipt": "r-abort"})
    raw.read_until_receipt("r-abort")
    assert broker.queue(queue_name)["messages"] == 1


def test_disconnect_with_receipt_gets_receipt_then_close(broker, raw_stomp):
    raw = raw_stomp(broker)
    raw.connect("1.2")
    raw.send_frame("DISCONNECT", {"receipt": "bye"})
    frames = raw.read_until_receipt("bye")
    assert [f.command for f in frames] == ["RECEIPT"]
    assert raw.wait_closed(), "server kept the connection open after DISCONNECT's receipt"


# -- headers and bodies ---------------------------------------------------------------------


def test_message_frame_carries_message_id_destination_subscription_and_ack(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    sub = client.subscribe(f"/queue/{queue_name}", ack="client-individual")
    client.send(f"/queue/{queue_name}", "a")
    client.send(f"/queue/{queue_name}", "b")
    first, second = client.wait_for(2)
    for frame in (first, second):
        assert frame.headers["destination"] == f"/queue/{queue_name}"
        assert frame.headers["subscription"] == sub
        assert frame.headers["message-id"]
        assert frame.headers["ack"]
        assert frame.headers["redelivered"] == "false"  # as RabbitMQ: on every MESSAGE
    assert first.headers["message-id"] != second.headers["message-id"]
    assert first.headers["ack"] != second.headers["ack"]


def test_sender_headers_pass_through_to_the_consumer(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    client.subscribe(f"/queue/{queue_name}")
    headers = {"region": "eu", "amount": "12", "correlation-id": "c-9"}
    client.send(f"/queue/{queue_name}", "{}", headers=headers, content_type="application/json;charset=utf-8")
    (message,) = client.wait_for(1)
    assert message.headers["region"] == "eu"
    assert message.headers["amount"] == "12"
    assert message.headers["correlation-id"] == "c-9"
    assert message.headers["content-type"] == "application/json;charset=utf-8"


def test_header_value_with_colon_and_newline_round_trips_in_1_2(broker, stomp_client, queue_name):
    tricky = "a:b\nc\\d\re"
    client = stomp_client(broker)
    client.subscribe(f"/queue/{queue_name}")
    client.send(f"/queue/{queue_name}", "x", headers={"note": tricky})
    (message,) = client.wait_for(1)
    assert message.headers["note"] == tricky


def test_header_name_with_colon_round_trips_in_1_2(broker, raw_stomp, queue_name):
    raw = raw_stomp(broker)
    raw.connect("1.2")
    raw.send_frame("SUBSCRIBE", {"id": "s", "destination": f"/queue/{queue_name}", "receipt": "r"})
    raw.read_until_receipt("r")
    raw.send_frame("SEND", [("destination", f"/queue/{queue_name}"), ("k\\cey", "v\\c1")], "x")
    message = raw.read_until(lambda f: f.command == "MESSAGE")[-1]
    assert message.headers["k:ey"] == "v:1"


def test_header_value_with_colon_and_newline_round_trips_in_1_1(broker, raw_stomp, queue_name):
    raw = raw_stomp(broker)
    raw.connect("1.1")
    raw.send_frame("SUBSCRIBE", {"id": "s", "destination": f"/queue/{queue_name}", "receipt": "r"})
    raw.read_until_receipt("r")
    raw.send_frame("SEND", [("destination", f"/queue/{queue_name}"), ("note", "a\\cb\\nc\\\\d")], "x")
    message = raw.read_until(lambda f: f.command == "MESSAGE")[-1]
    assert message.headers["note"] == "a:b\nc\\d"


def test_header_value_with_colon_round_trips_in_1_0(broker, raw_stomp, queue_name):
    raw = raw_stomp(broker)
    raw.connect("1.0")
    raw.send_frame("SUBSCRIBE", {"id": "s", "destination": f"/queue/{queue_name}", "receipt": "r"})
    raw.read_until_receipt("r")
    raw.send_frame("SEND", [("destination", f"/queue/{queue_name}"), ("note", "12:30:00")], "x")
    message = raw.read_until(lambda f: f.command == "MESSAGE")[-1]
    assert message.headers["note"] == "12:30:00"


def test_body_with_nul_bytes_round_trips_with_content_length(broker, stomp_client, queue_name):
    body = b"a\x00b\x00\x00c" + bytes(range(256)) * 4 + b"\x00"
    client = stomp_client(broker, auto_decode=False)
    client.subscribe(f"/queue/{queue_name}")
    client.send(f"/queue/{queue_name}", body, receipt=True)
    (message,) = client.wait_for(1)
    assert message.body == body
    assert int(message.headers["content-length"]) == len(body)


def test_body_without_content_length_ends_at_first_nul(broker, raw_stomp, queue_name):
    raw = raw_stomp(broker)
    raw.connect("1.2")
    raw.send_frame("SUBSCRIBE", {"id": "s", "destination": f"/queue/{queue_name}", "receipt": "r"})
    raw.read_until_receipt("r")
    raw.send_frame("SEND", {"destination": f"/queue/{queue_name}"}, "plain text body", content_length=False)
    message = raw.read_until(lambda f: f.command == "MESSAGE")[-1]
    assert message.body == b"plain text body"


def test_messages_from_one_producer_to_one_queue_keep_their_order(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    count = 300
    for n in range(count):
        producer.send(f"/queue/{queue_name}", str(n), receipt=(n == count - 1))
    assert bodies(consumer.wait_for(count)) == [str(n) for n in range(count)]


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_older_protocol_versions_send_receive_and_ack(broker, stomp_client, queue_name, version):
    client = stomp_client(broker, version=version)
    client.subscribe(f"/queue/{queue_name}", ack="client")
    client.send(f"/queue/{queue_name}", "hello", receipt=True)
    (message,) = client.wait_for(1)
    assert message.body == "hello"
    assert message.headers["destination"] == f"/queue/{queue_name}"
    client.ack(message, receipt=True)
    broker.wait_queue(queue_name, messages=0, messages_acknowledged=1)


def test_ack_receipt_arrives_after_the_ack_takes_effect(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    client.subscribe(f"/queue/{queue_name}", ack="client-individual")
    client.send(f"/queue/{queue_name}", "m", receipt=True)
    (message,) = client.wait_for(1)
    client.ack(message, receipt=True)
    queue = broker.queue(queue_name)
    assert (queue["messages"], queue["messages_acknowledged"]) == (0, 1)

"""ERROR frames and what comes before them, NACK in transactions, acks in STOMP 1.0/1.1
(issue 13, defects 10 and 13 and the small STOMP items).

- Every RECEIPT that is due (its message stored) is written before an ERROR, in order, so a
  client never resends what was stored.
- A journal that cannot be written is an ERROR naming the problem, for SENDs with or
  without a receipt, never a traceback.
- A NACK in a transaction takes effect at COMMIT; ABORT gives the message back.
- With STOMP 1.0/1.1 two subscriptions of one connection can each ACK the same topic message.
- CONNECT and a bad frame in one packet: CONNECTED, then the ERROR about the bad frame.
"""

from __future__ import annotations

import pytest
from brokerproc import BrokerProcess, RawStomp, encode_frame, unique

FAIL_LIMIT = 5
BROKER_CONFIG = {
    "address-settings": {
        "fail.#": {"max-size-messages": FAIL_LIMIT, "address-full-policy": "FAIL"},
    },
}


def _frames_until_error(raw: RawStomp, timeout: float = 5.0) -> tuple[list, object]:
    frames, error = raw.read_until_error_or_close(timeout)
    assert error is not None, f"no ERROR: {[(f.command, f.headers) for f in frames]}"
    return frames[:-1], error


def _receipt_ids(frames) -> list[str]:
    return [f.headers.get("receipt-id") for f in frames if f.command == "RECEIPT"]


# -- defect 13: receipts before the ERROR ------------------------------------------------


def test_receipts_of_stored_sends_come_before_the_error_of_a_bad_frame(broker, raw_stomp, queue_name):
    raw = raw_stomp(broker)
    raw.connect("1.2")
    sends = b"".join(
        encode_frame("SEND", {"destination": f"/queue/{queue_name}", "persistent": "true",
                              "receipt": f"r{n}"}, f"m{n}")
        for n in range(5)
    )
    raw.send(sends + b"SEND\nno colon here\n\nbad\x00")  # one packet
    before, error = _frames_until_error(raw)
    assert _receipt_ids(before) == [f"r{n}" for n in range(5)]
    assert "colon" in error.headers["message"]
    assert raw.wait_closed()
    broker.wait_queue(queue_name, messages=5)


def test_fail_policy_error_comes_after_the_receipts_of_the_sends_stored_before_it(
        broker, raw_stomp, queue_name):
    address = f"fail.{queue_name}"
    raw = raw_stomp(broker)
    raw.connect("1.2")
    raw.send(b"".join(
        encode_frame("SEND", {"destination": f"/queue/{address}", "persistent": "true",
                              "receipt": f"r{n}"}, f"m{n}")
        for n in range(FAIL_LIMIT + 1)
    ))
    before, error = _frames_until_error(raw)
    assert _receipt_ids(before) == [f"r{n}" for n in range(FAIL_LIMIT)]
    assert error.headers.get("receipt-id") == f"r{FAIL_LIMIT}"
    assert "full" in error.headers["message"]
    broker.wait_queue(address, messages=FAIL_LIMIT)


# -- defect 10: storage errors -----------------------------------------------------------


class FileSizeLimited(BrokerProcess):
    """A broker that may not write past `limit` bytes in any file (RLIMIT_FSIZE): a journal
    write past it fails with EFBIG, as a full or failing disk would fail it."""

    limit = 256 * 1024

    @property
    def command(self) -> list[str]:
        return ["prlimit", f"--fsize={self.limit}", "--", *super().command]


@pytest.fixture
def limited_broker(tmp_path):
    proc = FileSizeLimited(tmp_path / "limited", {"broker": {"journal-file-size": "4MiB"}})
    proc.start()
    yield proc
    proc.kill()  # its journal is broken on purpose: no clean stop asked


def test_a_failed_journal_write_is_an_error_frame_even_without_a_receipt(limited_broker):
    proc = limited_broker
    queue = unique("journal")
    with RawStomp(proc.stomp_port) as silent:
        silent.connect("1.2")
        # No receipt: nothing but an ERROR can tell this client its message was not stored.
        silent.send_frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true"},
                          "x" * (300 * 1024))
        _, error = _frames_until_error(silent)
        assert "could not be stored" in error.headers["message"]
        assert "File too large" in error.headers["message"]
        assert silent.wait_closed()
    with RawStomp(proc.stomp_port) as later:
        later.connect("1.2")
        later.send_frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true",
                                  "receipt": "r-later"}, "y")
        _, error = _frames_until_error(later)
        assert error.headers.get("receipt-id") == "r-later"
        assert "File too large" in error.headers["message"]
    assert not proc.tracebacks(), proc.log_tail(60)


def test_journal_refusing_writes_mid_stream_is_an_error_not_a_traceback(limited_broker):
    proc = limited_broker
    queue = unique("journal")
    with RawStomp(proc.stomp_port) as producer:
        producer.connect("1.2")
        for _ in range(40):  # 640 KiB of persistent messages, no receipts
            if not producer.send_frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true"},
                                       "x" * 16384):
                break
        _, error = _frames_until_error(producer)
        assert "File too large" in error.headers["message"]
    assert not proc.tracebacks(), proc.log_tail(60)


def test_messages_whose_journal_write_failed_are_not_left_in_the_queue(limited_broker):
    proc = limited_broker
    queue = unique("journal")
    with RawStomp(proc.stomp_port) as producer:
        producer.connect("1.2")
        for n in range(40):
            if not producer.send_frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true",
                                                "receipt": f"r{n}"}, "x" * 16384):
                break
        frames, _error = _frames_until_error(producer)
    receipted = sum(1 for frame in frames if frame.command == "RECEIPT")
    # Only what was receipted may stay: a client retries the rest, and must not duplicate it.
    assert proc.queue(queue)["messages"] == receipted
    assert not proc.tracebacks(), proc.log_tail(60)


# -- NACK in a transaction ---------------------------------------------------------------


def test_nack_in_a_transaction_takes_effect_at_commit(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "once more", receipt=True)
    (first,) = consumer.wait_for(1)
    consumer.begin("tx-1")
    consumer.nack(first, transaction="tx-1", receipt=True)
    consumer.listener.assert_no_more(1, within=0.5)  # not redelivered before the COMMIT
    consumer.commit("tx-1")
    _, again = consumer.wait_for(2)
    assert (again.body, again.headers["redelivered"]) == ("once more", "true")
    consumer.ack(again, receipt=True)
    broker.wait_queue(queue_name, messages=0)


def test_nack_in_an_aborted_transaction_is_undone_like_an_ack(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "a", receipt=True)
    consumer.send(f"/queue/{queue_name}", "b", receipt=True)
    first, second = consumer.wait_for(2)
    consumer.begin("tx-1")
    consumer.ack(first, transaction="tx-1")
    consumer.nack(second, transaction="tx-1", receipt=True)
    consumer.listener.assert_no_more(2, within=0.5)
    consumer.abort("tx-1")  # both go back to the queue, in order
    again = consumer.wait_for(4)[2:]
    assert [f.body for f in again] == ["a", "b"]
    assert all(f.headers["redelivered"] == "true" for f in again)
    for frame in again:
        consumer.ack(frame, receipt=True)
    broker.wait_queue(queue_name, messages=0)


# -- STOMP 1.0/1.1: one topic message on two subscriptions -------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_two_subscriptions_of_one_connection_each_ack_the_same_topic_message(
        broker, stomp_client, version):
    topic = unique("twice")
    client_id = unique("cid")
    consumer = stomp_client(broker, version=version, client_id=client_id)
    for name in ("one", "two"):
        consumer.subscribe(f"/topic/{topic}", ack="client-individual",
                           headers={"durable-subscription-name": name}, sub_id=f"s-{name}")
    consumer.send(f"/topic/{topic}", "shared", receipt=True)
    frames = consumer.wait_for(2)
    assert frames[0].headers["message-id"] == frames[1].headers["message-id"]
    assert {f.headers["subscription"] for f in frames} == {"s-one", "s-two"}
    for frame in frames:
        consumer.ack(frame, receipt=True)  # 1.1 names the subscription; 1.0 only the message-id
    assert not consumer.listener.errors
    for name in ("one", "two"):
        broker.wait_queue(f"{client_id}.{name}", messages=0)


# -- CONNECT and a bad frame in one packet ----------------------------------------------


def test_connect_and_a_bad_frame_in_one_packet_get_connected_then_the_error(broker, raw_stomp):
    raw = raw_stomp(broker)
    raw.send(encode_frame("CONNECT", {"accept-version": "1.2", "host": "h"})
             + b"SEND\nno colon here\n\nbad\x00")
    connected = raw.read_frame()
    assert connected is not None and connected.command == "CONNECTED", connected
    raw.version = "1.2"
    error = raw.expect_error()
    assert "colon" in error.headers["message"], error.headers


def test_first_delivery_says_redelivered_false_in_every_version(broker, stomp_client, queue_name):
    for version in ("1.0", "1.1", "1.2"):
        client = stomp_client(broker, version=version)
        client.subscribe(f"/queue/{queue_name}", ack="auto")
        client.send(f"/queue/{queue_name}", version, receipt=True)
        (frame,) = client.wait_for(1)
        assert frame.headers.get("redelivered") == "false", (version, frame.headers)
        client.disconnect()


def test_a_producer_still_sending_after_its_error_reads_the_error_frame(broker, queue_name):
    """The broker shuts its side after an ERROR and drops what the peer still sends; closing
    with those frames unread would answer them with a reset, and the peer's kernel may then
    throw the unread ERROR frame away (the client sees only ECONNRESET)."""
    import socket
    import time

    sock = socket.create_connection(("127.0.0.1", broker.stomp_port), timeout=10)
    try:
        sock.sendall(encode_frame("CONNECT", {"accept-version": "1.2", "host": "x"}))
        assert sock.recv(4096).startswith(b"CONNECTED")
        send = encode_frame("SEND", {"destination": f"/queue/{queue_name}"}, "x" * 4000)
        sock.sendall(b"BOGUS\n\n\x00")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # a pipelining producer has not read the ERROR yet
            sock.sendall(send * 16)  # (was: EPIPE or ECONNRESET once the broker had closed)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        assert received.startswith(b"ERROR"), received[:200]
        assert b"unknown command" in received
    finally:
        sock.close()

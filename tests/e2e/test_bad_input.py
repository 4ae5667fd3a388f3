"""Bad input over a raw socket: an ERROR frame saying what was wrong, then the connection
closes, and the broker keeps serving everyone else."""

from __future__ import annotations

import os
import re

import pytest
from brokerproc import broker_still_serves, encode_frame

MAX_FRAME = 64 * 1024
MAX_HEADERS = 50
MAX_HEADER_LENGTH = 1024
BROKER_CONFIG = {
    "stomp": {"max-frame-size": "64KiB", "max-headers": MAX_HEADERS, "max-header-length": "1KiB"},
}


def _expect_error(broker, raw, pattern: str, receipt: str | None = None):
    """ERROR whose `message` matches `pattern`, connection closed, broker still serving."""
    error = raw.expect_error()
    message = error.headers.get("message", "")
    assert re.search(pattern, message, re.IGNORECASE), f"ERROR message {message!r} does not match {pattern!r}"
    if receipt is not None:
        assert error.headers.get("receipt-id") == receipt, error
    broker_still_serves(broker.stomp_port)
    return error


def _connected(broker, raw_stomp, version="1.2"):
    raw = raw_stomp(broker)
    raw.connect(version)
    return raw


# -- malformed frames -----------------------------------------------------------------------


def test_header_line_without_colon_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send(b"SEND\ndestination:/queue/bad-colon\nthis line has no colon\n\nbody\x00")
    _expect_error(broker, raw, r"colon|malformed header|header line")


def test_unknown_command_gets_error_naming_it(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_frame("FROBNICATE", {"receipt": "r-unknown"})
    _expect_error(broker, raw, r"FROBNICATE|unknown command")


@pytest.mark.parametrize(
    ("length", "body"),
    [("abc", b"body"), ("-4", b"body"), ("4x", b"body"), ("3", b"body")],
    ids=["not-a-number", "negative", "trailing-junk", "no-nul-after-body"],
)
def test_bad_content_length_gets_error(broker, raw_stomp, length, body):
    raw = _connected(broker, raw_stomp)
    raw.send(f"SEND\ndestination:/queue/bad-length\ncontent-length:{length}\n\n".encode() + body + b"\x00")
    _expect_error(broker, raw, r"content-length")


def test_undefined_escape_sequence_in_1_2_header_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send(b"SEND\ndestination:/queue/bad-escape\nnote:a\\tb\n\nx\x00")
    _expect_error(broker, raw, r"escape")


def test_random_garbage_closes_only_that_connection(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send(os.urandom(4096))
    assert raw.wait_closed(), "broker kept a connection that sent random bytes"
    broker_still_serves(broker.stomp_port)


def test_connection_cut_in_the_middle_of_a_frame_does_not_harm_the_broker(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send(b"SEND\ndestination:/queue/half-frame\ncontent-length:1000\n\nonly a part")
    raw.close()
    broker_still_serves(broker.stomp_port)


# -- limits ---------------------------------------------------------------------------------


def test_frame_over_max_frame_size_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_while_reading(encode_frame("SEND", {"destination": "/queue/too-big"}, b"x" * (100 * 1024)))
    _expect_error(broker, raw, r"size|large|big|limit|exceed|long")


def test_body_without_nul_past_max_frame_size_gets_error_not_buffering(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_while_reading(b"SEND\ndestination:/queue/endless\n\n" + b"y" * (3 * MAX_FRAME))
    _expect_error(broker, raw, r"size|large|big|limit|exceed|long")


def test_endless_command_line_gets_error_not_buffering(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_while_reading(b"S" * (3 * MAX_FRAME))
    # Rejecting it early as an unknown command is as good as a size limit.
    _expect_error(broker, raw, r"size|large|big|limit|exceed|long|unknown command")


def test_frame_just_under_max_frame_size_is_accepted(broker, stomp_client, queue_name):
    client = stomp_client(broker, auto_decode=False)
    client.subscribe(f"/queue/{queue_name}")
    body = b"z" * (MAX_FRAME - 1024)
    client.send(f"/queue/{queue_name}", body, receipt=True)
    (message,) = client.wait_for(1)
    assert message.body == body


def test_too_many_headers_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    headers = [("destination", "/queue/many-headers")] + [(f"h{n}", "v") for n in range(MAX_HEADERS + 10)]
    raw.send_frame("SEND", headers, "x")
    _expect_error(broker, raw, r"header")


def test_header_line_over_max_header_length_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_frame("SEND", {"destination": "/queue/long-header", "big": "v" * (2 * MAX_HEADER_LENGTH)}, "x")
    _expect_error(broker, raw, r"header")


# -- frames that are well formed but wrong --------------------------------------------------


def test_send_before_connect_gets_error(broker, raw_stomp):
    raw = raw_stomp(broker)
    raw.send_frame("SEND", {"destination": "/queue/too-early"}, "x")
    _expect_error(broker, raw, r"connect")


def test_subscribe_without_destination_gets_error_with_receipt_id(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_frame("SUBSCRIBE", {"id": "s1", "receipt": "r-sub"})
    _expect_error(broker, raw, r"destination", receipt="r-sub")


def test_send_without_destination_gets_error_with_receipt_id(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_frame("SEND", {"receipt": "r-send"}, "nowhere")
    _expect_error(broker, raw, r"destination", receipt="r-send")


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_ack_or_nack_of_unknown_id_gets_error_with_receipt_id(broker, raw_stomp, command):
    raw = _connected(broker, raw_stomp)
    raw.send_frame(command, {"id": "no-such-ack-id", "receipt": "r-ack"})
    _expect_error(broker, raw, r"unknown|no such|not found|no-such-ack-id", receipt="r-ack")


def test_send_in_a_transaction_that_was_not_begun_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_frame("SEND", {"destination": "/queue/no-tx", "transaction": "ghost", "receipt": "r-tx"}, "x")
    _expect_error(broker, raw, r"transaction", receipt="r-tx")


def test_commit_of_unknown_transaction_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_frame("COMMIT", {"transaction": "ghost", "receipt": "r-commit"})
    _expect_error(broker, raw, r"transaction", receipt="r-commit")


def test_unknown_ack_mode_gets_error(broker, raw_stomp):
    raw = _connected(broker, raw_stomp)
    raw.send_frame("SUBSCRIBE", {"id": "s1", "destination": "/queue/bad-mode", "ack": "sometimes",
                                 "receipt": "r-mode"})
    _expect_error(broker, raw, r"ack", receipt="r-mode")


def test_frames_before_the_error_still_take_effect(broker, raw_stomp, queue_name):
    raw = _connected(broker, raw_stomp)
    raw.send(encode_frame("SEND", {"destination": f"/queue/{queue_name}"}, "good")
             + b"SEND\nno colon here\n\nbad\x00")
    raw.expect_error()
    broker.wait_queue(queue_name, messages=1)

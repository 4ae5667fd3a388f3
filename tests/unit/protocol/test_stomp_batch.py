"""Batch SEND decoding (`protocol.stomp.batch`) through the sans-IO connection: what a
broker makes of a batch, and the ERROR each malformed one gets (tests/e2e/test_batch_send.py
sends them to a real broker)."""

from __future__ import annotations

import pytest

from pagemq.protocol.errors import FrameError
from pagemq.protocol.stomp.batch import encode_batch, encode_batch_body
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.events import Send, SendBatch
from pagemq.protocol.stomp.frames import encode_frame


def connection(**limits: int) -> StompConnection:
    conn = StompConnection(**limits)
    conn.receive_data(encode_frame("CONNECT", [("accept-version", "1.2"), ("host", "h"),
                                               ("pagemq-batch", "1")]))
    return conn


def batch_frame(body: bytes, **headers: str) -> bytes:
    head = {"destination": "/queue/q", "transaction": "t", "pagemq-batch": "1", "receipt": "r", **headers}
    return encode_frame("SEND", head, body)


def decoded(data: bytes, **limits: int) -> tuple[SendBatch, list[tuple[dict[str, str], bytes]]]:
    """The batch event, and its messages (decoded as they are taken)."""
    (event,) = connection(**limits).receive_data(data)
    assert isinstance(event, SendBatch)
    return event, list(event.messages)


def refusal(data: bytes, **limits: int) -> FrameError:
    """The error a bad batch gets: from the frame, or from a message as it is taken."""
    with pytest.raises(FrameError) as caught:
        decoded(data, **limits)
    assert caught.value.receipt_id == "r"  # the ERROR names the frame it answers
    return caught.value


def test_connected_advertises_batches_and_the_frame_limit_when_asked():
    conn = connection(max_frame_size=123456)
    assert b"pagemq-batch:1\npagemq-max-frame-size:123456\n" in conn.connected(session="s")


def test_messages_get_the_frames_headers_with_their_own_on_top():
    messages = [([("persistent", "false"), ("k", "a:b\\c\nd")], b"one"),
                ([], b""),
                ([("ü", "ñ€"), ("k", "first"), ("k", "second")], b"zwei")]
    data = encode_batch("/queue/q", "tx", messages, {"persistent": "true", "shared": "s"}, receipt="r1")
    event, taken = decoded(data)
    assert (event.destination, event.transaction, event.receipt) == ("/queue/q", "tx", "r1")
    common = {"destination": "/queue/q", "persistent": "true", "shared": "s"}
    assert taken == [
        ({**common, "persistent": "false", "k": "a:b\\c\nd"}, b"one"),
        (common, b""),
        ({**common, "ü": "ñ€", "k": "first"}, b"zwei"),  # the first of a repeat wins
    ]
    taken[1][0]["x"] = "y"  # each message has a dict of its own
    assert "x" not in taken[0][0]
    # What the lengths say bounds what the messages hold (a receiver weighs a batch by them).
    assert event.message_count == 3 and event.body_bytes == 3 + 4
    assert event.header_count >= sum(map(len, (headers for headers, _body in taken)))
    assert event.header_text >= sum(len(k) + len(v) for headers, _body in taken for k, v in headers.items())


def test_an_empty_batch_holds_no_messages():
    assert decoded(batch_frame(encode_batch_body([])))[1] == []


def test_a_plain_send_stays_a_send():
    (event,) = connection().receive_data(encode_frame("SEND", {"destination": "/queue/q"}, b"x"))
    assert type(event) is Send


good = encode_batch_body([([("a", "b")], b"body")])


@pytest.mark.parametrize(("data", "problem"), [
    (batch_frame(good, transaction=""), "a batch goes in a transaction"),
    (batch_frame(good, **{"pagemq-batch": "2"}), "unknown pagemq-batch version '2'"),
    (batch_frame(b"\x01\x00"), "shorter than its message count"),
    (batch_frame(b"\xff\xff\x00\x00" + good[4:]), "cannot hold the lengths of 65535 messages"),
    (batch_frame(good + b"x"), "lengths describe 20 bytes, the body has 21"),
    (batch_frame(good[:-1]), "lengths describe 20 bytes, the body has 19"),
    (batch_frame(encode_batch_body([([("destination", "/queue/x")], b"")])), "sets 'destination'"),
    (batch_frame(encode_batch_body([([("transaction", "t2")], b"")])), "sets 'transaction'"),
    (batch_frame(good.replace(b"a:b\n", b"a\xffb\n")), "not UTF-8"),
    (batch_frame(good.replace(b"a:b\n", b"\xed\xa0\x80\n")), "not UTF-8"),  # a lone surrogate: as in a head
    (batch_frame(encode_batch_body([([("a", "\u00e9")], b""), ([], b"")]).replace(  # "é" split between two
        b"\x05\x00\x00\x00\x00\x00\x00\x00", b"\x03\x00\x00\x00\x02\x00\x00\x00", 1)),
     "ends inside a UTF-8 sequence"),
    (batch_frame(good.replace(b"a:b\n", b"a-b\n")), "header line without a colon"),
    (batch_frame(good.replace(b"a:b\n", b"a:b\\")), "does not end with a line feed"),
    (batch_frame(good.replace(b"a:b\n", b"\\t:\n")), "invalid escape sequence"),
])
def test_a_malformed_batch_is_refused_saying_what_is_wrong(data, problem):
    assert problem in refusal(data).message


def test_a_messages_headers_keep_the_frame_limits():
    many = encode_batch_body([([(f"h{n}", "v") for n in range(10)], b"")])
    assert "more than max-headers 10" in refusal(batch_frame(many), max_headers=10).message
    long_line = encode_batch_body([([("h", "v" * 200)], b"")])
    assert "max-header-length of 100" in refusal(batch_frame(long_line), max_header_length=100).message
    wide = encode_batch_body([([("x", "\u00e9" * 60)], b"")])  # 62 characters, 122 bytes: bytes count
    assert "max-header-length of 100" in refusal(batch_frame(wide), max_header_length=100).message

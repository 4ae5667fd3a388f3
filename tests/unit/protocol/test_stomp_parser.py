"""FrameParser: every fixture whole, byte by byte, cut at every offset, and with trailing bytes
(h11's `tr()` and NATS' `split_test.go`); each malformed input and limit with its message."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pagemq.protocol.errors import FrameError, RemoteProtocolError
from pagemq.protocol.stomp.frames import Frame
from pagemq.protocol.stomp.parser import FrameParser

# (id, version the parser is set to, bytes, expected frames, heart-beat EOLs counted)
FIXTURES: list[tuple[str, str, bytes, list[Frame], int]] = [
    (
        "1.0-connect-no-accept-version",
        "1.0",
        b"CONNECT\nlogin:guest\npasscode:guest\n\n\x00",
        [Frame("CONNECT", {"login": "guest", "passcode": "guest"})],
        0,
    ),
    (
        "1.0-colon-in-value-and-spaces-kept",
        "1.0",
        b"SEND\ndestination:/queue/a\nnote:12:30:00\npadded:  two sides  \n\nhi\x00",
        [Frame("SEND", {"destination": "/queue/a", "note": "12:30:00", "padded": "  two sides  "}, b"hi")],
        0,
    ),
    (
        "1.0-backslashes-are-literal",
        "1.0",
        b"SEND\ndestination:/queue/a\npath:C:\\temp\\new\n\n\x00",
        [Frame("SEND", {"destination": "/queue/a", "path": "C:\\temp\\new"})],
        0,
    ),
    (
        "1.1-escaped-headers",
        "1.1",
        b"SEND\ndestination:/queue/a\nk\\cey:a\\cb\\nc\\\\d\n\nx\x00",
        [Frame("SEND", {"destination": "/queue/a", "k:ey": "a:b\nc\\d"}, b"x")],
        0,
    ),
    (
        "1.2-escaped-carriage-return",
        "1.2",
        b"SEND\ndestination:/queue/a\nnote:line\\r\\nnext\n\n\x00",
        [Frame("SEND", {"destination": "/queue/a", "note": "line\r\nnext"})],
        0,
    ),
    (
        "1.2-content-length-body-with-nul-and-blank-lines",
        "1.2",
        b"SEND\ndestination:/queue/a\ncontent-length:8\n\na\x00b\n\n\x00c\x00\x00",
        [Frame("SEND", {"destination": "/queue/a", "content-length": "8"}, b"a\x00b\n\n\x00c\x00")],
        0,
    ),
    (
        "1.2-nul-terminated-body-with-blank-lines",
        "1.2",
        b"SEND\ndestination:/queue/a\n\nfirst\n\nsecond\r\n\x00",
        [Frame("SEND", {"destination": "/queue/a"}, b"first\n\nsecond\r\n")],
        0,
    ),
    (
        "1.2-crlf-line-endings",
        "1.2",
        b"SEND\r\ndestination:/queue/a\r\ncontent-length:2\r\n\r\nok\x00\r\n",
        [Frame("SEND", {"destination": "/queue/a", "content-length": "2"}, b"ok")],
        1,
    ),
    (
        "1.2-crlf-connect-before-negotiation",
        "1.0",
        b"STOMP\r\naccept-version:1.2\r\nhost:example.org\r\n\r\n\x00",
        [Frame("STOMP", {"accept-version": "1.2", "host": "example.org"})],
        0,
    ),
    (
        "1.2-connect-is-never-unescaped",
        "1.2",
        b"CONNECT\naccept-version:1.2\npasscode:a\\b\n\n\x00",
        [Frame("CONNECT", {"accept-version": "1.2", "passcode": "a\\b"})],
        0,
    ),
    (
        "heart-beats-between-around-frames",
        "1.2",
        b"\n\r\n\nDISCONNECT\n\n\x00\n\n\r\nACK\nid:7\n\n\x00\n",
        [Frame("DISCONNECT", {}), Frame("ACK", {"id": "7"})],
        7,
    ),
    (
        "repeated-header-first-wins",
        "1.2",
        b"MESSAGE\nfoo:World\nfoo:Hello\nsubscription:0\n\n\x00",
        [Frame("MESSAGE", {"foo": "World", "subscription": "0"})],
        0,
    ),
    (
        "zero-content-length-and-no-headers",
        "1.2",
        b"SEND\ncontent-length:0\n\n\x00RECEIPT\n\n\x00",
        [Frame("SEND", {"content-length": "0"}), Frame("RECEIPT", {})],
        0,
    ),
    (
        "utf8-headers-and-empty-value",
        "1.2",
        "ERROR\nmessage:caf\u00e9 \u2713\nempty:\n:nameless\n\n\x00".encode(),
        [Frame("ERROR", {"message": "caf\u00e9 \u2713", "empty": "", "": "nameless"})],
        0,
    ),
    (
        "server-frames-pipelined",
        "1.2",
        b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00MESSAGE\nsubscription:s\nmessage-id:1\n"
        b"content-length:3\n\nabc\x00RECEIPT\nreceipt-id:r\\c1\n\n\x00",
        [
            Frame("CONNECTED", {"version": "1.2", "heart-beat": "0,0"}),
            Frame("MESSAGE", {"subscription": "s", "message-id": "1", "content-length": "3"}, b"abc"),
            Frame("RECEIPT", {"receipt-id": "r:1"}),
        ],
        0,
    ),
]

# A frame left incomplete after each fixture: the parser must keep it for the next call.
TRAILER = b"SEND\ndestination:/queue/next\ncontent-length:4\n\nne"
TRAILER_REST = b"xt\x00"
TRAILER_FRAME = Frame("SEND", {"destination": "/queue/next", "content-length": "4"}, b"next")


def _parse(version: str, chunks: list[bytes], **limits: int) -> tuple[list[Frame], FrameParser]:
    parser = FrameParser(**limits)
    parser.version = version
    frames: list[Frame] = []
    for chunk in chunks:
        frames.extend(parser.feed(chunk))
    return frames, parser


def _check(version: str, chunks: list[bytes], expected: list[Frame], beats: int) -> None:
    frames, parser = _parse(version, chunks)
    assert frames == expected
    assert parser.buffered == 0
    assert parser.heartbeats_received == beats


def _ids(fixtures: list[tuple[str, str, bytes, list[Frame], int]]) -> list[str]:
    return [fixture[0] for fixture in fixtures]


@pytest.mark.parametrize(("name", "version", "data", "expected", "beats"), FIXTURES, ids=_ids(FIXTURES))
def test_fixture_parses_when_fed_whole(name, version, data, expected, beats):
    _check(version, [data], expected, beats)


@pytest.mark.parametrize(("name", "version", "data", "expected", "beats"), FIXTURES, ids=_ids(FIXTURES))
def test_fixture_parses_when_fed_byte_by_byte(name, version, data, expected, beats):
    _check(version, [data[i : i + 1] for i in range(len(data))], expected, beats)


@pytest.mark.parametrize(("name", "version", "data", "expected", "beats"), FIXTURES, ids=_ids(FIXTURES))
def test_fixture_parses_when_cut_at_every_offset(name, version, data, expected, beats):
    for cut in range(len(data) + 1):
        _check(version, [data[:cut], data[cut:]], expected, beats)


@pytest.mark.parametrize(("name", "version", "data", "expected", "beats"), FIXTURES, ids=_ids(FIXTURES))
def test_fixture_parses_when_cut_at_every_pair_of_offsets(name, version, data, expected, beats):
    for first in range(0, len(data) + 1, 3):
        for second in range(first, len(data) + 1, 2):
            _check(version, [data[:first], data[first:second], data[second:]], expected, beats)


@pytest.mark.parametrize(("name", "version", "data", "expected", "beats"), FIXTURES, ids=_ids(FIXTURES))
def test_fixture_leaves_trailing_bytes_for_the_next_frame(name, version, data, expected, beats):
    for cut in range(0, len(data) + 1, 5):
        frames, parser = _parse(version, [data[:cut], data[cut:] + TRAILER])
        assert frames == expected
        assert parser.buffered == len(TRAILER)
        assert parser.feed(TRAILER_REST) == [TRAILER_FRAME]
        assert parser.buffered == 0


def test_next_frame_returns_frames_one_at_a_time():
    parser = FrameParser()
    parser.append(b"BEGIN\ntransaction:t\n\n\x00COMMIT\ntransaction:t\n\n\x00COMM")
    assert parser.next_frame() == Frame("BEGIN", {"transaction": "t"})
    assert parser.next_frame() == Frame("COMMIT", {"transaction": "t"})
    assert parser.next_frame() is None
    assert parser.buffered == 4


def test_version_set_between_frames_changes_unescaping_of_the_next_frame():
    parser = FrameParser()
    parser.append(b"SEND\nk:a\\cb\n\n\x00SEND\nk:a\\cb\n\n\x00")
    assert parser.next_frame().headers == {"k": "a\\cb"}
    parser.version = "1.2"
    assert parser.next_frame().headers == {"k": "a:b"}


def test_lone_carriage_return_between_frames_waits_for_its_line_feed():
    frames, parser = _parse("1.2", [b"ABORT\ntransaction:t\n\n\x00\r"])
    assert len(frames) == 1
    assert parser.buffered == 1
    assert parser.feed(b"\nABORT\ntransaction:u\n\n\x00") == [Frame("ABORT", {"transaction": "u"})]
    assert parser.heartbeats_received == 1


def test_large_body_split_into_many_reads():
    body = bytes(range(256)) * 1024
    data = b"SEND\ncontent-length:%d\n\n" % len(body) + body + b"\x00"
    frames, _ = _parse("1.2", [data[i : i + 1000] for i in range(0, len(data), 1000)])
    assert frames == [Frame("SEND", {"content-length": str(len(body))}, body)]


def test_large_bodies_come_out_as_bytes_and_the_frames_after_them_still_parse():
    body = bytes(range(1, 256)) * 400  # past 64 KiB, no NUL: also without content-length
    with_length = b"SEND\ncontent-length:%d\n\n" % len(body) + body + b"\x00"
    without = b"SEND\n\n" + body + b"\x00"
    frames, parser = _parse("1.2", [with_length + without + b"ABORT\ntransaction:t\n\n\x00"])
    assert frames == [Frame("SEND", {"content-length": str(len(body))}, body), Frame("SEND", {}, body),
                      Frame("ABORT", {"transaction": "t"})]
    assert all(type(frame.body) is bytes for frame in frames)
    assert parser.buffered == 0


@contextmanager
def _raises_message(message: str) -> Iterator[None]:
    """Expect a FrameError whose message is exactly `message`."""
    with pytest.raises(FrameError) as caught:
        yield
    assert caught.value.message == message


# -- malformed input ------------------------------------------------------------------------

ERRORS: list[tuple[str, str, bytes, str]] = [
    ("header-without-colon", "1.2", b"SEND\ndestination:/q\nno colon here\n\nx\x00",
     "header line without a colon: 'no colon here'"),
    ("unknown-command", "1.2", b"FROBNICATE\nreceipt:r\n\n\x00", "unknown command 'FROBNICATE'"),
    ("lowercase-command", "1.2", b"send\n\n\x00", "unknown command 'send'"),
    ("content-length-not-a-number", "1.2", b"SEND\ncontent-length:abc\n\nbody\x00",
     "content-length must be a non-negative integer, got 'abc'"),
    ("content-length-negative", "1.2", b"SEND\ncontent-length:-4\n\nbody\x00",
     "content-length must be a non-negative integer, got '-4'"),
    ("content-length-trailing-junk", "1.2", b"SEND\ncontent-length:4x\n\nbody\x00",
     "content-length must be a non-negative integer, got '4x'"),
    ("content-length-unicode-digit", "1.2", "SEND\ncontent-length:\u0664\n\nbody\x00".encode(),
     "content-length must be a non-negative integer, got '\u0664'"),
    ("content-length-short-of-nul", "1.2", b"SEND\ncontent-length:3\n\nbody\x00",
     "frame body is not followed by a NUL byte after content-length 3"),
    ("escape-tab-1.2", "1.2", b"SEND\nnote:a\\tb\n\nx\x00",
     "invalid escape sequence '\\\\t' in header 'a\\\\tb' (STOMP 1.2)"),
    ("escape-cr-1.1", "1.1", b"SEND\nnote:a\\rb\n\nx\x00",
     "invalid escape sequence '\\\\r' in header 'a\\\\rb' (STOMP 1.1)"),
    ("escape-trailing-backslash", "1.2", b"SEND\nnote:ab\\\n\nx\x00",
     "invalid escape sequence '\\\\' in header 'ab\\\\' (STOMP 1.2)"),
    ("escape-in-name", "1.1", b"SEND\nn\\ame:v\n\nx\x00",
     "invalid escape sequence '\\\\a' in header 'n\\\\ame' (STOMP 1.1)"),
    ("headers-not-utf8", "1.2", b"SEND\nnote:\xff\xfe\n\nx\x00", "frame headers are not valid UTF-8"),
    ("garbage-before-frame", "1.2", b"\x00\x01SEND\n\n\x00", "unknown command '\\x00\\x01SEND'"),
]


@pytest.mark.parametrize(("name", "version", "data", "message"), ERRORS, ids=[e[0] for e in ERRORS])
def test_malformed_frame_raises_frame_error_with_message(name, version, data, message):
    parser = FrameParser()
    parser.version = version
    with pytest.raises(FrameError) as caught:
        parser.feed(data)
    assert caught.value.message == message
    assert isinstance(caught.value, RemoteProtocolError)


@pytest.mark.parametrize(("name", "version", "data", "message"), ERRORS, ids=[e[0] for e in ERRORS])
def test_malformed_frame_fed_byte_by_byte_raises_too(name, version, data, message):
    parser = FrameParser()
    parser.version = version
    with pytest.raises(FrameError):
        for i in range(len(data)):
            parser.feed(data[i : i + 1])


def test_frames_before_a_bad_one_are_returned_by_next_frame():
    parser = FrameParser()
    parser.append(b"BEGIN\ntransaction:t\n\n\x00SEND\nbad\n\n\x00")
    assert parser.next_frame() == Frame("BEGIN", {"transaction": "t"})
    with pytest.raises(FrameError, match="without a colon"):
        parser.next_frame()


def test_parser_stays_failed_after_an_error():
    parser = FrameParser()
    with pytest.raises(FrameError) as first:
        parser.feed(b"NOPE\n\n\x00")
    with pytest.raises(FrameError) as again:
        parser.feed(b"SEND\n\n\x00")
    assert again.value.message == first.value.message
    assert parser.buffered == 0


def test_feed_error_carries_the_frames_completed_before_it():
    with pytest.raises(FrameError) as caught:
        FrameParser().feed(b"BEGIN\ntransaction:t\n\n\x00NOPE\n\n\x00")
    assert caught.value.events == [Frame("BEGIN", {"transaction": "t"})]


def test_errors_carry_the_receipt_when_the_headers_were_readable():
    for data in (b"FROB\nreceipt:r-1\n\n\x00", b"SEND\nreceipt:r-1\ncontent-length:x\n\n\x00",
                 b"SEND\nreceipt:r-1\ncontent-length:1\n\nab\x00"):
        with pytest.raises(FrameError) as caught:
            FrameParser().feed(data)
        assert caught.value.receipt_id == "r-1", data


# -- limits ---------------------------------------------------------------------------------


def test_content_length_over_max_frame_size_fails_before_the_body_arrives():
    parser = FrameParser(max_frame_size=1000)
    with _raises_message("content-length 5000 exceeds max-frame-size of 1000 bytes"):
        parser.feed(b"SEND\ncontent-length:5000\n\n")


def test_content_length_with_thousands_of_digits_is_a_frame_error():
    with _raises_message(f"content-length {'9' * 30}... exceeds max-frame-size of 16777216 bytes"):
        FrameParser().feed(b"SEND\ncontent-length:" + b"9" * 5000 + b"\n\n")


def test_content_length_with_spaces_around_it_is_accepted():
    frames, _ = _parse("1.2", [b"SEND\ncontent-length: 2 \n\nab\x00"])
    assert frames[0].body == b"ab"


def test_headers_plus_content_length_over_max_frame_size_fails():
    parser = FrameParser(max_frame_size=1000)
    with _raises_message("frame exceeds max-frame-size of 1000 bytes"):
        parser.feed(b"SEND\ndestination:/queue/a\ncontent-length:990\n\n")


def test_frame_of_exactly_max_frame_size_is_accepted():
    head = b"SEND\ncontent-length:0000000968\n\n"
    body = b"b" * 968
    assert len(head + body) == 1000
    frames, _ = _parse("1.2", [head + body + b"\x00"], max_frame_size=1000)
    assert frames[0].body == body
    with pytest.raises(FrameError, match="max-frame-size"):
        _parse("1.2", [head.replace(b"968", b"969") + body + b"b\x00"], max_frame_size=1000)
    frames, _ = _parse("1.2", [b"SEND\n\n" + b"n" * 994 + b"\x00"], max_frame_size=1000)
    assert len(frames[0].body) == 994
    with pytest.raises(FrameError, match="max-frame-size"):
        _parse("1.2", [b"SEND\n\n" + b"n" * 995 + b"\x00"], max_frame_size=1000)


def test_body_without_nul_fails_once_past_max_frame_size_not_later():
    parser = FrameParser(max_frame_size=10_000)
    parser.feed(b"SEND\ndestination:/queue/endless\n\n")
    with _raises_message("frame exceeds max-frame-size of 10000 bytes"):
        for _ in range(100):
            parser.feed(b"y" * 1000)
            assert parser.buffered <= 10_001
    assert parser.buffered == 0


def test_nul_terminated_frame_over_max_frame_size_in_one_read_fails():
    with pytest.raises(FrameError, match="max-frame-size"):
        FrameParser(max_frame_size=100).feed(b"SEND\n\n" + b"y" * 200 + b"\x00")


def test_endless_command_line_fails_at_once():
    parser = FrameParser()
    with _raises_message("unknown command 'SSSSSSSSSSSS'"):
        parser.feed(b"S" * 100_000)


def test_unknown_command_fails_as_soon_as_its_line_is_complete():
    parser = FrameParser()
    with _raises_message("unknown command 'GET / HTTP/1.1'"):
        parser.feed(b"GET / HTTP/1.1\r\nHost: x")


def test_header_line_over_max_header_length_fails():
    with _raises_message("header line exceeds max-header-length of 100 bytes"):
        FrameParser(max_header_length=100).feed(b"SEND\nbig:" + b"v" * 200 + b"\n\n\x00")


def test_unfinished_header_line_over_max_header_length_fails_before_its_end():
    parser = FrameParser(max_header_length=100)
    parser.feed(b"SEND\ndestination:/queue/a\nbig:")
    with pytest.raises(FrameError, match="max-header-length"):
        for _ in range(50):
            parser.feed(b"v" * 10)
            assert parser.buffered < 200


def test_header_line_of_exactly_max_header_length_is_accepted_with_crlf():
    line = b"k:" + b"v" * 98
    frames, _ = _parse("1.2", [b"SEND\r\n" + line + b"\r\n\r\n\x00"], max_header_length=100)
    assert frames[0].headers == {"k": "v" * 98}
    frames, _ = _parse("1.2", [b"SEND\r\n", line + b"\r", b"\n\r\n\x00"], max_header_length=100)
    assert frames[0].headers == {"k": "v" * 98}


def test_too_many_headers_fails():
    headers = b"".join(b"h%d:v\n" % n for n in range(11))
    with _raises_message("frame has more than max-headers 10 header lines"):
        FrameParser(max_headers=10).feed(b"SEND\n" + headers + b"\n\x00")


def test_too_many_headers_fails_before_the_head_ends():
    parser = FrameParser(max_headers=10)
    with pytest.raises(FrameError, match="max-headers"):
        parser.feed(b"SEND\n" + b"h:v\n" * 11)


def test_exactly_max_headers_is_accepted():
    headers = b"".join(b"h%d:v\n" % n for n in range(10))
    frames, _ = _parse("1.2", [b"SEND\n" + headers + b"\n\x00"], max_headers=10)
    assert len(frames[0].headers) == 10


def test_byte_by_byte_feed_of_a_long_frame_is_linear():
    """Every search resumes where the previous one stopped: 200 KB one byte at a time."""
    data = b"SEND\n" + b"".join(b"h%d:%s\n" % (n, b"v" * 100) for n in range(500)) + b"\n"
    data += b"b" * 150_000 + b"\x00"
    parser = FrameParser()
    feed = parser.feed
    frames = []
    for i in range(len(data)):
        frames.extend(feed(data[i : i + 1]))
    assert len(frames) == 1
    assert len(frames[0].body) == 150_000

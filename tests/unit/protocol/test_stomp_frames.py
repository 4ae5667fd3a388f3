"""Frame encoding and header escaping per version, and encode -> parse round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagemq.protocol.errors import FrameError, LocalProtocolError
from pagemq.protocol.stomp.frames import (
    HEARTBEAT,
    Frame,
    encode_frame,
    escape,
    sanitize_unescaped,
    unescape,
)
from pagemq.protocol.stomp.parser import FrameParser


def test_encode_adds_content_length_for_a_body():
    assert encode_frame("SEND", {"destination": "/queue/a"}, b"a\x00b") == (
        b"SEND\ndestination:/queue/a\ncontent-length:3\n\na\x00b\x00"
    )


def test_encode_without_body_has_no_content_length():
    assert encode_frame("SUBSCRIBE", [("id", "1"), ("destination", "/queue/a")]) == (
        b"SUBSCRIBE\nid:1\ndestination:/queue/a\n\n\x00"
    )
    assert encode_frame("DISCONNECT", {}) == b"DISCONNECT\n\n\x00"
    assert encode_frame("SEND", {}, b"xy") == b"SEND\ncontent-length:2\n\nxy\x00"


def test_encode_keeps_a_content_length_the_caller_gave():
    assert encode_frame("SEND", [("content-length", "2"), ("a", "b")], b"xy") == (
        b"SEND\ncontent-length:2\na:b\n\nxy\x00"
    )


def test_encode_refuses_a_content_length_that_does_not_match_the_body():
    with pytest.raises(LocalProtocolError, match="does not match a body of 2 bytes"):
        encode_frame("SEND", [("a", "b"), ("content-length", "5")], b"xy")


def test_encode_accepts_mappings_lists_and_generators_of_pairs():
    expected = b"ACK\nid:1\n\n\x00"
    assert encode_frame("ACK", {"id": "1"}) == expected
    assert encode_frame("ACK", [("id", "1")]) == expected
    assert encode_frame("ACK", (pair for pair in [("id", "1")])) == expected


def test_encode_keeps_repeated_headers_in_order():
    encoded = encode_frame("MESSAGE", [("foo", "World"), ("foo", "Hello")])
    assert encoded == b"MESSAGE\nfoo:World\nfoo:Hello\n\n\x00"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.2", b"MESSAGE\nk\\cey:a\\cb\\nc\\\\d\\re\n\n\x00"),
        ("1.1", b"MESSAGE\nk\\cey:a\\cb\\nc\\\\d\re\n\n\x00"),
    ],
)
def test_encode_escapes_headers_for_the_version(version, expected):
    assert encode_frame("MESSAGE", {"k:ey": "a:b\nc\\d\re"}, version=version) == expected


def test_encode_1_0_sends_colons_and_backslashes_in_values_as_they_are():
    encoded = encode_frame("MESSAGE", {"note": "12:30 C:\\x"}, version="1.0")
    assert encoded == b"MESSAGE\nnote:12:30 C:\\x\n\n\x00"


@pytest.mark.parametrize("command", ["CONNECT", "STOMP", "CONNECTED"])
def test_connect_and_connected_frames_are_never_escaped(command):
    assert encode_frame(command, {"passcode": "a:b\\c"}) == f"{command}\npasscode:a:b\\c\n\n\x00".encode()


@pytest.mark.parametrize(
    ("command", "version", "headers"),
    [
        ("MESSAGE", "1.0", {"note": "two\nlines"}),
        ("MESSAGE", "1.0", {"k:ey": "v"}),
        ("CONNECT", "1.2", {"login": "a\nb"}),
        ("CONNECTED", "1.2", {"x:y": "z"}),
    ],
)
def test_encode_refuses_headers_that_cannot_be_carried_unescaped(command, version, headers):
    with pytest.raises(LocalProtocolError, match="cannot be sent without escaping"):
        encode_frame(command, headers, version=version)


def test_sanitize_unescaped_replaces_line_breaks_and_name_colons():
    assert sanitize_unescaped([("k:ey", "a\r\nb")]) == [("k_ey", "a  b")]


def test_heartbeat_is_one_line_feed():
    assert HEARTBEAT == b"\n"


@pytest.mark.parametrize(
    ("version", "raw", "escaped"),
    [
        ("1.0", "a:b\nc\\d", "a:b\nc\\d"),
        ("1.1", "a:b\nc\\d\r", "a\\cb\\nc\\\\d\r"),
        ("1.2", "a:b\nc\\d\r", "a\\cb\\nc\\\\d\\r"),
    ],
)
def test_escape_and_unescape_per_version(version, raw, escaped):
    assert escape(raw, version) == escaped
    assert unescape(escaped, version) == raw


def test_unescape_rejects_undefined_sequences():
    for version, text in [("1.2", "a\\t"), ("1.1", "\\r"), ("1.2", "end\\"), ("1.1", "\\C")]:
        with pytest.raises(FrameError, match="invalid escape sequence"):
            unescape(text, version)


def test_frames_compare_by_value():
    assert Frame("SEND", {"a": "b"}, b"x") == Frame("SEND", {"a": "b"}, b"x")
    assert Frame("SEND", {"a": "b"}, b"x") != Frame("SEND", {"a": "c"}, b"x")
    assert "SEND" in repr(Frame("SEND", {}))


# -- round trips ----------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_NAME = _TEXT.filter(lambda name: name != "content-length")


def _safe_1_0(text: str) -> bool:
    return "\n" not in text and not text.endswith("\r")


_HEADERS = st.lists(st.tuples(_NAME, _TEXT), max_size=8)
_BODY = st.binary(max_size=300)


def _expected_headers(pairs: list[tuple[str, str]], body: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in pairs:
        headers.setdefault(name, value)
    if body:
        headers.setdefault("content-length", str(len(body)))
    return headers


def _parse_in_chunks(data: bytes, version: str, cuts: list[int]) -> list[Frame]:
    parser = FrameParser()
    parser.version = version
    frames: list[Frame] = []
    previous = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        frames.extend(parser.feed(data[previous:cut]))
        previous = cut
    assert parser.buffered == 0
    return frames


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(["1.1", "1.2"]),
    command=st.sampled_from(["SEND", "MESSAGE", "ERROR", "SUBSCRIBE"]),
    pairs=_HEADERS,
    body=_BODY,
    cuts=st.lists(st.integers(min_value=0), max_size=4),
)
def test_encoded_frame_parses_back_for_any_headers_and_body(version, command, pairs, body, cuts):
    if version == "1.1":  # 1.1 has no escape for CR, and a trailing CR reads as a CR LF ending
        pairs = [(n, v) for n, v in pairs if not n.endswith("\r") and not v.endswith("\r")]
    data = encode_frame(command, pairs, body, version=version) + HEARTBEAT
    assert _parse_in_chunks(data, version, cuts) == [Frame(command, _expected_headers(pairs, body), body)]


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(_NAME.filter(lambda n: ":" not in n and _safe_1_0(n)), _TEXT.filter(_safe_1_0)),
                   max_size=8),
    body=_BODY,
    cuts=st.lists(st.integers(min_value=0), max_size=4),
)
def test_encoded_1_0_frame_parses_back(pairs, body, cuts):
    data = encode_frame("SEND", pairs, body, version="1.0")
    assert _parse_in_chunks(data, "1.0", cuts) == [Frame("SEND", _expected_headers(pairs, body), body)]


@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from(["1.1", "1.2"]), text=_TEXT)
def test_escape_then_unescape_is_identity(version, text):
    assert unescape(escape(text, version), version) == text


def _unescape_by_spec(text: str, version: str) -> str | None:
    """The spec's reading, one character at a time: None for an undefined sequence."""
    table = {"n": "\n", "c": ":", "\\": "\\"} | ({"r": "\r"} if version == "1.2" else {})
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        following = text[index + 1:index + 2]
        if following not in table:
            return None
        out.append(table[following])
        index += 2
    return "".join(out)


@settings(max_examples=500, deadline=None)
@given(version=st.sampled_from(["1.1", "1.2"]),
       text=st.text(alphabet=st.sampled_from(["\\", "c", "n", "r", "t", ":", "a", "C"]), max_size=12))
def test_unescape_reads_every_backslash_sequence_as_the_spec_does(version, text):
    expected = _unescape_by_spec(text, version)
    if expected is None:
        with pytest.raises(FrameError, match="invalid escape sequence"):
            unescape(text, version)
    else:
        assert unescape(text, version) == expected


@settings(max_examples=500, deadline=None)
@given(version=st.sampled_from(["1.1", "1.2"]),
       name=st.text(alphabet=st.sampled_from(["\\", "c", "n", "a"]), min_size=1, max_size=6),
       value=st.text(alphabet=st.sampled_from(["\\", "c", "n", "r", "t", ":", "a"]), max_size=12))
def test_parser_reads_escaped_header_lines_as_the_spec_does(version, name, value):
    parser = FrameParser()
    parser.version = version
    parser.append(f"SEND\n{name}:{value}\n\n\x00".encode())
    expected_name, expected_value = _unescape_by_spec(name, version), _unescape_by_spec(value, version)
    if expected_name is None or expected_value is None:
        with pytest.raises(FrameError, match="invalid escape sequence"):
            parser.next_frame()
    else:
        assert parser.next_frame().headers == {expected_name: expected_value}


@pytest.mark.parametrize(("head", "problem"), [
    (b"SEND\nreceipt:R\\c1\nnocolon\n\n", "without a colon"),
    (b"SEND\nreceipt:R\\c1\n" + b"h:v\n" * 6 + b"\n", "more than max-headers"),
    (b"SEND\nreceipt:R\\c1\nlong:" + b"x" * 200 + b"\n\n", "max-header-length"),
    (b"SEND\nreceipt:R\\c1\nb\\tc:v\n\n", "invalid escape"),
    (b"SEND\r\nreceipt:R\\c1\r\nh:\xff\xfe\r\n\r\n", "not valid UTF-8"),
])
def test_an_error_in_a_frame_head_still_names_the_receipt_the_frame_asked_for(head, problem):
    """(Before: a head that did not parse gave an ERROR without receipt-id.)"""
    parser = FrameParser(max_headers=5, max_header_length=100)
    parser.version = "1.2"
    with pytest.raises(FrameError, match=problem) as caught:
        parser.feed(head + b"body\x00")
    assert caught.value.receipt_id == "R:1"


@pytest.mark.parametrize(("version", "raw", "receipt"), [
    ("1.2", b"SEND\r\nnocolon\r\n\r\nreceipt:not-mine\x00", None),  # CRLF head: not the body's
    ("1.2", b"SEND\nreceipt:a\\nb\nnocolon\n\n\x00", "a\nb"),  # unescaped as its version says
    ("1.0", b"SEND\nreceipt:a\\cb\nnocolon\n\n\x00", "a\\cb"),  # 1.0: no escapes at all
])
def test_the_receipt_of_a_head_that_did_not_parse_is_read_as_its_headers_would_be(version, raw, receipt):
    parser = FrameParser()
    parser.version = version
    with pytest.raises(FrameError) as caught:
        parser.feed(raw)
    assert caught.value.receipt_id == receipt

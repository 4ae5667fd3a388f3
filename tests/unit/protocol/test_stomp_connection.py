"""StompConnection: version and heart-beat negotiation, events per frame and version, the
frames the server sends, and what each wrong frame is answered with."""

from __future__ import annotations

import pytest

from pagemq.protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from pagemq.protocol.stomp import events as ev
from pagemq.protocol.stomp.connection import (
    StompConnection,
    VersionMismatch,
    negotiate_heartbeat,
    negotiate_version,
)
from pagemq.protocol.stomp.frames import Frame, encode_frame
from pagemq.protocol.stomp.parser import FrameParser
from pagemq.protocol.stomp.state import State


def _frame(command: str, headers: dict[str, str] | list[tuple[str, str]], body: bytes = b"",
           version: str = "1.2") -> bytes:
    return encode_frame(command, headers, body, version=version)


def _connected(version: str = "1.2", **kwargs: object) -> StompConnection:
    connection = StompConnection(**kwargs)  # type: ignore[arg-type]
    accept = {} if version == "1.0" else {"accept-version": version}
    (connect,) = connection.receive_data(_frame("CONNECT", {**accept, "host": "h"}))
    assert connect.version == version
    connection.connected(session="s-1")
    return connection


def _parse_one(data: bytes, version: str = "1.2") -> Frame:
    parser = FrameParser()
    parser.version = version
    (frame,) = parser.feed(data)
    return frame


def _missing(command: str, header: str) -> str:
    return f"{command} frame is missing the required {header} header"


def _error(connection: StompConnection, data: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        connection.receive_data(data)
    assert connection.state is State.ERRORED
    return caught.value


# -- version negotiation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "served", "expected"),
    [
        ("1.0,1.1,1.2", ("1.0", "1.1", "1.2"), "1.2"),
        ("1.0,1.1", ("1.0", "1.1", "1.2"), "1.1"),
        ("1.1", ("1.0", "1.1", "1.2"), "1.1"),
        ("1.2, 1.0", ("1.0", "1.1", "1.2"), "1.2"),
        ("1.2,9.9", ("1.0", "1.1", "1.2"), "1.2"),
        (None, ("1.0", "1.1", "1.2"), "1.0"),
        ("1.0,1.1,1.2", ("1.0", "1.1"), "1.1"),
        ("2.0,3.1", ("1.0", "1.1", "1.2"), None),
        (None, ("1.1", "1.2"), None),
        ("", ("1.0", "1.1", "1.2"), None),
    ],
)
def test_negotiate_version_picks_the_highest_common_version(accept, served, expected):
    assert negotiate_version(accept, served) == expected


@pytest.mark.parametrize("command", ["CONNECT", "STOMP"])
def test_connect_and_stomp_frames_both_connect(command):
    connection = StompConnection()
    (event,) = connection.receive_data(_frame(command, {"accept-version": "1.1,1.2", "host": "broker",
                                                        "login": "u", "passcode": "p", "client-id": "c"}))
    assert event == ev.Connect("1.2", "broker", "u", "p", (0, 0), "c", {
        "accept-version": "1.1,1.2", "host": "broker", "login": "u", "passcode": "p", "client-id": "c"})
    assert (connection.version, connection.state) == ("1.2", State.CONNECTED)


def test_connect_without_accept_version_speaks_1_0_and_has_no_heartbeats():
    connection = StompConnection()
    (event,) = connection.receive_data(b"CONNECT\nheart-beat:1000,1000\n\n\x00")
    assert (event.version, event.heartbeat, event.host) == ("1.0", (0, 0), None)
    assert (connection.send_heartbeat_ms, connection.expect_heartbeat_ms) == (0, 0)
    assert _parse_one(connection.connected(session="s")).headers == {
        "version": "1.0", "session": "s", "server": "pagemq/0.1"}


def test_no_common_version_raises_version_mismatch_answered_by_version_error():
    connection = StompConnection()
    error = _error(connection, _frame("CONNECT", {"accept-version": "2.0,3.1", "receipt": "r"}))
    assert isinstance(error, VersionMismatch)
    assert isinstance(error, RemoteProtocolError)
    assert error.message == (
        "no common STOMP version: the client accepts 2.0,3.1, the server speaks 1.0,1.1,1.2"
    )
    assert error.receipt_id == "r"
    frame = _parse_one(connection.version_error(error.receipt_id), "1.0")
    assert frame.command == "ERROR"
    assert frame.headers["receipt-id"] == "r"
    assert frame.headers["version"] == "1.0,1.1,1.2"
    assert frame.headers["message"]


def test_version_error_lists_only_the_versions_served():
    connection = StompConnection(versions=("1.1", "1.2"))
    assert isinstance(_error(connection, b"CONNECT\n\n\x00"), VersionMismatch)
    assert _parse_one(connection.version_error()).headers["version"] == "1.1,1.2"


def test_unknown_served_version_is_a_configuration_error():
    with pytest.raises(ValueError, match="versions"):
        StompConnection(versions=("1.3",))


# -- heart-beats ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client", "server", "expected"),
    [
        ((0, 0), (10000, 10000), (0, 0)),
        ((0, 500), (10000, 10000), (10000, 0)),
        ((300, 0), (10000, 10000), (0, 10000)),
        ((20000, 30000), (10000, 10000), (30000, 20000)),
        ((1000, 1000), (0, 0), (0, 0)),
        ((1000, 1000), (500, 0), (1000, 0)),
    ],
)
def test_negotiate_heartbeat_takes_the_larger_interval_when_both_sides_want_one(client, server, expected):
    assert negotiate_heartbeat(client, server) == expected


def test_connected_frame_carries_the_negotiated_heartbeat():
    connection = StompConnection(server_heartbeat=(4000, 6000))
    connection.receive_data(_frame("CONNECT", {"accept-version": "1.1", "heart-beat": "5000, 1000"}))
    assert (connection.send_heartbeat_ms, connection.expect_heartbeat_ms) == (4000, 6000)
    frame = _parse_one(connection.connected(session="abc", extra_headers={"user-id": "u"}), "1.1")
    assert frame == Frame("CONNECTED", {"version": "1.1", "session": "abc", "server": "pagemq/0.1",
                                        "heart-beat": "4000,6000", "user-id": "u"})


@pytest.mark.parametrize("value", ["1000", "a,b", "-1,0", "1,2,3", "", "1000;1000"])
def test_bad_heartbeat_header_is_a_remote_protocol_error(value):
    error = _error(StompConnection(), _frame("CONNECT", {"accept-version": "1.2", "heart-beat": value,
                                                         "receipt": "r"}))
    assert error.message == f"heart-beat header must be two non-negative integers 'cx,cy', got {value!r}"
    assert error.receipt_id == "r"


def test_heartbeat_eols_are_counted():
    connection = _connected()
    assert connection.receive_data(b"\n\n\r\n") == []
    assert connection.heartbeats_received == 3


# -- the state table ------------------------------------------------------------------------


def test_send_before_connect_is_an_error():
    error = _error(StompConnection(), _frame("SEND", {"destination": "/queue/a", "receipt": "r"}))
    assert error.message == "expected CONNECT or STOMP frame, got SEND"
    assert error.receipt_id == "r"


def test_second_connect_is_an_error():
    error = _error(_connected(), _frame("CONNECT", {"accept-version": "1.2"}))
    assert error.message == "already connected: a second CONNECT frame is not allowed"


@pytest.mark.parametrize("command", ["MESSAGE", "RECEIPT", "ERROR", "CONNECTED"])
def test_server_frames_from_a_client_are_an_error(command):
    error = _error(_connected(), _frame(command, {}))
    assert error.message == f"{command} is a server frame; a client may not send it"


def test_frames_after_disconnect_are_an_error_but_heartbeats_are_not():
    connection = _connected()
    assert connection.receive_data(b"DISCONNECT\nreceipt:bye\n\n\x00\n") == [ev.Disconnect("bye")]
    assert connection.state is State.DISCONNECTED
    assert connection.receive_data(b"\n") == []
    assert _error(connection, b"SEND\ndestination:/q\n\n\x00").message == "got SEND after DISCONNECT"


def test_after_an_error_every_call_raises():
    connection = StompConnection()
    _error(connection, b"BOGUS\n\n\x00")
    with pytest.raises(RemoteProtocolError, match="already failed"):
        connection.receive_data(b"CONNECT\n\n\x00")


def test_events_before_a_bad_frame_ride_on_the_error():
    connection = _connected()
    error = _error(connection, _frame("SEND", {"destination": "/queue/a"}, b"good")
                   + b"SEND\nno colon here\n\nbad\x00")
    assert error.message == "header line without a colon: 'no colon here'"
    assert error.events == [ev.Send("/queue/a", {"destination": "/queue/a"}, b"good", None, None)]


def test_sending_error_moves_to_errored():
    connection = _connected()
    frame = _parse_one(connection.error("no such queue", receipt_id="r-9"))
    assert frame == Frame("ERROR", {"message": "no such queue", "receipt-id": "r-9",
                                    "content-type": "text/plain", "content-length": "14"}, b"no such queue\n")
    assert connection.state is State.ERRORED


def test_error_with_body_and_headers_before_connect_uses_1_0_and_flattens_line_breaks():
    connection = StompConnection()
    frame = _parse_one(connection.error("two\nlines", body=b"details", headers={"code": "7"}), "1.0")
    assert frame.headers == {"message": "two lines", "code": "7", "content-length": "7"}
    assert frame.body == b"details"


def test_connected_without_a_connect_is_a_local_error():
    with pytest.raises(LocalProtocolError):
        StompConnection().connected(session="s")
    connection = _connected()
    with pytest.raises(LocalProtocolError):
        connection.connected(session="again")


# -- events ---------------------------------------------------------------------------------


def test_pipelined_connect_sets_the_version_for_the_frames_behind_it():
    connection = StompConnection()
    data = _frame("CONNECT", {"accept-version": "1.2"}) + b"SEND\ndestination:/queue/a\nnote:a\\cb\\r\n\n\x00"
    _, send = connection.receive_data(data)
    assert send.headers["note"] == "a:b\r"


def test_send_event_keeps_properties_and_drops_receipt_transaction_and_content_length():
    connection = _connected()
    (send,) = connection.receive_data(_frame("SEND", [
        ("destination", "/queue/a"), ("receipt", "r"), ("transaction", "t"), ("content-type", "text/plain"),
        ("persistent", "true"), ("region", "eu")], b"body"))
    assert send == ev.Send("/queue/a", {"destination": "/queue/a", "content-type": "text/plain",
                                        "persistent": "true", "region": "eu"}, b"body", "r", "t")


@pytest.mark.parametrize(
    ("version", "command", "headers", "message"),
    [
        ("1.2", "SEND", {"receipt": "r"}, _missing("SEND", "destination")),
        ("1.2", "SEND", {"destination": "", "receipt": "r"}, _missing("SEND", "destination")),
        ("1.2", "SUBSCRIBE", {"id": "1", "receipt": "r"}, _missing("SUBSCRIBE", "destination")),
        ("1.1", "SUBSCRIBE", {"destination": "/q", "receipt": "r"}, _missing("SUBSCRIBE", "id")),
        ("1.2", "SUBSCRIBE", {"id": "1", "destination": "/q", "ack": "sometimes", "receipt": "r"},
         "ack header must be auto, client or client-individual, got 'sometimes'"),
        ("1.2", "UNSUBSCRIBE", {"destination": "/q", "receipt": "r"}, _missing("UNSUBSCRIBE", "id")),
        ("1.2", "ACK", {"message-id": "7", "receipt": "r"}, _missing("ACK", "id")),
        ("1.1", "ACK", {"id": "7", "receipt": "r"}, _missing("ACK", "message-id")),
        ("1.2", "NACK", {"receipt": "r"}, _missing("NACK", "id")),
        ("1.0", "NACK", {"message-id": "7", "receipt": "r"}, "NACK is not part of STOMP 1.0"),
        ("1.2", "BEGIN", {"receipt": "r"}, _missing("BEGIN", "transaction")),
        ("1.2", "COMMIT", {"receipt": "r"}, _missing("COMMIT", "transaction")),
        ("1.2", "ABORT", {"receipt": "r"}, _missing("ABORT", "transaction")),
    ],
)
def test_missing_or_bad_required_header_is_an_error_with_receipt(version, command, headers, message):
    error = _error(_connected(version), _frame(command, headers, version=version))
    assert (error.message, error.receipt_id) == (message, "r")
    assert isinstance(error, RemoteProtocolError)


def test_subscribe_event_defaults_ack_to_auto_and_keeps_all_headers():
    (sub,) = _connected().receive_data(_frame("SUBSCRIBE", {"id": "s", "destination": "/topic/t",
                                                            "selector": "a = 1", "browser": "true"}))
    headers = {"id": "s", "destination": "/topic/t", "selector": "a = 1", "browser": "true"}
    assert sub == ev.Subscribe("s", "/topic/t", "auto", "a = 1", headers, None)


def test_subscribe_without_id_in_1_0_is_named_after_its_destination_and_unsubscribes_by_it():
    connection = _connected("1.0")
    subscribe = _frame("SUBSCRIBE", {"destination": "/queue/a", "ack": "client"}, version="1.0")
    (sub,) = connection.receive_data(subscribe)
    assert (sub.id, sub.ack, sub.selector) == ("/queue/a", "client", None)
    (unsub,) = connection.receive_data(_frame("UNSUBSCRIBE", {"destination": "/queue/a"}, version="1.0"))
    assert (unsub.id, unsub.destination) == ("/queue/a", "/queue/a")


def test_unsubscribe_by_durable_subscription_name_needs_no_id():
    unsubscribe = _frame("UNSUBSCRIBE", {"durable-subscription-name": "d", "receipt": "r"})
    (unsub,) = _connected().receive_data(unsubscribe)
    assert (unsub.id, unsub.receipt, unsub.headers["durable-subscription-name"]) == (None, "r", "d")


@pytest.mark.parametrize(
    ("version", "headers", "expected"),
    [
        ("1.2", {"id": "3.7", "transaction": "t", "receipt": "r"}, ("3.7", None, "t", "r")),
        ("1.1", {"message-id": "m7", "subscription": "s"}, ("m7", "s", None, None)),
        ("1.0", {"message-id": "m7"}, ("m7", None, None, None)),
    ],
)
def test_ack_reads_the_id_header_of_its_version(version, headers, expected):
    (ack,) = _connected(version).receive_data(_frame("ACK", headers, version=version))
    assert ack == ev.Ack(*expected)


def test_nack_transactions_and_disconnect_events():
    events = _connected("1.1").receive_data(
        _frame("NACK", {"message-id": "m", "subscription": "s"}, version="1.1")
        + _frame("BEGIN", {"transaction": "t"}) + _frame("COMMIT", {"transaction": "t", "receipt": "c"})
        + _frame("ABORT", {"transaction": "u"}) + _frame("DISCONNECT", {})
    )
    assert events == [ev.Nack("m", "s", None, None), ev.Begin("t", None), ev.Commit("t", "c"),
                      ev.Abort("u", None), ev.Disconnect(None)]


def test_frame_limits_are_passed_to_the_parser():
    connection = StompConnection(max_frame_size=100, max_headers=2, max_header_length=50)
    assert "max-frame-size of 100" in _error(connection, b"CONNECT\n\n" + b"x" * 200).message
    connection = StompConnection(max_frame_size=100, max_headers=2, max_header_length=50)
    assert "max-headers 2" in _error(connection, b"CONNECT\na:1\nb:2\nc:3\n\n\x00").message
    connection = StompConnection(max_frame_size=100, max_headers=2, max_header_length=50)
    assert "max-header-length of 50" in _error(connection, b"CONNECT\na:" + b"1" * 60 + b"\n\n\x00").message


# -- frames the server sends ----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_message_frame_round_trips_for_the_negotiated_version(version):
    connection = _connected(version)
    headers = [("message-id", "1"), ("destination", "/queue/a"), ("subscription", "s"), ("time", "12:30")]
    if version != "1.0":
        headers.append(("note", "a:b\nc\\d"))
    frame = _parse_one(connection.message(headers, b"\x00body"), version)
    assert frame == Frame("MESSAGE", {**dict(headers), "content-length": "5"}, b"\x00body")


def test_message_to_a_1_0_consumer_flattens_headers_it_cannot_carry():
    frame = _parse_one(_connected("1.0").message({"note": "a\nb", "k:ey": "v"}, b""), "1.0")
    assert frame.headers == {"note": "a b", "k_ey": "v"}


def test_message_escapes_carriage_return_only_in_1_2():
    assert b"note:a\\rb" in _connected("1.2").message({"note": "a\rb"}, b"")
    assert b"note:a\rb" in _connected("1.1").message({"note": "a\rb"}, b"")


def test_receipt_frame_is_escaped_for_the_version():
    assert _connected("1.2").receipt("r:1") == b"RECEIPT\nreceipt-id:r\\c1\n\n\x00"
    assert _connected("1.0").receipt("r:1") == b"RECEIPT\nreceipt-id:r:1\n\n\x00"

"""A CONNECT decoded in the same read as a bad frame is still answered with CONNECTED."""

from __future__ import annotations

import pytest

from pagemq.protocol.errors import LocalProtocolError, RemoteProtocolError
from pagemq.protocol.stomp import events as ev
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import encode_frame
from pagemq.protocol.stomp.parser import FrameParser


def test_connect_before_a_bad_frame_in_one_read_gets_connected_then_error() -> None:
    connection = StompConnection()
    data = encode_frame("CONNECT", {"accept-version": "1.2"}) + b"SEND\nno colon\n\n\x00"
    with pytest.raises(RemoteProtocolError) as caught:
        connection.receive_data(data)
    (connect,) = caught.value.events
    assert isinstance(connect, ev.Connect)
    parser = FrameParser()
    frames = parser.feed(connection.connected(session="s") + connection.error(caught.value.message))
    assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
    assert frames[0].headers["version"] == "1.2"


def test_connected_after_an_error_frame_was_sent_is_refused() -> None:
    connection = StompConnection()
    connection.receive_data(encode_frame("CONNECT", {"accept-version": "1.2"}))
    connection.error("no")
    with pytest.raises(LocalProtocolError):
        connection.connected(session="s")


def test_connected_without_a_connect_is_refused() -> None:
    with pytest.raises(LocalProtocolError):
        StompConnection().connected(session="s")

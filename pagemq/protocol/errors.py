"""Protocol errors that carry their own reply hint (h11's `error_status_hint` idea).

A protocol layer cannot answer a peer itself (it holds no socket), so each error says what
the ERROR frame should read (`message`) and which receipt it answers (`receipt_id`). The
shell catches `ProtocolError`, sends the ERROR frame and closes; it never has to parse an
exception's text.

`RemoteProtocolError` blames the peer (bad bytes, a frame out of order); `LocalProtocolError`
blames our own caller (asked to encode a frame STOMP cannot carry). Only the first should
ever reach a client: the second is a bug in pagemq.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FrameError", "LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    """A protocol violation; `message` is the text for the ERROR frame's `message` header.

    `events` holds what the same `receive_data` call decoded before the bad frame: a client
    that pipelines a good SEND and a broken frame is owed the SEND (the ERROR comes after).
    """

    def __init__(self, message: str, *, receipt_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.receipt_id = receipt_id
        self.events: list[Any] = []


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol cannot express."""


class FrameError(RemoteProtocolError):
    """The byte stream does not form a valid STOMP frame (or breaks a size limit)."""

"""The server's side of one STOMP connection: bytes in, events out, frames to send back.

Sans-IO in h11's sense: `StompConnection` owns the frame parser, the negotiated version and
heart-beat intervals, and the connection state (`state.TRANSITIONS`); it holds no socket and
runs no timer. The asyncio shell feeds it what it reads, hands the events to the broker, and
writes the bytes that `connected()`, `message()`, `receipt()` and `error()` return.

Frames are turned into events one at a time, because a CONNECT decides how the frames
pipelined behind it are unescaped. If a frame is bad, `receive_data` raises; the events
decoded before it in the same call ride on the exception (`ProtocolError.events`) so the
shell can still act on them before it answers with ERROR.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from pagemq.protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from pagemq.protocol.stomp.batch import (
    BATCH_HEADER,
    BATCH_VERSION,
    MAX_FRAME_SIZE_HEADER,
    decode_batch,
)
from pagemq.protocol.stomp.events import BUILDERS, Builder, Connect, Event, Send
from pagemq.protocol.stomp.frames import VERSIONS, encode_frame, header_pairs, sanitize_unescaped
from pagemq.protocol.stomp.parser import (
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_HEADER_LENGTH,
    DEFAULT_MAX_HEADERS,
    FrameParser,
)
from pagemq.protocol.stomp.state import COMMAND_EVENTS, TRANSITIONS, State, unexpected_message

__all__ = ["StompConnection", "VersionMismatch", "negotiate_heartbeat", "negotiate_version"]


class VersionMismatch(RemoteProtocolError):
    """CONNECT named no version we serve; the shell answers with `version_error()`."""


def _dispatch_tables() -> dict[State, dict[str, tuple[State, Builder | None]]]:
    """Per state: command -> (next state, event builder); None builds a Connect."""
    tables: dict[State, dict[str, tuple[State, Builder | None]]] = {state: {} for state in State}
    for command, event_type in COMMAND_EVENTS.items():
        for state in State:
            target = TRANSITIONS.get((state, event_type))
            if target is not None:
                tables[state][command] = (target, BUILDERS.get(command))
    return tables


_DISPATCH = _dispatch_tables()


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def negotiate_version(accept_version: str | None, served: Iterable[str]) -> str | None:
    """The highest version both sides speak (no `accept-version` means 1.0), or None."""
    offered = {"1.0"} if accept_version is None else {v.strip() for v in accept_version.split(",")}
    common = [version for version in served if version in offered]
    return max(common, key=_version_key) if common else None


def negotiate_heartbeat(client: tuple[int, int], server: tuple[int, int]) -> tuple[int, int]:
    """(server send interval, interval the server expects from the client) in ms; 0 = none.

    STOMP 1.1 "Heart-beating": with CONNECT `heart-beat:cx,cy` and our `sx,sy`, the server
    sends every max(sx, cy) ms unless either is 0, and expects the client every max(cx, sy).
    """
    cx, cy = client
    sx, sy = server
    send = max(sx, cy) if sx and cy else 0
    expect = max(cx, sy) if cx and sy else 0
    return send, expect


def _parse_heartbeat(value: str | None, receipt: str | None) -> tuple[int, int]:
    if value is None:
        return 0, 0
    parts = value.split(",")
    if len(parts) == 2:
        first, second = parts[0].strip(), parts[1].strip()
        if first.isdigit() and second.isdigit() and first.isascii() and second.isascii():
            return int(first), int(second)
    raise RemoteProtocolError(
        f"heart-beat header must be two non-negative integers 'cx,cy', got {value!r}",
        receipt_id=receipt,
    )


_PLAIN_ID = re.compile(r"[^\\:\r\n]*")

class StompConnection:
    """One client connection, server role. Every method is synchronous and does no I/O."""

    def __init__(
        self,
        *,
        server_name: str = "pagemq/0.1",
        versions: tuple[str, ...] = VERSIONS,
        server_heartbeat: tuple[int, int] = (10000, 10000),
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_headers: int = DEFAULT_MAX_HEADERS,
        max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
    ) -> None:
        unknown = [version for version in versions if version not in VERSIONS]
        if unknown or not versions:
            raise ValueError(f"versions must be a non-empty subset of {VERSIONS}, got {versions}")
        self.server_name = server_name
        self.versions = versions
        self.server_heartbeat = server_heartbeat
        self.version: str | None = None
        self.state = State.AWAITING_CONNECT
        self.send_heartbeat_ms = 0
        self.expect_heartbeat_ms = 0
        self._parser = FrameParser(
            max_frame_size=max_frame_size, max_headers=max_headers, max_header_length=max_header_length
        )
        self._dispatch = _DISPATCH[self.state]
        self._pending_connect: Connect | None = None
        self._error_sent = False

    @property
    def heartbeats_received(self) -> int:
        """EOLs received between frames so far (heart-beats, and padding after frames)."""
        return self._parser.heartbeats_received

    # -- input ----------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as events."""
        return self._parser.buffered

    @property
    def pending_send(self) -> Mapping[str, str] | None:
        """The headers of a SEND still being received (see FrameParser.pending_send)."""
        return self._parser.pending_send

    def receive_data(self, data: bytes, max_events: int | None = None) -> list[Event]:
        """Events for every frame `data` completes, in order; raises on the first bad one.

        `max_events`: parse no more frames than that (0: only take the bytes); the rest stay
        buffered for a later call (`receive_data(b"")`), so a caller can spread the parsing
        of a large read over several turns of its loop."""
        if self.state is State.ERRORED:
            raise RemoteProtocolError("connection has already failed")
        parser = self._parser
        events: list[Event] = []
        left = -1 if max_events is None else max_events
        try:
            parser.append(data)
            while left and (frame := parser.next_frame()) is not None:
                left -= 1
                entry = self._dispatch.get(frame.command)
                if entry is None:
                    raise RemoteProtocolError(
                        unexpected_message(self.state, frame.command),
                        receipt_id=frame.headers.get("receipt"),
                    )
                target, build = entry
                if build is None:
                    events.append(self._connect(frame.headers))
                else:
                    # A builder runs only once CONNECT set the version, the parser's too.
                    event = build(frame.headers, frame.body, parser.version)
                    if type(event) is Send and BATCH_HEADER in event.headers:
                        events.append(decode_batch(event, max_headers=parser.max_headers,
                                                   max_header_length=parser.max_header_length))
                    else:
                        events.append(event)
                if target is not self.state:
                    self._enter(target)
        except ProtocolError as exc:
            self._enter(State.ERRORED)
            exc.events = events
            raise
        return events

    def _enter(self, state: State) -> None:
        self.state = state
        self._dispatch = _DISPATCH[state]

    def _connect(self, headers: dict[str, str]) -> Connect:
        receipt = headers.get("receipt")
        accept = headers.get("accept-version")
        version = negotiate_version(accept, self.versions)
        if version is None:
            raise VersionMismatch(
                f"no common STOMP version: the client accepts {accept or '1.0'}, "
                f"the server speaks {','.join(self.versions)}",
                receipt_id=receipt,
            )
        # STOMP 1.0 has no heart-beating; a 1.0 client's header is not ours to judge.
        heartbeat = (0, 0) if version == "1.0" else _parse_heartbeat(headers.get("heart-beat"), receipt)
        self.version = self._parser.version = version
        self.send_heartbeat_ms, self.expect_heartbeat_ms = negotiate_heartbeat(
            heartbeat, self.server_heartbeat
        )
        event = Connect(
            version=version,
            host=headers.get("host"),
            login=headers.get("login"),
            passcode=headers.get("passcode"),
            heartbeat=heartbeat,
            client_id=headers.get("client-id") or None,
            headers=headers,
        )
        self._pending_connect = event
        return event

    # -- output ---------------------------------------------------------------------------

    def connected(self, *, session: str, extra_headers: Mapping[str, str] | None = None) -> bytes:
        """The CONNECTED frame answering the CONNECT just received.

        `heart-beat` carries the negotiated intervals (send, expect): a client computing
        max(cx, sy) and max(sx, cy) from them gets the same figures the server uses.

        A CONNECT decoded before a bad frame in the same `receive_data` call (it rode on the
        exception's `events`) is still answered: the client gets CONNECTED, then the ERROR
        about the bad frame. Once `error()` has been called there is nothing left to answer.
        """
        connect = self._pending_connect
        if connect is None or self._error_sent:
            raise LocalProtocolError("connected() needs a CONNECT frame to answer")
        self._pending_connect = None
        headers = [("version", connect.version), ("session", session), ("server", self.server_name)]
        if connect.version != "1.0":
            headers.append(("heart-beat", f"{self.send_heartbeat_ms},{self.expect_heartbeat_ms}"))
        if connect.headers.get(BATCH_HEADER) == BATCH_VERSION:  # asked for: batch SENDs (stomp.batch)
            headers += [(BATCH_HEADER, BATCH_VERSION),
                        (MAX_FRAME_SIZE_HEADER, str(self._parser.max_frame_size))]
        if extra_headers:
            headers.extend(extra_headers.items())
        return encode_frame("CONNECTED", headers)

    def message(self, headers: Mapping[str, str] | Iterable[tuple[str, str]], body: bytes) -> bytes:
        """A MESSAGE frame escaped for the negotiated version (content-length added).

        A STOMP 1.0 consumer cannot receive a line feed in a header (1.0 has no escapes): such
        headers are sanitized rather than failing the delivery.
        """
        version = self.version or "1.0"
        if version != "1.0":
            return encode_frame("MESSAGE", headers, body, version=version)
        pairs = header_pairs(headers)
        try:
            return encode_frame("MESSAGE", pairs, body, version=version)
        except LocalProtocolError:
            return encode_frame("MESSAGE", sanitize_unescaped(pairs), body, version=version)

    def receipt(self, receipt_id: str) -> bytes:
        # One RECEIPT per persistent SEND is the hottest frame we write: plain ids skip the
        # general encoder (an id needing escapes, or a 1.0 id with a line feed, does not).
        if _PLAIN_ID.fullmatch(receipt_id):
            return b"RECEIPT\nreceipt-id:" + receipt_id.encode() + b"\n\n\x00"
        return encode_frame("RECEIPT", (("receipt-id", receipt_id),), version=self.version or "1.0")

    def error(
        self,
        message: str,
        *,
        receipt_id: str | None = None,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """An ERROR frame; the connection is ERRORED afterwards (the shell then closes).

        Without a `body`, the message is repeated as a text/plain body, which is what most
        client libraries show their users.
        """
        self._enter(State.ERRORED)
        self._error_sent = True
        version = self.version or "1.0"
        if version == "1.0":  # no escaping: a line break would end the header
            message = message.replace("\r", " ").replace("\n", " ")
        frame_headers = [("message", message)]
        if receipt_id is not None:
            frame_headers.append(("receipt-id", receipt_id))
        if not body:
            body = f"{message}\n".encode()
            frame_headers.append(("content-type", "text/plain"))
        if headers:
            frame_headers.extend(headers.items())
        return encode_frame("ERROR", frame_headers, body, version=version)

    def version_error(self, receipt_id: str | None = None) -> bytes:
        """ERROR for a CONNECT with no common version: `version` lists what we serve (and
        `receipt-id` answers the CONNECT's `receipt`, as every ERROR does)."""
        served = ",".join(self.versions)
        return self.error(
            f"no common STOMP version; this server speaks {served}", receipt_id=receipt_id,
            headers={"version": served},
        )

"""A small blocking STOMP 1.2 producer for Spark tasks: SENDs with pipelined receipts.

A Spark task is a plain Python function in a worker process: no event loop to host an
asyncio client, and stomp.py's listener thread would buy nothing here. So this is one socket
and one thread. Every SEND asks for a receipt; up to `window` of them may be unanswered
while more SENDs go out (frames are written in batches), so the broker's fsync latency is
paid once per window, not per row. pagemq answers receipts in frame order (docs/stomp.md),
so receipt `n` confirms every SEND up to `n`.

`send_transaction` sends many SENDs as one STOMP transaction (BEGIN, the SENDs, a COMMIT
asking for the receipt): the broker stores them with one page or journal write and answers
one receipt, which costs it less than half the CPU per message of receipted SENDs one by
one; several transactions are in flight at once, up to `window` messages. A pagemq broker
also takes a transaction's SENDs as one batch SEND (`protocol.stomp.batch`: asked for in
CONNECT, `batches` says whether the broker said yes), which saves it the parse of each frame.

A task must fail loudly rather than report rows it did not store: an ERROR frame, the
broker closing the connection, or no progress on receipts for `timeout` seconds (also a
broker that stops reading our SENDs) raise `StompSendError` naming what was unconfirmed.
Frames are encoded and parsed with the project's own codec (`pagemq.protocol.stomp`).
"""

from __future__ import annotations

import select
import socket
import time
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from urllib.parse import urlsplit

from pagemq.protocol.errors import ProtocolError
from pagemq.protocol.stomp.batch import BATCH_HEADER, BATCH_VERSION, MAX_FRAME_SIZE_HEADER
from pagemq.protocol.stomp.frames import Frame, encode_frame
from pagemq.protocol.stomp.parser import DEFAULT_MAX_FRAME_SIZE, FrameParser

__all__ = ["StompSendError", "StompSender", "parse_stomp_url"]

_WRITE_BYTES = 256 * 1024  # frames buffered before one sendall
_READ_BYTES = 64 * 1024


class StompSendError(RuntimeError):
    """The broker did not confirm what was sent (ERROR, closed connection, timeout)."""


def parse_stomp_url(url: str) -> tuple[str, int]:
    """(host, port) of `stomp://host:port`; ValueError otherwise."""
    parts = urlsplit(url.strip())
    if parts.scheme != "stomp" or not parts.hostname:
        raise ValueError(f"expected stomp://HOST:PORT, got {url!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in {url!r}: {exc}") from None
    return parts.hostname, port if port is not None else 61613


class StompSender:
    """One STOMP connection; `send` queues a SEND, `flush` waits for every receipt."""

    def __init__(self, host: str, port: int, *, login: str | None = None, passcode: str | None = None,
                 window: int = 1000, timeout: float = 30.0) -> None:
        self.host, self.port = host, port
        self.window = max(1, window)
        self.timeout = timeout
        self.sent = 0  # messages written or queued
        self.confirmed = 0  # messages whose receipt came (receipts come in order)
        self._receipts = 0  # receipt ids handed out
        self._awaited: deque[tuple[int, int]] = deque()  # (receipt id, messages sent up to it)
        self._transactions = 0
        self._login, self._passcode = login, passcode
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._parser = FrameParser()
        self._sock: socket.socket | None = None
        # Set by `connect`: whether the broker takes batch SENDs (`protocol.stomp.batch`), and
        # the largest frame it takes.
        self.batches = False
        self.max_frame_size = DEFAULT_MAX_FRAME_SIZE

    # ----- connection ------------------------------------------------------------------------

    def connect(self) -> StompSender:
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise StompSendError(f"pagemq option 'url': cannot connect to stomp://{self.host}:{self.port}: "
                                 f"{exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        headers = [("accept-version", "1.2"), ("host", self.host), ("heart-beat", "0,0"),
                   (BATCH_HEADER, BATCH_VERSION)]
        if self._login is not None:
            headers.append(("login", self._login))
        if self._passcode is not None:
            headers.append(("passcode", self._passcode))
        self._write(encode_frame("CONNECT", headers))
        try:
            frame = self._next_frame(time.monotonic() + self.timeout, "CONNECTED")
        except StompSendError as exc:  # refused at CONNECT: the login (a secured broker)
            raise StompSendError(f"pagemq option 'user': the broker at stomp://{self.host}:{self.port} "
                                 f"refused the connection (options user and password): {exc}") from None
        if frame.command != "CONNECTED":
            raise StompSendError(f"broker at {self.host}:{self.port} answered CONNECT with {frame.command}")
        self._parser.version = frame.headers.get("version", "1.2")
        if frame.headers.get(BATCH_HEADER) == BATCH_VERSION:  # a pagemq broker: batch SENDs
            size = frame.headers.get(MAX_FRAME_SIZE_HEADER, "")
            self.max_frame_size = int(size) if size.isdigit() else DEFAULT_MAX_FRAME_SIZE
            self.batches = True
        return self

    def close(self) -> None:
        """DISCONNECT (receipted, after every SEND is confirmed) and close; a broken
        connection is just closed."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            if self.confirmed == self.sent and not self._out:
                sock.sendall(encode_frame("DISCONNECT", [("receipt", "disconnect")]))
        except OSError:
            pass
        finally:
            sock.close()

    def __enter__(self) -> StompSender:
        return self.connect()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # ----- sending ---------------------------------------------------------------------------

    def send(self, destination: str, headers: Sequence[tuple[str, str]], body: bytes) -> None:
        """Queue one SEND (with a receipt); blocks while `window` receipts are outstanding."""
        frame = encode_frame("SEND", [("destination", destination), *headers,
                                      ("receipt", self._receipt_for(1))], body)
        self._queue(frame)
        if self._out_bytes >= _WRITE_BYTES or self.sent - self.confirmed >= self.window:
            self._push()
        while self.sent - self.confirmed >= self.window:
            self._await_receipts()

    def next_transaction(self) -> str:
        """A transaction name not used yet on this connection, for `send_transaction`."""
        self._transactions += 1
        return f"t{self._transactions}"

    def send_transaction(self, transaction: str, sends: bytes, messages: int) -> None:
        """Queue BEGIN, `sends` (`messages` encoded SEND frames, or batch SENDs holding that
        many, each with the header `transaction:<transaction>`, none asking for a receipt)
        and a receipted COMMIT.
        Blocks first while the messages unconfirmed and these would exceed `window`."""
        while self.sent > self.confirmed and self.sent - self.confirmed + messages > self.window:
            self._push()
            if self.sent - self.confirmed + messages > self.window:
                self._await_receipts()
        self._queue(encode_frame("BEGIN", [("transaction", transaction)]))
        self._queue(sends)
        self._queue(encode_frame("COMMIT", [("transaction", transaction),
                                            ("receipt", self._receipt_for(messages))]))
        if self._out_bytes >= _WRITE_BYTES:
            self._push()

    def _receipt_for(self, messages: int) -> str:
        self.sent += messages
        self._receipts += 1
        self._awaited.append((self._receipts, self.sent))
        return str(self._receipts)

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)

    def flush(self) -> None:
        """Return once the broker has confirmed every SEND so far."""
        self._push()
        while self.confirmed < self.sent:
            self._await_receipts()

    def _push(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self._out_bytes = 0
            self._write(data)
        self._read_ready()

    def _await_receipts(self) -> None:
        before = self.confirmed
        deadline = time.monotonic() + self.timeout
        while self.confirmed == before:
            self._handle(self._next_frame(deadline, "RECEIPT"))

    def _read_ready(self) -> None:
        """Take in whatever receipts have arrived, without waiting."""
        sock = self._require()
        while select.select([sock], [], [], 0)[0]:
            self._append(self._recv())
            while (frame := self._take()) is not None:
                self._handle(frame)

    def _handle(self, frame: Frame) -> None:
        if frame.command == "RECEIPT":
            receipt = frame.headers.get("receipt-id", "")
            if receipt.isdigit():
                number, awaited = int(receipt), self._awaited
                while awaited and awaited[0][0] <= number:
                    self.confirmed = awaited.popleft()[1]
            return
        if frame.command == "ERROR":
            message = frame.headers.get("message") or frame.body.decode("utf-8", "replace")
            which = frame.headers.get("receipt-id")
            about = f" (receipt {which})" if which else ""
            raise StompSendError(f"broker ERROR{about}: {message}; {self.sent - self.confirmed} of "
                                 f"{self.sent} message(s) unconfirmed")

    # ----- bytes -------------------------------------------------------------------------------

    def _require(self) -> socket.socket:
        if self._sock is None:
            raise StompSendError("not connected")
        return self._sock

    def _write(self, data: bytes) -> None:
        try:
            self._require().sendall(data)
        except TimeoutError:
            raise StompSendError(f"the broker took none of our SENDs for {self.timeout:g}s; "
                                 f"{self.sent - self.confirmed} message(s) unconfirmed") from None
        except OSError as exc:
            self._error_already_sent()
            raise StompSendError(f"connection to the broker lost: {exc}; {self.sent - self.confirmed} "
                                 "message(s) unconfirmed") from exc

    def _error_already_sent(self) -> None:
        """The write failed: an ERROR the broker sent before it closed may still be in our
        socket, and says why (a broker that resets the connection may have destroyed it)."""
        sock = self._sock
        try:
            while sock is not None and select.select([sock], [], [], 0)[0]:
                data = sock.recv(_READ_BYTES)
                if not data:
                    break
                self._append(data)
                while (frame := self._take()) is not None:
                    self._handle(frame)  # an ERROR raises, naming the broker's reason
        except OSError:
            return

    def _recv(self) -> bytes:
        try:
            data = self._require().recv(_READ_BYTES)
        except TimeoutError:
            return b""
        except OSError as exc:
            raise StompSendError(f"connection to the broker lost: {exc}; {self.sent - self.confirmed} "
                                 "message(s) unconfirmed") from exc
        if not data:
            raise StompSendError(f"the broker closed the connection; {self.sent - self.confirmed} of "
                                 f"{self.sent} message(s) unconfirmed")
        return data

    def _append(self, data: bytes) -> None:
        try:
            self._parser.append(data)
        except ProtocolError as exc:
            raise StompSendError(f"unreadable frame from the broker: {exc}") from exc

    def _take(self) -> Frame | None:
        try:
            return self._parser.next_frame() if self._parser.buffered else None
        except ProtocolError as exc:
            raise StompSendError(f"unreadable frame from the broker: {exc}") from exc

    def _next_frame(self, deadline: float, waiting_for: str) -> Frame:
        """The next frame (an ERROR raises), waiting for it until `deadline`."""
        sock = self._require()
        while (frame := self._take()) is None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise StompSendError(f"no {waiting_for} from the broker within {self.timeout:g}s; "
                                     f"{self.sent - self.confirmed} message(s) unconfirmed")
            self._append(self._recv())
        if frame.command == "ERROR":
            self._handle(frame)
        return frame

"""The STOMP side of `pagemq perf`: one asyncio Protocol per connection, producers, consumers.

The client must not be the bottleneck it measures, so the hot paths avoid per-message
work a general client would do: the SEND frame is encoded once with the project's codec
and only its `perf-ts` and `receipt` headers are spliced in per message; frames go out in
batches of one `transport.write`; incoming bytes are parsed straight from
`data_received` (no StreamReader, no per-frame task); ACKs produced while handling one
read are written together.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from pagemq.protocol.errors import ProtocolError
from pagemq.protocol.stomp.frames import Frame, encode_frame, escape
from pagemq.protocol.stomp.parser import FrameParser
from pagemq.tools.perf_stats import RoleStats

__all__ = [
    "TIMESTAMP_HEADER",
    "ClientOptions",
    "Consumer",
    "PerfError",
    "Producer",
    "StompLink",
    "open_link",
]

TIMESTAMP_HEADER = "perf-ts"
# Frames written per transport.write at most: large enough to amortize the syscall, small
# enough that one connection does not hold the loop (and its peers) for long.
MAX_BATCH = 128
DISCONNECT_RECEIPT = "perf-disconnect"


class PerfError(Exception):
    """The load test cannot go on (connect refused, ERROR frame, connection lost, timeout)."""


@dataclass(frozen=True)
class ClientOptions:
    """Everything a connection needs to know; picklable, so workers in other processes get it."""

    host: str = "127.0.0.1"
    port: int = 61613
    login: str | None = None
    passcode: str | None = None
    vhost: str | None = None
    destination: str = "/queue/perf"
    size: int = 1024
    persistent: bool = True
    receipt_window: int = 1000
    ack: str = "client-individual"
    ack_every: int = 500
    prefetch: int = 1000
    headers: tuple[tuple[str, str], ...] = ()
    connect_timeout: float = 10.0
    close_timeout: float = 5.0
    tls: bool = False  # STOMP over TLS (a stomp+ssl:// URL)
    tls_ca: str | None = None  # the CA file to verify the broker with; None: the system's


class StompLink(asyncio.Protocol):
    """One STOMP connection: bytes in, frames to `on_frames`; write pausing becomes `drain()`."""

    def __init__(self) -> None:
        self.parser = FrameParser(max_frame_size=256 * 1024 * 1024)
        self.transport: asyncio.Transport | None = None
        self.version = "1.0"
        self.on_frames: Callable[[list[Frame]], None] = self._handshake
        self.error: str | None = None
        self._connected: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._resume: asyncio.Future[None] | None = None
        self.receipts: dict[str, asyncio.Future[None]] = {}
        self.on_failure: Callable[[str], None] | None = None
        self.closing = False  # we asked for the end: losing the connection is no failure

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.parser.feed(data)
        except ProtocolError as exc:
            frames = exc.events
            self.fail(f"unparsable data from the broker: {exc.message}")
        if frames:
            self.on_frames(frames)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)
        self.transport = None
        if not self.closing:
            self.fail(f"connection lost: {exc}" if exc else "connection closed by the broker")

    def pause_writing(self) -> None:
        if self._resume is None:
            self._resume = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)
        self._resume = None

    # -- helpers --------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait while the transport's buffer is above its high-water mark."""
        if self._resume is not None:
            await self._resume

    @property
    def writing_paused(self) -> bool:
        return self._resume is not None

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def fail(self, reason: str) -> None:
        """Record the first failure and wake everything that waits on this connection."""
        if self.error is not None:
            return
        self.error = reason
        self.closing = True
        for waiter in (self._connected, *self.receipts.values()):
            if not waiter.done():
                waiter.set_exception(PerfError(self.error))
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)
        if self.on_failure is not None:
            self.on_failure(self.error)
        if self.transport is not None:
            self.transport.abort()

    def handle_control(self, frame: Frame) -> bool:
        """RECEIPTs awaited by `request_receipt` and ERROR frames; True if `frame` was one."""
        if frame.command == "RECEIPT":
            waiter = self.receipts.pop(frame.headers.get("receipt-id", ""), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
                return True
            return False
        if frame.command == "ERROR":
            message = frame.headers.get("message", "")
            detail = frame.body[:200].decode("utf-8", "replace").strip()
            self.fail(f"ERROR frame from the broker: {message}" + (f" ({detail})" if detail else ""))
            return True
        return False

    def request_receipt(self, receipt_id: str) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.receipts[receipt_id] = waiter
        return waiter

    def _handshake(self, frames: list[Frame]) -> None:
        for frame in frames:
            if frame.command == "CONNECTED":
                self.version = frame.headers.get("version", "1.0")
                self.parser.version = self.version
                if not self._connected.done():
                    self._connected.set_result(frame)
            else:
                self.handle_control(frame)

    async def handshake(self, options: ClientOptions) -> None:
        headers = [("accept-version", "1.0,1.1,1.2"), ("host", options.vhost or options.host),
                   ("heart-beat", "0,0")]
        if options.login is not None:
            headers.append(("login", options.login))
        if options.passcode is not None:
            headers.append(("passcode", options.passcode))
        self.write(encode_frame("CONNECT", headers))
        await self._connected

    async def disconnect(self, timeout: float) -> None:
        """DISCONNECT with a receipt, so everything sent before it has been processed."""
        if self.transport is None or self.error is not None:
            return
        waiter = self.request_receipt(DISCONNECT_RECEIPT)
        self.closing = True
        self.write(encode_frame("DISCONNECT", [("receipt", DISCONNECT_RECEIPT)], version=self.version))
        try:
            await asyncio.wait_for(waiter, timeout)
        except (TimeoutError, PerfError):
            pass
        self.close()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    async def closed(self) -> None:
        await self._closed


def _tls_context(options: ClientOptions) -> ssl.SSLContext | None:
    """Made in each worker process (a context cannot be pickled); the broker's certificate is
    verified against `tls_ca` (its name must match the URL's host)."""
    if not options.tls:
        return None
    return ssl.create_default_context(cafile=options.tls_ca)


async def open_link(options: ClientOptions) -> StompLink:
    """Connect and finish the STOMP handshake, or raise PerfError saying why not."""
    loop = asyncio.get_running_loop()
    where = f"{options.host}:{options.port}"
    try:
        _, link = await asyncio.wait_for(
            loop.create_connection(StompLink, options.host, options.port, ssl=_tls_context(options)),
            options.connect_timeout,
        )
    except (OSError, TimeoutError) as exc:
        raise PerfError(f"cannot connect to {where}: {exc or 'timed out'}") from None
    try:
        await asyncio.wait_for(link.handshake(options), options.connect_timeout)
    except TimeoutError:
        link.close()
        raise PerfError(f"no CONNECTED from {where} within {options.connect_timeout:g} s") from None
    return link


class Producer:
    """Sends `quota` messages (or until stopped) with at most `receipt_window` unreceipted.

    The window keeps the broker's group commit fed (many persistent SENDs in flight per
    connection) without letting the client queue unbounded work in the broker.
    """

    def __init__(self, link: StompLink, options: ClientOptions, quota: int | None,
                 stop: asyncio.Event, progress: Callable[[int], None]) -> None:
        self.link = link
        self.options = options
        self.quota = quota
        self.stop = stop
        self.progress = progress
        self.stats = RoleStats(connections=1)
        self.sent = 0
        self._pending: dict[int, int] = {}  # receipt number -> send time (ns)
        self._wake: asyncio.Future[None] | None = None
        self._refill = max(1, min(options.receipt_window // 4, MAX_BATCH))
        # Non-persistent is every broker's default, so it is said by leaving the header out:
        # RabbitMQ reads `persistent:false` as "declare the queue non-durable" and then
        # refuses the durable queue a SUBSCRIBE declared (RESOURCE_LOCKED).
        persistent = [("persistent", "true")] if options.persistent else []
        headers = [("destination", options.destination), *persistent, *options.headers]
        body = bytes(48 + i % 64 for i in range(options.size))
        frame = encode_frame("SEND", headers, body, version=link.version)
        split = frame.index(b"\n\n")
        self._head = frame[:split] + b"\n" + TIMESTAMP_HEADER.encode() + b":"
        self._tail = frame[split:]
        link.on_frames = self._on_frames
        link.on_failure = self._on_failure

    def _on_failure(self, reason: str) -> None:
        self._wake_up()

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _on_frames(self, frames: list[Frame]) -> None:
        pending = self._pending
        stats = self.stats
        now = time.time_ns()
        done = 0
        for frame in frames:
            if frame.command == "RECEIPT":
                receipt = frame.headers.get("receipt-id", "")
                sent_at = pending.pop(int(receipt), None) if receipt.isdigit() else None
                if sent_at is not None:
                    stats.latency.record(now - sent_at)
                    done += 1
                    continue
            self.link.handle_control(frame)
        if done:
            stats.messages += done
            stats.body_bytes += done * self.options.size
            stats.last_ns = now
            self.progress(done)
            if self.options.receipt_window - len(pending) >= self._refill or not pending:
                self._wake_up()

    def _credit(self) -> int:
        """How many frames may go out now."""
        credit = MAX_BATCH
        if self.options.receipt_window:
            credit = min(credit, self.options.receipt_window - len(self._pending))
        if self.quota is not None:
            credit = min(credit, self.quota - self.sent)
        return credit

    def _send_batch(self, count: int) -> None:
        head, tail = self._head, self._tail
        receipts = self.options.receipt_window > 0
        parts = []
        pending = self._pending
        number = self.sent
        for _ in range(count):
            now = time.time_ns()
            if receipts:
                parts.append(b"%b%d\nreceipt:%d%b" % (head, now, number, tail))
                pending[number] = now
            else:
                parts.append(b"%b%d%b" % (head, now, tail))
            number += 1
        self.sent = number
        self.link.write(b"".join(parts))

    async def _wait_for_credit(self) -> None:
        self._wake = asyncio.get_running_loop().create_future()
        stop_wait = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait((self._wake, stop_wait), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
            self._wake = None

    async def run(self) -> RoleStats:
        link = self.link
        try:
            while link.error is None and not self.stop.is_set():
                if self.quota is not None and self.sent >= self.quota:
                    break
                credit = self._credit()
                if credit <= 0:
                    await self._wait_for_credit()
                    continue
                self._send_batch(credit)
                if link.writing_paused:
                    await link.drain()
                else:
                    await asyncio.sleep(0)  # let the loop's other connections run
            await self._finish()
        finally:
            if link.error is not None:
                self.stats.errors.append(f"producer: {link.error}")
        return self.stats

    async def _finish(self) -> None:
        """Wait for the outstanding receipts (or, without receipts, a DISCONNECT receipt).

        Once stopped (duration over, or the run stalled) the outstanding receipts get
        `close_timeout` more seconds: they still count, as the broker did the work.
        """
        link = self.link
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while self._pending and link.error is None:
            if not self.stop.is_set():
                await self._wait_for_credit()
                continue
            if deadline is None:
                deadline = loop.time() + self.options.close_timeout
            if loop.time() >= deadline:
                break
            self._wake = loop.create_future()
            try:
                await asyncio.wait_for(self._wake, deadline - loop.time())
            except TimeoutError:
                break
            finally:
                self._wake = None
        if self.options.receipt_window == 0 and link.error is None:
            await link.disconnect(self.options.close_timeout)
            if link.error is None:
                self.stats.messages = self.sent
                self.stats.body_bytes = self.sent * self.options.size
                self.stats.last_ns = time.time_ns()
                self.progress(self.sent)
            return
        await link.disconnect(self.options.close_timeout)


class Consumer:
    """Subscribes and counts MESSAGEs until stopped, acknowledging as `--ack` asks."""

    def __init__(self, link: StompLink, options: ClientOptions, stop: asyncio.Event,
                 progress: Callable[[int], None]) -> None:
        self.link = link
        self.options = options
        self.stop = stop
        self.progress = progress
        self.stats = RoleStats(connections=1)
        self._unacked = 0
        self._last_ack: Frame | None = None
        link.on_frames = self._on_frames

    def subscribe(self) -> None:
        options = self.options
        headers = [("id", "0"), ("destination", options.destination), ("ack", options.ack),
                   ("activemq.prefetchSize", str(options.prefetch)),
                   ("prefetch-count", str(options.prefetch)), *options.headers]
        self.link.write(encode_frame("SUBSCRIBE", headers, version=self.link.version))

    def _ack_frame(self, message: Frame) -> bytes:
        """An ACK for `message` in the negotiated version's dialect."""
        version = self.link.version
        headers = message.headers
        if version == "1.2":
            return b"ACK\nid:%b\n\n\x00" % escape(headers.get("ack", ""), version).encode()
        message_id = escape(headers.get("message-id", ""), version).encode()
        if version == "1.1":
            return b"ACK\nsubscription:0\nmessage-id:%b\n\n\x00" % message_id
        return b"ACK\nmessage-id:%b\n\n\x00" % message_id

    def _on_frames(self, frames: list[Frame]) -> None:
        stats = self.stats
        record = stats.latency.record
        mode = self.options.ack
        acks: list[bytes] = []
        count = 0
        size = 0
        now = 0
        for frame in frames:
            if frame.command != "MESSAGE":
                self.link.handle_control(frame)
                continue
            now = time.time_ns()
            stamp = frame.headers.get(TIMESTAMP_HEADER)
            if stamp is not None and stamp.isdigit():
                record(now - int(stamp))
            count += 1
            size += len(frame.body)
            if mode == "client-individual":
                acks.append(self._ack_frame(frame))
            elif mode == "client":
                self._last_ack = frame
                self._unacked += 1
                if self._unacked >= self.options.ack_every:
                    acks.append(self._ack_frame(frame))
                    self._unacked = 0
                    self._last_ack = None
        if acks:
            self.link.write(b"".join(acks))
        if count:
            stats.messages += count
            stats.body_bytes += size
            stats.last_ns = now
            self.progress(count)

    async def run(self) -> RoleStats:
        link = self.link
        stop_wait = asyncio.ensure_future(self.stop.wait())
        closed_wait = asyncio.ensure_future(link.closed())
        try:
            await asyncio.wait((stop_wait, closed_wait), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
            closed_wait.cancel()
        if self._last_ack is not None and link.error is None:
            link.write(self._ack_frame(self._last_ack))  # cumulative: covers the rest
            self._last_ack = None
        if link.error is None:
            await link.disconnect(self.options.close_timeout)
        else:
            self.stats.errors.append(f"consumer: {link.error}")
        return self.stats

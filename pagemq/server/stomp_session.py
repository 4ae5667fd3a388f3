"""One STOMP connection's session: protocol events in, broker calls, frames out.

This is the only place where STOMP meets the broker core. It owns the connection's
subscriptions, transactions and receipts, and it holds no socket: the asyncio shell
(`server.stomp_server`) feeds it bytes and gives it a `Transport` to write to, pause and
close. Output is buffered and flushed once per loop iteration, so a burst of deliveries
costs one write.

Receipts go out in the order their frames arrived: a RECEIPT for a persistent SEND waits for
the journal's group commit, and any later receipt waits behind it. An ERROR waits too: every
RECEIPT already due (its write made durable) goes out first, then the ERROR, then the close.

Input is *held* (a bounded read-ahead, `_backlog`) while a SEND is blocked by the BLOCK
policy or while the peer does not read what we write (the transport's write buffer is over
its high-water mark). The socket is still read, so heart-beats keep arriving, and ACK/NACK
frames outside a transaction are carried out at once, ahead of the held frames: they are
what frees the memory a blocked SEND waits for (Artemis gets the same effect from separate
flow control). Everything else keeps its order. Past `READ_AHEAD_BYTES` of held frames the
socket stops being read, so TCP bounds what a blocked or non-reading client can make us hold.

The session runs no event loop of its own and reads no clock: what it defers (draining held
frames, the next batch of a browse, a close after the last reply) goes through the
`Scheduler` it is given. The asyncio shell gives it the running loop; a unit test gives it a
manual one and drives every turn itself, with no socket and no real time. Which frame may
do what to a subscription or a transaction is the protocol layer's data
(`protocol.stomp.subscription_state`, `transaction_state`): the session keeps each one's
state and follows those tables, so their ERROR messages are the tables' messages.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from pagemq.core.address import ANYCAST, MULTICAST
from pagemq.core.broker import Blocked, Broker
from pagemq.core.browse import QueueBrowse
from pagemq.core.consumer import AckMode, Consumer, MessageRef
from pagemq.core.errors import BrokerError, InvalidDestination, SubscriptionError
from pagemq.core.management import MANAGEMENT_ADDRESS
from pagemq.core.message import Message, estimate_from_lengths
from pagemq.core.queue import Queue
from pagemq.core.selector import compile_filter
from pagemq.core.transactions import PendingSend, Transaction
from pagemq.protocol.errors import ProtocolError
from pagemq.protocol.stomp import events as ev
from pagemq.protocol.stomp.connection import StompConnection, VersionMismatch
from pagemq.protocol.stomp.state_table import ConnectionEnds
from pagemq.protocol.stomp.subscription_state import (
    ACK_SCOPES,
    SUBSCRIPTIONS,
    AckScope,
    SubState,
    ack_mode_error,
)
from pagemq.protocol.stomp.transaction_state import TRANSACTIONS, CommitApplied, TxState
from pagemq.security.access import AUTHENTICATION_FAILED, SessionAccess
from pagemq.security.users import User
from pagemq.server.destinations import FQQN_SEPARATOR, Destination, parse_destination
from pagemq.server.management_requests import answer_request, is_management_send, management_permissions
from pagemq.server.stomp_access import (
    durable_subscription,
    replaced_subscription,
    send_permissions,
    subscribe_permissions,
)
from pagemq.server.turn_budget import TurnBudget

log = logging.getLogger("pagemq.stomp")

_session_ids = itertools.count(1)
OUTPUT_HIGH_WATER = 1 << 20
READ_AHEAD_BYTES = 1 << 20  # held frames (about) past which the socket is no longer read
# Frames parsed, and carried out, per callback (a socket read, a deferred share) at most;
# the rest waits for a later loop turn (unparsed bytes in the parser). Parsing a whole
# 256 KiB read of ACKs (~6,000 frames) took ~20 ms before the first was carried out. What
# bounds the carrying out is time: the loop turn's share for frames (`turn_budget`, 20 ms
# for all connections together); this cap alone bounds it on a loop without the time
# bound (tests' manual loop). Reads of a 4+4 `pagemq perf` run rarely bring more.
FRAMES_PER_TURN = 256
DEFERRED_FRAMES = 16_384  # frames waiting for their turn past which the socket is not read
PREFETCH_HEADERS = ("activemq.prefetchSize", "prefetch-count")
BROWSE_BATCH = 256


def _legacy_name(destination: Destination) -> str:
    """`ADDRESS::QUEUE` whole: the name of an address or queue made before `::` named a
    queue of an address (earlier versions took it as a plain name), still used as such."""
    return f"{destination.address}{FQQN_SEPARATOR}{destination.queue}"


def _durable_name(headers: dict[str, str]) -> str | None:
    return next((headers[h] for h in ev.DURABLE_NAME_HEADERS if h in headers), None)


class Transport(Protocol):
    def write(self, data: bytes) -> None: ...
    def schedule_flush(self) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """The event loop as the session and its shell see it: run a callback on a later turn,
    run one after a delay, read the clock. `asyncio.AbstractEventLoop` is one; a test passes
    a manual one that runs ready callbacks and moves its clock when told."""

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Cancellable: ...
    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Cancellable: ...
    def time(self) -> float: ...


class Subscription:
    __slots__ = ("ack_mode", "browse", "consumer", "destination", "id", "index", "queue", "scope", "state")

    def __init__(self, sub_id: str, index: int, destination: str, ack_mode: AckMode,
                 state: SubState) -> None:
        self.id = sub_id
        self.index = index
        self.destination = destination
        self.ack_mode = ack_mode
        self.scope = ACK_SCOPES[ack_mode.value]  # what its ACK/NACK settles (None: refused)
        self.state = state
        self.consumer: Consumer | None = None
        self.queue: Queue | None = None  # the consumer's (consumers do not know their queue)
        self.browse: QueueBrowse | None = None


@dataclass(slots=True)
class StompTransaction(Transaction):
    """A client transaction plus its NACKs, which take effect at COMMIT (ABORT undoes them,
    as it undoes ACKs: the messages go back to their queues), and its `TxState`."""

    nacks: list[tuple[Queue, MessageRef]] = field(default_factory=list)
    state: TxState = TxState.BEGUN


class _Failure:
    """A protocol error met while frames before it were held: raised when its turn comes."""

    __slots__ = ("message", "receipt_id")

    def __init__(self, message: str, receipt_id: str | None) -> None:
        self.message = message
        self.receipt_id = receipt_id


Reply = tuple["asyncio.Future[None] | None", bytes, "str | None"]
Held = tuple["ev.Event | _Failure", int]  # a held frame (or the failure behind them), its size


class StompSession:
    """Server side of one STOMP connection, bound to a broker."""

    def __init__(self, broker: Broker, protocol: StompConnection, transport: Transport,
                 scheduler: Scheduler | None = None, access: SessionAccess | None = None,
                 turn: TurnBudget | None = None) -> None:
        """`access`: None when security is disabled; else CONNECT authenticates through it
        and each frame's permissions are checked with it (docs/security.md). `turn`: the
        loop turn's time for frames, shared by the loop's connections (None: the frame cap
        alone bounds a callback)."""
        self.broker = broker
        self.access = access
        # CONNECT's password being verified (in a thread): later frames wait behind it.
        self._authenticating: asyncio.Future[User | None] | None = None
        self.protocol = protocol
        self.transport = transport
        self._loop: Scheduler = scheduler if scheduler is not None else asyncio.get_running_loop()
        self._turn = turn if turn is not None else TurnBudget(self._loop, None)
        self.session_id = f"pagemq-{next(_session_ids)}"
        self.client_id: str | None = None
        # CONNECT's login header (with security: only once verified, so the log and
        # GET /api/connections never name a user whose password was not checked)
        self.login: str | None = None
        self.on_authenticated: Callable[[], None] | None = None  # the server's open log line
        self.subscriptions: dict[str, Subscription] = {}
        self._by_index: dict[int, Subscription] = {}
        self._next_index = itertools.count(1)
        self.transactions: dict[str, StompTransaction] = {}
        # STOMP 1.0/1.1 acknowledge by message-id: message-id -> {subscription index: tag}
        # (one message can be in flight on several subscriptions of this connection).
        self._msgid_acks: dict[str, dict[int, int]] = {}
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._replies: deque[Reply] = deque()
        self._reply_bytes = 0  # frames in _replies (receipts waiting for the journal)
        self._watched: asyncio.Future[None] | None = None
        # Held input: (event or _Failure, its size in bytes), in arrival order.
        self._backlog: deque[Held] = deque()
        self._backlog_bytes = 0
        self._blocked_retry: Callable[[], bool] | None = None
        # A COMMIT that takes effect once its page files are written (COMMITTING): later
        # frames wait.
        self._committing: StompTransaction | None = None
        self._drain_scheduled = False
        # Frames of reads past this callback's FRAMES_PER_TURN, per read, in order.
        self._deferred: deque[Sequence[ev.Event | _Failure]] = deque()
        self._deferred_frames = 0
        self._deferred_scheduled = False
        # Bytes read but not yet parsed may hold more frames (a read brought more than a
        # FRAMES_PER_TURN): they are parsed once the deferred frames are carried out.
        self._unparsed = False
        self._debt = 0.0  # seconds of loop time this connection ran past its slices (TurnBudget.debt)
        self._reading_paused = False
        self._input_closed = False  # a bad frame was read: later bytes are not looked at
        self._writable = True
        self._after_replies: Callable[[], None] | None = None
        self._error: tuple[str, str | None] | None = None
        self.closing = False  # no more frames are carried out
        self.closing_hard = False  # the ERROR (or nothing, the socket being gone) was written

    @property
    def blocked(self) -> bool:
        """A SEND waits for memory (BLOCK policy): the peer waits on us, not we on it."""
        return self._blocked_retry is not None

    @property
    def writable(self) -> bool:
        return self._writable

    # -- input ----------------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """Bytes from the socket; any protocol or broker error ends the connection.

        While earlier frames of this connection wait for a later turn, or once the turn's
        time is over for everybody, the bytes are only taken, not parsed: they are parsed
        after the frames ahead of them, in a later turn. Parsing each read as it came let
        fast producers' sockets (libuv reads a ready socket up to 32 times in one poll) spend
        ~3 ms a read parsing SENDs that could only be deferred: 20 reads between two ticks
        of the loop-lag timer, a 50-80 ms stall (`benchmarks/stall_probe.py --trace`)."""
        if self.closing or self._input_closed:
            return
        turn = self._turn
        # (CONNECT is parsed at once: the shell starts heart-beats once a read made it so)
        if self._deferred or self._unparsed or (self.protocol.version is not None and turn.late()):
            self._parse(data, 0)
        else:
            turn.begin(self._debt)
            self._parse(data)
            self._debt = turn.debt()
        if self._unparsed:
            self._schedule_deferred()

    def _parse(self, data: bytes, share: int = FRAMES_PER_TURN) -> None:
        """Parse up to `share` frames of what was read (none while earlier bytes wait to be
        parsed: these wait behind them) and carry them out or defer them; a later turn
        parses the rest (`_run_deferred`)."""
        if self._unparsed:
            share = 0
        try:
            events = self.protocol.receive_data(data, share)
        except VersionMismatch as exc:
            self._fail_raw(self.protocol.version_error(exc.receipt_id))
            return
        except ProtocolError as exc:
            # Frames before the bad one in the same read were valid: they take effect first.
            self._input_closed = True
            if self._deferred:  # behind the frames still waiting for their turn
                self._defer([*getattr(exc, "events", ()), _Failure(exc.message, exc.receipt_id)])
                return
            self._accept(getattr(exc, "events", ()))
            if self.closing:
                return
            if self._deferred:  # the read's own frames went past the turn's share
                self._defer([_Failure(exc.message, exc.receipt_id)])
            elif self._backlog:
                self._backlog.append((_Failure(exc.message, exc.receipt_id), 0))
                self._schedule_drain()  # held only by the write side: carried out at once
            else:
                self.fail(exc.message, exc.receipt_id)
            return
        if len(events) == share and (share or data):  # more frames may be buffered: parsed later
            self._unparsed = True
        if self._unparsed and self.protocol.buffered > READ_AHEAD_BYTES:
            self._pause_reading()
        if not events:
            return
        self._close_ending(events)
        if self._deferred:
            self._defer(events)  # behind the frames still waiting for their turn
        else:
            self._accept(events)

    def _close_ending(self, events: Sequence[ev.Event | _Failure]) -> None:
        """The subscriptions these frames end (UNSUBSCRIBE, DISCONNECT) take no new message
        from now on, before the frames ahead of the ending one are carried out (maybe turns
        later). Their ACKs make room, and any refill (theirs, a NACK's or COMMIT's in the
        same read, another connection's) would otherwise send the ending subscription
        messages it hands back unseen, each a delivery attempt (dead-lettered at
        `max-delivery-attempts = 1`). Frames not parsed yet (past the read's first
        FRAMES_PER_TURN) are not looked at."""
        for event in events:
            if isinstance(event, ev.Unsubscribe):
                sub = self.subscriptions.get(event.id) if event.id else None
                if sub is not None and sub.consumer is not None:
                    sub.consumer.closed = True
            elif isinstance(event, ev.Disconnect):
                self.stop_deliveries()

    @property
    def _held(self) -> bool:
        """Frames wait: a SEND for memory, or everything for a COMMIT taking effect."""
        return self._blocked_retry is not None or self._waiting

    @property
    def authenticating(self) -> bool:
        """CONNECT's password is being checked: no CONNECTED yet, so no heart-beats either."""
        return self._authenticating is not None

    @property
    def _waiting(self) -> bool:
        """Every later frame waits: a COMMIT taking effect, or CONNECT's authentication."""
        return self._committing is not None or self._authenticating is not None

    def _accept(self, events: Sequence[ev.Event | _Failure]) -> None:
        if self._backlog or self._held or not self._writable:
            self._hold(events)
            return
        # The room the read's ACKs make is filled as they go (every DISPATCH_EVERY, so the
        # time it takes counts in this callback's slice) and after them; a subscription
        # the read ends was closed to new messages when it was parsed (_close_ending).
        self.broker.begin_acks()
        try:
            self._carry_out(events)
        finally:
            try:
                self.broker.end_acks()
            except Exception:  # a bug in a dispatch: the ACKs stand, the broker goes on
                log.exception("%s: internal error dispatching after acknowledgements", self.session_id)

    def _carry_out(self, events: Sequence[ev.Event | _Failure]) -> None:
        """Carry out a read's frames in order; consecutive SENDs are stored as a group
        (`Broker.begin_sends`), ended before any other frame runs."""
        broker = self.broker
        sending = False
        try:
            for event in self._this_turn(events):
                if type(event) is ev.Send:
                    if not sending:
                        broker.begin_sends()
                        sending = True
                elif sending:
                    sending = False
                    broker.end_sends()
                if isinstance(event, _Failure):
                    self.fail(event.message, event.receipt_id)
                    return
                if self._backlog or self._committing is not None or self._authenticating is not None:
                    self._hold_one(event)  # held (_waiting, inlined: this runs for every frame)
                elif not self._run(event):
                    size = _size(event)
                    self._backlog.append((event, size))
                    self._backlog_bytes += size
        finally:
            if sending:
                broker.end_sends()
        self._check_read_ahead()

    def _this_turn(self, events: Sequence[ev.Event | _Failure]) -> Iterator[ev.Event | _Failure]:
        """The frames this callback carries out, in order: it stops once the connection
        closes, and leaves the rest to a later turn after FRAMES_PER_TURN frames or once
        its slice of the turn is spent."""
        spent = self._turn.spent
        for index, event in enumerate(events):
            if self.closing:
                return
            if index == FRAMES_PER_TURN or spent():
                self._leave_rest(events, index)
                return
            yield event

    def _leave_rest(self, events: Sequence[ev.Event | _Failure], index: int) -> None:
        """This callback's share is done before `events[index]` (FRAMES_PER_TURN frames, or
        its slice of the turn spent): the rest goes to a later loop turn, first in line."""
        self._deferred.appendleft(events[index:])
        self._deferred_frames += len(events) - index
        self._schedule_deferred()

    def _defer(self, events: Sequence[ev.Event | _Failure]) -> None:
        """A read's frames wait behind those deferred before them (no per-frame work: a
        burst of ACKs costs a list append); past a bound the socket is no longer read."""
        self._deferred.append(events)
        self._deferred_frames += len(events)
        self._schedule_deferred()
        if self._deferred_frames > DEFERRED_FRAMES:
            self._pause_reading()

    def _schedule_deferred(self) -> None:
        if not self._deferred_scheduled:
            self._deferred_scheduled = True
            self._loop.call_soon(self._run_deferred)

    def _run_deferred(self) -> None:
        """The next deferred share (up to the turn's share of frames), or once none is left
        the next frames parsed from the bytes read; then a later turn again."""
        self._deferred_scheduled = False
        self._turn.begin(self._debt)
        while not self.closing and not self._deferred_scheduled:  # until the share is done
            if self._deferred:
                events = self._deferred.popleft()
                self._deferred_frames -= len(events)
                self._accept(events)
            elif self._unparsed and not self._input_closed:
                self._unparsed = False
                self._parse(b"")
            else:
                break
            if self._backlog:  # held: the rest waits for the drain
                break
            if (self._deferred or self._unparsed) and self._turn.over():
                break
        if (self._deferred or self._unparsed) and not self._deferred_scheduled and not self.closing:
            self._schedule_deferred()
        self._debt = self._turn.debt()
        self._maybe_resume_reading()

    def _maybe_resume_reading(self) -> None:
        if (self._reading_paused and not self.closing
                and self._backlog_bytes <= READ_AHEAD_BYTES // 2
                and (not self._unparsed or self.protocol.buffered <= READ_AHEAD_BYTES // 2)
                and self._deferred_frames <= DEFERRED_FRAMES // 2):
            self._reading_paused = False
            self.transport.resume_reading()

    def _hold(self, events: Sequence[ev.Event | _Failure]) -> None:
        """Held frames wait behind the backlog; but ACKs/NACKs go ahead (`_hold_one`), so
        holding a read's frames takes the turn's share too."""
        for event in self._this_turn(events):
            self._hold_one(event)
        self._check_read_ahead()

    def _hold_one(self, event: ev.Event | _Failure) -> None:
        """Queue a frame behind the held ones, except an ACK/NACK outside a transaction
        while something holds them (a blocked SEND, a COMMIT taking effect, a peer not
        reading), which is carried out now: it frees memory, and a blocked SEND may be
        waiting for it. Frames merely deferred to a later turn keep their order."""
        if (self._held or not self._writable) and (
                (isinstance(event, _GOES_AHEAD) and event.transaction is None) or is_management_send(event)):
            self._run(event)
            return
        size = _size(event)
        self._backlog.append((event, size))
        self._backlog_bytes += size

    def _check_read_ahead(self) -> None:
        if self._backlog_bytes > READ_AHEAD_BYTES:
            self._pause_reading()

    def _pause_reading(self) -> None:
        """Stop reading the socket (TCP then slows the peer) until what waits is carried
        out (`_maybe_resume_reading`)."""
        if not self._reading_paused and not self.closing:
            self._reading_paused = True
            self.transport.pause_reading()

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain_backlog)

    def _drain_backlog(self) -> None:
        """Carry out held frames in order while nothing holds them (an ERROR behind them
        is reached even while the peer does not read: it is what closes the connection)."""
        self._drain_scheduled = False
        backlog = self._backlog
        turn = self._turn
        turn.begin(self._debt)
        done = 0
        while backlog and not self.closing and not self._held:
            if not self._writable and not self._input_closed:
                break
            if done == FRAMES_PER_TURN or turn.spent():
                self._schedule_drain()  # a later turn goes on (others get theirs meanwhile)
                break
            done += 1
            event, size = backlog.popleft()
            self._backlog_bytes -= size
            if isinstance(event, _Failure):
                self.fail(event.message, event.receipt_id)
                break
            if not self._run(event):
                backlog.appendleft((event, size))
                self._backlog_bytes += size
                break
        if not backlog:
            self._backlog_bytes = 0
        self._debt = turn.debt()
        self._maybe_resume_reading()

    def _run(self, event: ev.Event) -> bool:
        """Carry out one frame; False when a SEND is blocked (retried once memory is freed)."""
        try:
            self._handle(event)
        except Blocked as blocked:
            self._blocked_retry = self.broker.wait_for_memory(blocked.address, self._unblock)
            return False
        except BrokerError as exc:
            self.fail(exc.message, getattr(event, "receipt", None))
        except ProtocolError as exc:
            self.fail(exc.message, exc.receipt_id or getattr(event, "receipt", None))
        except OSError as exc:  # the journal or a page file refused a write
            log.error("%s: storage failure: %s", self.session_id, exc)
            self.fail(f"storage failure: {exc}", getattr(event, "receipt", None))
        except Exception as exc:  # a bug: the client still gets an ERROR, the broker goes on
            log.exception("%s: internal error handling %s", self.session_id, type(event).__name__)
            self.fail(f"internal error: {type(exc).__name__}: {exc}", getattr(event, "receipt", None))
        return True

    def _handle(self, event: ev.Event) -> None:
        _HANDLERS[type(event)](self, event)  # one lookup, not a chain of isinstance checks

    def _commit_applied(self, _applied: asyncio.Future[None]) -> None:
        tx = self._committing
        if tx is not None:
            self._committing = None
            tx.state = TRANSACTIONS.step(tx.state, CommitApplied, tx.name)
        if not self.closing:
            self._schedule_drain()

    def _unblock(self) -> None:
        """The address has room again (called while memory is being released)."""
        self._blocked_retry = None
        self._schedule_drain()

    # -- frames ---------------------------------------------------------------------------

    def _on_connect(self, event: ev.Connect) -> None:
        self.client_id = event.client_id
        if self.access is None:
            self.login = event.login
            self.write(self.protocol.connected(session=self.session_id))
            return
        verified = self.access.authenticate(event.login, event.passcode)
        if verified.done():  # a password verified before (cached): no wait
            self._authenticated(verified)
        else:
            self._authenticating = verified
            verified.add_done_callback(self._authenticated)

    def _authenticated(self, verified: asyncio.Future[User | None]) -> None:
        """CONNECTED, and the frames held behind CONNECT go on; or the one ERROR that
        tells an unknown user and a wrong password apart in no way."""
        self._authenticating = None
        if self.closing:
            return
        user = None if verified.cancelled() or verified.exception() is not None else verified.result()
        if user is None:
            self.fail(AUTHENTICATION_FAILED, None)
            return
        self.login = user.name
        self.write(self.protocol.connected(session=self.session_id))
        if self.on_authenticated is not None:
            self.on_authenticated()
        self._schedule_drain()

    def _require(self, permissions: list[str], address: str) -> None:
        """Raises PermissionDenied (a BrokerError: ERROR, then close) before anything changes."""
        if self.access is not None:
            for permission in permissions:
                self.access.require(permission, address)

    def _on_disconnect(self, event: ev.Disconnect) -> None:
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt))
        self.closing = True
        self._end()  # nothing more is delivered; unacknowledged deliveries go back now
        self._when_replied(self.transport.close)

    def _on_send(self, event: ev.Send) -> None:
        headers = event.headers
        destination = self._send_destination(event.destination)
        if destination.address == MANAGEMENT_ADDRESS:  # answered, never stored
            if self.access is not None:
                for permission, address in management_permissions(self.broker, headers):
                    self._require([permission], address)
            answer_request(self.broker, headers, event.body)
            if event.receipt is not None:
                self._reply(None, self.protocol.receipt(event.receipt), event.receipt)
            return
        if self.access is not None:
            self._require(send_permissions(self.broker, destination), destination.address)
        persistent, priority, expiration = _send_fields(headers)
        if event.transaction is not None:
            tx = self._transaction(event.transaction, ev.Send)
            self.broker.stage(tx, PendingSend(
                destination.address, destination.routing_type, headers, event.body,
                persistent, priority, expiration,
            ))
            future = None
        else:
            future = self.broker.send(
                destination.address, destination.routing_type, headers, event.body,
                persistent=persistent, priority=priority, expiration=expiration,
            )
        if event.receipt is not None:
            self._reply(future, self.protocol.receipt(event.receipt), event.receipt)
        elif future is not None:
            self._watch(future)  # a failed write is reported even without a receipt

    def _on_send_batch(self, event: ev.SendBatch) -> None:
        """A batch SEND (protocol.stomp.batch): its messages staged in its transaction, as
        that many SENDs in a row would be; the destination is resolved and checked once."""
        destination = self._send_destination(event.destination)
        if destination.address == MANAGEMENT_ADDRESS:
            raise InvalidDestination("a batch SEND cannot go to the management address: "
                                     "send each request alone")
        if self.access is not None:
            self._require(send_permissions(self.broker, destination), destination.address)
        tx = self._transaction(event.transaction, ev.Send)
        # Weighed before its messages are made: they may take many times the frame's size.
        self.broker.check_room(tx, _batch_memory(event), event.message_count)
        address, routing_type = destination.address, destination.routing_type
        sends = [PendingSend(address, routing_type, headers, body, *_send_fields(headers))
                 for headers, body in event.messages]
        if sends:
            self.broker.stage_all(tx, sends)
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt), event.receipt)

    def _send_destination(self, name: str) -> Destination:
        """Where a SEND goes: an address. `ADDRESS::QUEUE` names a queue, which is refused,
        unless an address of that whole name exists (made before `::` named a queue)."""
        destination = parse_destination(name)
        if destination.queue is not None:
            legacy = _legacy_name(destination)
            if legacy not in self.broker.addresses:
                raise InvalidDestination(
                    f"a SEND goes to an address, not to one of its queues ({name!r}): "
                    f"send to /queue/{destination.address} or /topic/{destination.address}")
            destination = Destination(legacy, destination.routing_type)
        return destination

    def _on_subscribe(self, event: ev.Subscribe) -> None:
        existing = self.subscriptions.get(event.id)
        state = SUBSCRIPTIONS.step(SubState.NONE if existing is None else existing.state,
                                   ev.Subscribe, event.id)
        mode = AckMode(event.ack)  # the event refused any other ack mode
        destination = self._subscribed(parse_destination(event.destination))
        compile_filter(event.selector)  # a bad selector is refused before anything changes
        sub = Subscription(event.id, next(self._next_index), event.destination, mode, state)
        headers = event.headers
        changed = False
        browse = headers.get("browser", "").lower() == "true"
        if self.access is not None:
            durable_name = _durable_name(headers)
            durable_queue = f"{self.client_id}.{durable_name}" if durable_name and self.client_id else None
            self._require(subscribe_permissions(
                self.broker, destination, browse=browse, durable_queue=durable_queue,
                selector=event.selector,
            ), destination.address)
            replaced = None if browse else replaced_subscription(self.broker, destination, durable_queue)
            if replaced is not None:
                self._require(["delete-durable-queue"], replaced)
        if browse:
            self._start_browse(sub, destination, event.selector)
        else:
            queue, selector, changed = self._queue_for(destination, headers, event.selector, sub.index)
            sub.queue = queue
            sub.consumer = self.broker.subscribe(
                queue, self, key=sub, ack_mode=mode, selector=selector,
                prefetch=_int_header(headers, PREFETCH_HEADERS, 1000),
                window_bytes=_int_header(headers, ("consumer-window-size",), -1),
            )
        self.subscriptions[event.id] = sub
        self._by_index[sub.index] = sub
        if event.receipt is not None:
            # A RECEIPT for a SUBSCRIBE that created (or replaced) an address or a durable
            # queue promises it survives a crash: it waits for those records to be durable.
            self._reply(self.broker.flush() if changed else None,
                        self.protocol.receipt(event.receipt), event.receipt)
        if sub.browse is not None:
            self._pump_browse(sub)

    def _subscribed(self, destination: Destination) -> Destination:
        """What a SUBSCRIBE reads. `/queue/NAME` (or a bare NAME) reads the queue NAME
        wherever it is, as Artemis finds a queue by its name: a queue of a multicast address
        (configured under `[[addresses.queues]]`) too. `ADDRESS::QUEUE` reads the queue QUEUE,
        which must be ADDRESS's. Permissions are then checked on the queue's own address."""
        queues = self.broker.queues
        if destination.queue is not None:
            queue = queues.get(_legacy_name(destination))
            if queue is not None:
                return Destination(queue.address_name, queue.routing_type, queue.name)
            queue = queues.get(destination.queue)
            if queue is None:
                return destination
            if queue.address_name != destination.address:  # (where it is: not said, security)
                raise InvalidDestination(f"address {destination.address!r} has no queue {queue.name!r}: "
                                         "that name is another address's queue")
        elif destination.routing_type == ANYCAST:
            queue = queues.get(destination.address)
            if queue is None or queue.address_name == destination.address:
                return destination
        else:
            return destination
        return Destination(queue.address_name, queue.routing_type, queue.name)

    def _queue_for(
        self, destination: Destination, headers: dict[str, str], selector: str | None, index: int
    ) -> tuple[Queue, str | None, bool]:
        """The queue a subscription reads, the selector left for its consumer, and whether a
        durable record (address, queue) was written or deleted to get it. A plain topic
        subscription gets its own queue, named by its subscription index (never reused on
        this connection, so a later subscription cannot land on an earlier one's queue)."""
        broker = self.broker
        changed = destination.address not in broker.addresses
        if destination.queue is not None:  # a queue named (`_subscribed`), made if missing
            queue = broker.queues.get(destination.queue)
            if queue is None:
                address = broker.ensure_address(destination.address, destination.routing_type)
                queue = broker.ensure_queue(address, destination.queue, address.routing_type)
                changed = True
            return queue, selector, changed
        address = broker.ensure_address(destination.address, destination.routing_type)
        if destination.routing_type == ANYCAST:
            changed = changed or destination.address not in broker.queues
            return broker.ensure_queue(address, destination.address, ANYCAST), selector, changed
        durable_name = _durable_name(headers)
        if durable_name is None:
            name = f"{destination.address}.{self.session_id}.{index}"
            queue = broker.ensure_queue(
                address, name, MULTICAST, filter_text=selector, durable=False, temporary=True
            )
            return queue, None, changed
        if not self.client_id:
            raise SubscriptionError("a durable subscription needs a client-id on CONNECT")
        name = f"{self.client_id}.{durable_name}"
        existing = durable_subscription(broker, name)
        if existing is not None and existing.address_name != destination.address:
            what = f"its topic cannot change from {existing.address_name!r}"
        elif existing is not None and (existing.filter_text or None) != (selector or None):
            what = "its selector cannot change"
        else:
            what = None
        if existing is not None and what is not None:
            if existing.consumers:  # read by name meanwhile (/queue/NAME): theirs too
                raise SubscriptionError(f"durable subscription {name!r} has an active subscriber; {what}")
            # A new topic or selector makes a new subscription (JMS: the old one is deleted
            # and a new one created), as Artemis recreates the queue.
            broker.delete_queue(existing)
            existing = None
        changed = changed or existing is None
        durable = broker.ensure_queue(address, name, MULTICAST, filter_text=selector)
        if durable.consumers:
            raise SubscriptionError(f"durable subscription {name!r} already has a subscriber")
        return durable, None, changed

    def _on_unsubscribe(self, event: ev.Unsubscribe) -> None:
        sub = self.subscriptions.get(event.id or "") if event.id else None
        durable_name = _durable_name(event.headers)
        if sub is None and durable_name is None:
            raise SUBSCRIPTIONS.refuse(SubState.NONE, ev.Unsubscribe, event.id)
        queue = None
        if durable_name is not None and self.client_id:
            queue = durable_subscription(self.broker, f"{self.client_id}.{durable_name}")
            if queue is not None:  # checked before anything changes
                self._require(["delete-durable-queue"], queue.address_name)
                own = sub.consumer if sub is not None else None
                if any(consumer is not own for consumer in queue.consumers):
                    # as Artemis refuses to delete a queue with consumers (JMS: an error)
                    raise SubscriptionError(f"durable subscription {queue.name!r} has an active "
                                            "subscriber; it cannot be removed")
        if sub is not None:
            del self.subscriptions[sub.id]
            self._close_subscription(sub, ev.Unsubscribe)
        if queue is not None:
            self.broker.delete_queue(queue)
        if event.receipt is not None:
            # Removing a durable subscription is promised only once its deletion is durable.
            self._reply(self.broker.flush() if queue is not None else None,
                        self.protocol.receipt(event.receipt), event.receipt)

    def _close_subscription(self, sub: Subscription, cause: type) -> None:
        """`cause`: UNSUBSCRIBE, or `ConnectionEnds`."""
        sub.state = SUBSCRIPTIONS.step(sub.state, cause, sub.id)
        self._by_index.pop(sub.index, None)
        if sub.browse is not None:
            sub.browse.close()  # its page read-ahead stops, its charge is released
        sub.browse = None
        consumer, queue = sub.consumer, sub.queue
        if consumer is None or queue is None:
            return
        if self._msgid_acks:
            for ref in consumer.in_flight.values():
                self._forget_msgid(str(ref.message.message_id), sub.index)
        self.broker.close_consumer(queue, consumer)

    # -- acknowledgements -----------------------------------------------------------------

    def _locate(self, event: ev.Ack | ev.Nack) -> tuple[Subscription, int]:
        """The subscription and tag an ACK/NACK names. STOMP 1.2 names them in the `ack` id
        we gave the MESSAGE; 1.0/1.1 name the `message-id` (plus, optionally, the
        `subscription`: a topic message can be in flight on several subscriptions)."""
        ack_id = event.id
        sub: Subscription | None = None
        tag_no = 0
        if self.protocol.version == "1.2":
            sub_index, _, tag = ack_id.partition(".")
            try:
                sub = self._by_index.get(int(sub_index))
                tag_no = int(tag)
            except ValueError:
                sub = None
        else:
            deliveries = self._msgid_acks.get(ack_id)
            if deliveries:
                if event.subscription is not None:
                    named = self.subscriptions.get(event.subscription)
                    if named is not None and named.index in deliveries:
                        sub, tag_no = named, deliveries[named.index]
                else:
                    index, tag_no = next(iter(deliveries.items()))
                    sub = self._by_index.get(index)
        if sub is None or sub.consumer is None:
            raise SUBSCRIPTIONS.refuse(SubState.NONE, type(event), ack_id)
        return sub, tag_no

    def _take(self, sub: Subscription, tag: int) -> list[MessageRef]:
        consumer = sub.consumer
        assert consumer is not None
        scope = sub.scope
        if scope is None:
            raise ack_mode_error(sub.ack_mode.value)
        refs = consumer.take_through(tag) if scope is AckScope.CUMULATIVE else [consumer.take(tag)]
        if self._msgid_acks:
            for ref in refs:
                self._forget_msgid(str(ref.message.message_id), sub.index)
        return refs

    def _forget_msgid(self, message_id: str, sub_index: int) -> None:
        deliveries = self._msgid_acks.get(message_id)
        if deliveries is not None:
            deliveries.pop(sub_index, None)
            if not deliveries:
                del self._msgid_acks[message_id]

    def _on_ack(self, event: ev.Ack) -> None:
        sub, tag = self._locate(event)
        queue = sub.queue
        assert queue is not None
        refs = self._take(sub, tag)
        if event.transaction is not None:
            tx = self._transaction(event.transaction, ev.Ack)
            tx.acks.extend((queue, ref) for ref in refs)  # first: a rollback must find them
            self.broker.hold_for_transaction(queue, refs)
            durable = None
        else:
            self.broker.acknowledge(queue, refs)
            durable = self.broker.flush() if event.receipt is not None else None
        if event.receipt is not None:
            # The RECEIPT of an ACK promises it will not be redelivered after a crash.
            self._reply(durable, self.protocol.receipt(event.receipt), event.receipt)

    def _on_nack(self, event: ev.Nack) -> None:
        sub, tag = self._locate(event)
        queue = sub.queue
        assert queue is not None
        if event.transaction is not None:
            tx = self._transaction(event.transaction, ev.Nack)  # before taking: a bad name changes nothing
            refs = self._take(sub, tag)
            tx.nacks.extend((queue, ref) for ref in refs)
            self.broker.hold_for_transaction(queue, refs)
        else:
            self.broker.nack(queue, self._take(sub, tag))
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt), event.receipt)

    # -- transactions ---------------------------------------------------------------------

    def _transaction(self, name: str, event: type) -> StompTransaction:
        """The open transaction `name`, which `event` (a frame naming it) may add to or end."""
        tx = self.transactions.get(name)
        if tx is None:
            raise TRANSACTIONS.refuse(TxState.NONE, event, name)
        TRANSACTIONS.step(tx.state, event, name)  # a BEGUN one takes every such frame
        return tx

    def _on_begin(self, event: ev.Begin) -> None:
        name = event.transaction
        tx = self.transactions.get(name)
        state = TRANSACTIONS.step(TxState.NONE if tx is None else tx.state, ev.Begin, name)
        self.transactions[name] = StompTransaction(name, state=state)
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt), event.receipt)

    def _on_commit(self, event: ev.Commit) -> None:
        tx = self._transaction(event.transaction, ev.Commit)
        future = self.broker.commit(tx)  # may raise Blocked: the COMMIT is retried, still BEGUN
        tx.state = TRANSACTIONS.step(tx.state, ev.Commit, tx.name)
        del self.transactions[event.transaction]
        if tx.applied is not None and not tx.applied.done():
            self._committing = tx
            tx.applied.add_done_callback(self._commit_applied)
        else:
            tx.state = TRANSACTIONS.step(tx.state, CommitApplied, tx.name)
        for queue, refs in _by_queue(tx.nacks):
            self.broker.nack(queue, refs, transacted=True)
        if event.receipt is not None:
            self._reply(future, self.protocol.receipt(event.receipt), event.receipt)
        elif future is not None:
            self._watch(future)

    def _on_abort(self, event: ev.Abort) -> None:
        tx = self._transaction(event.transaction, ev.Abort)
        del self.transactions[event.transaction]
        self._rollback(tx, ev.Abort)
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt), event.receipt)

    def _rollback(self, tx: StompTransaction, cause: type) -> None:
        """ABORT (or the connection gone): acknowledged and nacked deliveries alike go back
        to their queues, oldest first."""
        tx.state = TRANSACTIONS.step(tx.state, cause, tx.name)
        if tx.nacks:
            tx.acks = sorted(tx.acks + tx.nacks, key=lambda item: item[1].message.message_id)
            tx.nacks = []
        self.broker.rollback(tx)

    # -- deliveries (DeliverySink) --------------------------------------------------------

    def deliver(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        # Core types a consumer's key `object` (it is the sink's own handle); ours are
        # Subscriptions. Told to the type checker only: a cast is a call per delivery.
        if TYPE_CHECKING:
            sub = cast("Subscription", consumer.key)
        else:
            sub = consumer.key
        message = ref.message
        message_id = str(message.message_id)
        extra = []
        if self.protocol.version == "1.2":
            extra.append(("ack", f"{sub.index}.{tag}"))
        elif sub.ack_mode is not AckMode.AUTO:
            deliveries = self._msgid_acks.get(message_id)
            if deliveries is None:
                self._msgid_acks[message_id] = {sub.index: tag}
            else:
                deliveries[sub.index] = tag
        extra.append(("redelivered", "true" if ref.delivery_count > 1 else "false"))
        self.write(self._message_frame(sub, message, message_id, extra))

    def _message_frame(self, sub: Subscription, message: Message, message_id: str,
                       extra: list[tuple[str, str]]) -> bytes:
        """A MESSAGE frame: our own headers, then the producer's (minus those we set)."""
        headers = [
            ("message-id", message_id),
            ("destination", sub.destination),
            ("subscription", sub.id),
            *extra,
        ]
        headers.extend([item for item in message.headers.items() if item[0] not in _OWN_HEADERS])
        return self.protocol.message(headers, message.body)

    # -- browsing -------------------------------------------------------------------------

    def _start_browse(self, sub: Subscription, destination: Destination, selector: str | None) -> None:
        queue = self._browse_queue(destination)
        sub.browse = QueueBrowse(queue, compile_filter(selector), lambda: self._browse_arrived(sub))

    def _browse_arrived(self, sub: Subscription) -> None:
        """A page chunk the browse waited for was read in the page-I/O worker."""
        if sub.browse is not None and self._writable:
            self._pump_browse(sub)

    def _browse_queue(self, destination: Destination) -> Queue | None:
        if destination.queue is not None:
            return self.broker.queues.get(destination.queue)
        if destination.routing_type == ANYCAST:
            return self.broker.queues.get(destination.address)
        return None

    def _pump_browse(self, sub: Subscription) -> None:
        """Send browsed messages while the connection is writable; end with browser:end."""
        browse = sub.browse
        if browse is None or self.closing:
            return
        for sent, ref in enumerate(browse, 1):
            message = ref.message
            redelivered = "true" if ref.delivery_count > 0 else "false"
            self.write(self._message_frame(sub, message, str(message.message_id),
                                           [("redelivered", redelivered)]))
            if not self._writable:
                return  # set_writable(True) resumes this browse
            if sent >= BROWSE_BATCH:
                self._loop.call_soon(self._pump_browse, sub)
                return
        if browse.pending:
            return  # a page chunk is being read: `_browse_arrived` resumes this browse
        sub.browse = None
        self.write(self.protocol.message(
            [("message-id", f"browser-end-{sub.index}"), ("destination", sub.destination),
             ("subscription", sub.id), ("browser", "end")], b"",
        ))

    # -- output ---------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self._out:
            self.transport.schedule_flush()
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > OUTPUT_HIGH_WATER and self._writable:
            self.set_writable(False)

    def buffered_bytes(self) -> int:
        """Bytes held besides messages: output of this turn, receipts waiting for the journal,
        held input, a partial frame."""
        return self._out_bytes + self._reply_bytes + self._backlog_bytes + self.protocol.buffered

    def may_make_room(self) -> bool:
        """Frames of this connection could free memory: it holds deliveries not yet
        acknowledged, or an open transaction (server/connection_buffers.py)."""
        if self.transactions:
            return True
        return any(sub.consumer is not None and sub.consumer.in_flight
                   for sub in self.subscriptions.values())

    def input_bytes(self) -> int:
        """Of those, the input: held frames and bytes not parsed yet (a partial frame)."""
        return self._backlog_bytes + self.protocol.buffered

    @property
    def replies_backlogged(self) -> bool:
        """Receipts waiting for the journal past the output bound: input is held (as while
        the peer does not read) until they go out, so a producer sending faster than the
        journal syncs cannot pile up receipts without bound."""
        return self._reply_bytes > OUTPUT_HIGH_WATER

    def take_output(self) -> bytes:
        """Everything buffered since the last flush (the shell writes it in one call)."""
        data = b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        return data

    def set_writable(self, writable: bool) -> None:
        """Transport flow control: while False, consumers of this connection get no credit
        and its input is held (ACK/NACK excepted), so a peer that does not read what we
        write cannot make us buffer without bound."""
        self._writable = writable
        for sub in self._by_index.values():
            if sub.consumer is not None:
                sub.consumer.writable = writable
        if writable:
            for sub in list(self._by_index.values()):
                if sub.queue is not None and sub.consumer is not None:
                    sub.queue.dispatch()
                elif sub.browse is not None:
                    self._pump_browse(sub)
            if self._backlog:
                self._schedule_drain()

    def _reply(self, future: asyncio.Future[None] | None, frame: bytes,
               receipt_id: str | None = None) -> None:
        """Send `frame` once `future` (and every earlier reply) is complete."""
        if future is None and not self._replies:
            self.write(frame)
            return
        self._replies.append((future, frame, receipt_id))
        self._reply_bytes += len(frame)
        if self._reply_bytes > OUTPUT_HIGH_WATER and self._writable:
            self.set_writable(False)
        if future is not None:
            self._watch(future)

    def _drain_replies(self) -> None:
        """Write the replies that are due, in order; a reply whose write failed is dropped
        (and ends the connection). Once none is left, an ERROR waiting for them goes out."""
        replies = self._replies
        while replies and not self.closing_hard:
            future, frame, receipt_id = replies[0]
            if future is not None and not future.done():
                return
            replies.popleft()
            self._reply_bytes -= len(frame)
            if future is not None and (future.cancelled() or future.exception() is not None):
                self._note_error(f"message could not be stored: {_failure_of(future)}", receipt_id)
                continue
            self.write(frame)
        if replies or self.closing_hard:
            return
        if self._error is not None:
            message, receipt_id = self._error
            self._fail_raw(self.protocol.error(message, receipt_id=receipt_id))
        elif self._after_replies is not None:
            callback, self._after_replies = self._after_replies, None
            callback()

    def _when_replied(self, callback: Callable[[], None]) -> None:
        if self._replies:
            self._after_replies = callback
        else:
            self._loop.call_soon(callback)

    def _watch(self, future: asyncio.Future[None]) -> None:
        """Hear when `future` completes: replies may be due, or its write failed. One
        callback per future is enough (a group commit's future is shared by many frames)."""
        if future is not self._watched or future.done():
            self._watched = future
            future.add_done_callback(self._settled)

    def _settled(self, future: asyncio.Future[None]) -> None:
        problem = _failure_of(future)
        if problem is not None and self._error is None and not self.closing_hard:
            receipt_id = next((rid for f, _, rid in self._replies if f is future), None)
            self._note_error(f"message could not be stored: {problem}", receipt_id)
        self._drain_replies()

    # -- errors and close -----------------------------------------------------------------

    def fail(self, message: str, receipt_id: str | None) -> None:
        """ERROR frame, then close (STOMP 1.2); nothing this client was promised is lost:
        every RECEIPT already due is written before the ERROR."""
        self._note_error(message, receipt_id)
        self._drain_replies()

    def _note_error(self, message: str, receipt_id: str | None) -> None:
        """Stop carrying out frames; the first problem is the one the ERROR reports."""
        if self.closing_hard:
            return
        if self._error is None:
            log.info("%s: ERROR %s", self.session_id, message)
            self._error = (message, receipt_id)
        else:
            log.info("%s: also: %s", self.session_id, message)
        self.closing = True
        self._input_closed = True
        self._end()

    def _fail_raw(self, frame: bytes) -> None:
        self.closing = True
        self.closing_hard = True
        self._end()
        self.write(frame)
        self.transport.close()

    def stop_deliveries(self) -> None:
        """The connection is going: its consumers take nothing more. A delivery written to a
        closing socket never arrives, and an auto-acknowledged one would be lost with it
        (at shutdown, refs returned by one closing connection went to the next)."""
        for sub in self.subscriptions.values():
            if sub.consumer is not None:
                sub.consumer.closed = True

    def _end(self) -> None:
        """No more frames are carried out: held frames are dropped, transactions roll back,
        subscriptions close (their unacknowledged deliveries return to their queues)."""
        self._backlog.clear()
        self._backlog_bytes = 0
        if self._reading_paused:  # bytes are ignored from now on; heart-beats still count
            self._reading_paused = False
            self.transport.resume_reading()
        if self._blocked_retry is not None:
            self.broker.cancel_wait(self._blocked_retry)
            self._blocked_retry = None
        for tx in self.transactions.values():
            self._rollback(tx, ConnectionEnds)
        self.transactions.clear()
        for sub in list(self.subscriptions.values()):
            self._close_subscription(sub, ConnectionEnds)
        self.subscriptions.clear()
        self._by_index.clear()
        self._msgid_acks.clear()

    def connection_lost(self) -> None:
        """Socket gone: unacknowledged deliveries return to their queues, transactions roll back."""
        self.closing = True
        self.closing_hard = True
        if self._authenticating is not None:
            self._authenticating.cancel()  # gives up its place in the peer's turn (security)
        self._replies.clear()
        self._reply_bytes = 0
        self._after_replies = None
        self._end()


_GOES_AHEAD = (ev.Ack, ev.Nack)

# Each frame event's handler; `_handle` looks it up by the event's exact type.
_HANDLERS: dict[type, Callable[[StompSession, Any], None]] = {
    ev.Send: StompSession._on_send,
    ev.SendBatch: StompSession._on_send_batch,
    ev.Ack: StompSession._on_ack,
    ev.Nack: StompSession._on_nack,
    ev.Subscribe: StompSession._on_subscribe,
    ev.Unsubscribe: StompSession._on_unsubscribe,
    ev.Begin: StompSession._on_begin,
    ev.Commit: StompSession._on_commit,
    ev.Abort: StompSession._on_abort,
    ev.Connect: StompSession._on_connect,
    ev.Disconnect: StompSession._on_disconnect,
}

_OWN_HEADERS = frozenset(
    {"message-id", "destination", "subscription", "ack", "redelivered", "receipt",
     "transaction", "content-length"}
)


def _size(event: object) -> int:
    """About what a held frame costs in memory: its body, headers, receipt and other fields."""
    if type(event) is ev.SendBatch:  # the frame, and the header text decoded from it
        return 64 + 2 * event.size
    if type(event) is ev.Send:  # most held frames: its fields by name, not by `__slots__`
        headers = event.headers
        return (64 + len(event.destination) + len(event.body) + sum(map(len, headers))
                + sum(map(len, headers.values())) + len(event.receipt or "") + len(event.transaction or ""))
    size = 64
    for name in getattr(type(event), "__slots__", ()):
        value = getattr(event, name, None)
        if isinstance(value, str | bytes):
            size += len(value)
        elif isinstance(value, dict):
            size += sum(len(key) + len(item) for key, item in value.items())
    return size


def _failure_of(future: asyncio.Future[None]) -> BaseException | None:
    if future.cancelled():
        return asyncio.CancelledError("the write was cancelled")
    return future.exception()


def _by_queue(pairs: list[tuple[Queue, MessageRef]]) -> list[tuple[Queue, list[MessageRef]]]:
    grouped: dict[Queue, list[MessageRef]] = {}
    for queue, ref in pairs:
        grouped.setdefault(queue, []).append(ref)
    return list(grouped.items())


_PRIORITIES = tuple(str(n) for n in range(10))


def _batch_memory(batch: ev.SendBatch) -> int:
    """At least what `estimate_memory` will say of a batch SEND's messages, from its lengths."""
    return estimate_from_lengths(batch.header_count, batch.header_text, batch.body_bytes, batch.message_count)


def _send_fields(headers: dict[str, str]) -> tuple[bool, int, int]:
    """A SEND's persistence, priority (clamped to 0-9, and the header said so to consumers)
    and expiration, from its headers."""
    persistent = headers.get("persistent", "").lower() == "true"
    if "priority" not in headers and "expires" not in headers:
        return persistent, 4, 0  # the common case, without the calls
    priority = _priority(headers.get("priority"))
    if priority != 4 and headers["priority"] != _PRIORITIES[priority]:
        headers["priority"] = _PRIORITIES[priority]
    return persistent, priority, _expires(headers.get("expires"))


def _priority(value: str | None) -> int:
    if value is None or value == "":
        return 4
    try:
        priority = int(value)
    except ValueError:
        raise BrokerError(f"priority header must be an integer 0-9, got {value!r}") from None
    return min(max(priority, 0), 9)


def _expires(value: str | None) -> int:
    if value is None or value == "":
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        raise BrokerError(f"expires header must be milliseconds since the epoch, got {value!r}") from None


def _int_header(headers: dict[str, str], names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = headers.get(name)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise SubscriptionError(f"{name} header must be an integer, got {value!r}") from None
    return default

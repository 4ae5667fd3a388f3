"""One STOMP connection's session: protocol events in, broker calls, frames out.

This is the only place where STOMP meets the broker core. It owns the connection's
subscriptions, transactions and receipts, and it holds no socket: the asyncio shell
(`server.stomp_server`) feeds it bytes and gives it a `Transport` to write to, pause and
close. Output is buffered and flushed once per loop iteration, so a burst of deliveries
costs one write.

Receipts go out in the order their frames arrived: a RECEIPT for a persistent SEND waits for
the journal's group commit, and any later receipt waits behind it.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

from pagemq.core.address import ANYCAST, MULTICAST
from pagemq.core.broker import Blocked, Broker, compile_filter
from pagemq.core.consumer import AckMode, Consumer, MessageRef
from pagemq.core.errors import BrokerError, SubscriptionError, TransactionError, UnknownDelivery
from pagemq.core.message import Message
from pagemq.core.queue import Queue
from pagemq.core.selector import Selector
from pagemq.core.selector.properties import message_view
from pagemq.core.transactions import PendingSend, Transaction
from pagemq.protocol.errors import ProtocolError
from pagemq.protocol.stomp import events as ev
from pagemq.protocol.stomp.connection import StompConnection, VersionMismatch
from pagemq.server.destinations import Destination, parse_destination

log = logging.getLogger("pagemq.stomp")

_session_ids = itertools.count(1)
OUTPUT_HIGH_WATER = 1 << 20
PREFETCH_HEADERS = ("activemq.prefetchSize", "prefetch-count")
BROWSE_BATCH = 256


def _durable_name(headers: dict[str, str]) -> str | None:
    return next((headers[h] for h in ev.DURABLE_NAME_HEADERS if h in headers), None)


class Transport(Protocol):
    def write(self, data: bytes) -> None: ...
    def schedule_flush(self) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


class Subscription:
    __slots__ = ("ack_mode", "browse", "consumer", "destination", "id", "index")

    def __init__(self, sub_id: str, index: int, destination: str, ack_mode: AckMode) -> None:
        self.id = sub_id
        self.index = index
        self.destination = destination
        self.ack_mode = ack_mode
        self.consumer: Consumer | None = None
        self.browse: Iterator[MessageRef] | None = None


class StompSession:
    """Server side of one STOMP connection, bound to a broker."""

    def __init__(self, broker: Broker, protocol: StompConnection, transport: Transport) -> None:
        self.broker = broker
        self.protocol = protocol
        self.transport = transport
        self.session_id = f"pagemq-{next(_session_ids)}"
        self.client_id: str | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self._by_index: dict[int, Subscription] = {}
        self._next_index = itertools.count(1)
        self.transactions: dict[str, Transaction] = {}
        self._msgid_acks: dict[str, tuple[int, int]] = {}
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._replies: deque[tuple[asyncio.Future[None] | None, bytes]] = deque()
        self._watched: asyncio.Future[None] | None = None
        self._backlog: deque[object] = deque()
        self._blocked_retry: object | None = None
        self._writable = True
        self._after_replies: Callable[[], None] | None = None
        self.closing = False
        self.closing_hard = False

    # -- input ----------------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """Bytes from the socket; any protocol or broker error ends the connection."""
        if self.closing:
            return
        try:
            events = self.protocol.receive_data(data)
        except VersionMismatch:
            self._fail_raw(self.protocol.version_error())
            return
        except ProtocolError as exc:
            # Frames before the bad one in the same read were valid: they take effect first.
            self._process(deque(getattr(exc, "events", ())))
            if not self.closing:
                self.fail(exc.message, exc.receipt_id)
            return
        if self._backlog or self._blocked_retry is not None:
            self._backlog.extend(events)
            return
        self._process(deque(events))

    def _process(self, events: deque[object]) -> None:
        while events and not self.closing:
            event = events.popleft()
            try:
                self._handle(event)
            except Blocked as blocked:
                events.appendleft(event)
                self._block(blocked, events)
                return
            except BrokerError as exc:
                self.fail(exc.message, getattr(event, "receipt", None))
                return
            except ProtocolError as exc:
                self.fail(exc.message, exc.receipt_id or getattr(event, "receipt", None))
                return

    def _handle(self, event: object) -> None:
        if isinstance(event, ev.Send):
            self._on_send(event)
        elif isinstance(event, ev.Ack):
            self._on_ack(event)
        elif isinstance(event, ev.Nack):
            self._on_nack(event)
        elif isinstance(event, ev.Subscribe):
            self._on_subscribe(event)
        elif isinstance(event, ev.Unsubscribe):
            self._on_unsubscribe(event)
        elif isinstance(event, ev.Begin):
            self._on_begin(event)
        elif isinstance(event, ev.Commit):
            self._on_commit(event)
        elif isinstance(event, ev.Abort):
            self._on_abort(event)
        elif isinstance(event, ev.Connect):
            self._on_connect(event)
        elif isinstance(event, ev.Disconnect):
            self._on_disconnect(event)

    # -- BLOCK policy ---------------------------------------------------------------------

    def _block(self, blocked: Blocked, events: deque[object]) -> None:
        """Stop reading this producer until the address has room (TCP slows the client)."""
        self._backlog = events
        self.transport.pause_reading()
        self._blocked_retry = self.broker.wait_for_memory(blocked.address, self._unblock)

    def _unblock(self) -> None:
        self._blocked_retry = None
        events, self._backlog = self._backlog, deque()
        asyncio.get_event_loop().call_soon(self._resume_after_block, events)

    def _resume_after_block(self, events: deque[object]) -> None:
        if self.closing:
            return
        self._process(events)
        if self._blocked_retry is None and not self.closing:
            self.transport.resume_reading()

    # -- frames ---------------------------------------------------------------------------

    def _on_connect(self, event: ev.Connect) -> None:
        self.client_id = event.client_id
        self.write(self.protocol.connected(session=self.session_id))

    def _on_disconnect(self, event: ev.Disconnect) -> None:
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt))
        self.closing = True
        self._when_replied(self.transport.close)

    def _on_send(self, event: ev.Send) -> None:
        destination = parse_destination(event.destination)
        headers = event.headers
        persistent = headers.get("persistent", "").lower() == "true"
        priority = _priority(headers.get("priority"))
        expiration = _expires(headers.get("expires"))
        if event.transaction is not None:
            tx = self._transaction(event.transaction)
            tx.sends.append(
                PendingSend(
                    destination.address, destination.routing_type, headers, event.body,
                    persistent, priority, expiration,
                )
            )
            future = None
        else:
            future = self.broker.send(
                destination.address, destination.routing_type, headers, event.body,
                persistent=persistent, priority=priority, expiration=expiration,
            )
        if event.receipt is not None:
            self._reply(future, self.protocol.receipt(event.receipt))
        elif future is not None:
            self._watch_failure(future)

    def _on_subscribe(self, event: ev.Subscribe) -> None:
        if event.id in self.subscriptions:
            raise SubscriptionError(f"subscription id {event.id!r} is already in use")
        mode = AckMode(event.ack)  # the event refused any other ack mode
        destination = parse_destination(event.destination)
        compile_filter(event.selector)  # a bad selector is refused before anything changes
        sub = Subscription(event.id, next(self._next_index), event.destination, mode)
        headers = event.headers
        if headers.get("browser", "").lower() == "true":
            self._start_browse(sub, destination, event.selector)
        else:
            queue, selector = self._queue_for(destination, headers, event.selector, sub.index)
            sub.consumer = self.broker.subscribe(
                queue, self, key=sub, ack_mode=mode, selector=selector,
                prefetch=_int_header(headers, PREFETCH_HEADERS, 1000),
                window_bytes=_int_header(headers, ("consumer-window-size",), -1),
            )
        self.subscriptions[event.id] = sub
        self._by_index[sub.index] = sub
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt))
        if sub.browse is not None:
            self._pump_browse(sub)

    def _queue_for(
        self, destination: Destination, headers: dict[str, str], selector: str | None, index: int
    ) -> tuple[Queue, str | None]:
        """The queue a subscription reads, and the selector left for its consumer. A plain
        topic subscription gets its own queue, named by its subscription index (never reused
        on this connection, so a later subscription cannot land on an earlier one's queue)."""
        broker = self.broker
        address = broker.ensure_address(destination.address, destination.routing_type)
        if destination.routing_type == ANYCAST:
            return broker.ensure_queue(address, destination.address, ANYCAST), selector
        durable_name = _durable_name(headers)
        if durable_name is None:
            name = f"{destination.address}.{self.session_id}.{index}"
            queue = broker.ensure_queue(
                address, name, MULTICAST, filter_text=selector, durable=False, temporary=True
            )
            return queue, None
        if not self.client_id:
            raise SubscriptionError("a durable subscription needs a client-id on CONNECT")
        name = f"{self.client_id}.{durable_name}"
        queue = broker.queues.get(name)
        if queue is not None and (queue.filter_text or None) != (selector or None):
            broker.delete_queue(queue)  # a new selector makes a new subscription (JMS)
        queue = broker.ensure_queue(address, name, MULTICAST, filter_text=selector)
        if queue.consumers:
            raise SubscriptionError(f"durable subscription {name!r} already has a subscriber")
        return queue, None

    def _on_unsubscribe(self, event: ev.Unsubscribe) -> None:
        sub = self.subscriptions.pop(event.id or "", None) if event.id else None
        durable_name = _durable_name(event.headers)
        if sub is None and durable_name is None:
            raise SubscriptionError(f"no subscription with id {event.id!r}")
        if sub is not None:
            self._close_subscription(sub)
        if durable_name is not None and self.client_id:
            queue = self.broker.queues.get(f"{self.client_id}.{durable_name}")
            if queue is not None:
                self.broker.delete_queue(queue)
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt))

    def _close_subscription(self, sub: Subscription) -> None:
        self._by_index.pop(sub.index, None)
        sub.browse = None
        if sub.consumer is not None:
            self.broker.close_consumer(sub.consumer)

    # -- acknowledgements -----------------------------------------------------------------

    def _locate(self, event: ev.Ack | ev.Nack) -> tuple[Subscription, int]:
        ack_id = event.id
        if self.protocol.version == "1.2":
            sub_index, _, tag = ack_id.partition(".")
            try:
                sub = self._by_index.get(int(sub_index))
                tag_no = int(tag)
            except ValueError:
                sub = None
                tag_no = 0
        else:
            sub_index_tag = self._msgid_acks.get(ack_id)
            sub, tag_no = (None, 0) if sub_index_tag is None else (
                self._by_index.get(sub_index_tag[0]), sub_index_tag[1]
            )
        if sub is None or sub.consumer is None:
            raise UnknownDelivery(f"ACK/NACK of unknown id {ack_id!r}")
        return sub, tag_no

    def _take(self, sub: Subscription, tag: int) -> list[MessageRef]:
        consumer = sub.consumer
        assert consumer is not None
        if sub.ack_mode is AckMode.AUTO:
            raise UnknownDelivery("subscription uses ack mode auto: nothing to acknowledge")
        refs = consumer.take_through(tag) if sub.ack_mode is AckMode.CLIENT else [consumer.take(tag)]
        if self._msgid_acks:
            for ref in refs:
                self._msgid_acks.pop(str(ref.message.message_id), None)
        return refs

    def _on_ack(self, event: ev.Ack) -> None:
        sub, tag = self._locate(event)
        consumer = sub.consumer
        assert consumer is not None
        refs = self._take(sub, tag)
        if event.transaction is not None:
            tx = self._transaction(event.transaction)
            tx.acks.extend((consumer, ref) for ref in refs)
            durable = None
        else:
            self.broker.acknowledge(consumer.queue, refs)
            durable = self.broker.flush() if event.receipt is not None else None
        if event.receipt is not None:
            # The RECEIPT of an ACK promises it will not be redelivered after a crash.
            self._reply(durable, self.protocol.receipt(event.receipt))

    def _on_nack(self, event: ev.Nack) -> None:
        sub, tag = self._locate(event)
        consumer = sub.consumer
        assert consumer is not None
        refs = self._take(sub, tag)
        self.broker.nack(consumer, refs)
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt))

    # -- transactions ---------------------------------------------------------------------

    def _transaction(self, name: str) -> Transaction:
        tx = self.transactions.get(name)
        if tx is None:
            raise TransactionError(f"transaction {name!r} was not begun")
        return tx

    def _on_begin(self, event: ev.Begin) -> None:
        if event.transaction in self.transactions:
            raise TransactionError(f"transaction {event.transaction!r} is already active")
        self.transactions[event.transaction] = Transaction(event.transaction)
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt))

    def _on_commit(self, event: ev.Commit) -> None:
        tx = self._transaction(event.transaction)
        future = self.broker.commit(tx)
        del self.transactions[event.transaction]
        if event.receipt is not None:
            self._reply(future, self.protocol.receipt(event.receipt))
        elif future is not None:
            self._watch_failure(future)

    def _on_abort(self, event: ev.Abort) -> None:
        tx = self._transaction(event.transaction)
        del self.transactions[event.transaction]
        self.broker.rollback(tx)
        if event.receipt is not None:
            self._reply(None, self.protocol.receipt(event.receipt))

    # -- deliveries (DeliverySink) --------------------------------------------------------

    def deliver(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        sub: Subscription = consumer.key  # type: ignore[assignment]
        message = ref.message
        message_id = str(message.message_id)
        extra = []
        if self.protocol.version == "1.2":
            extra.append(("ack", f"{sub.index}.{tag}"))
        elif sub.ack_mode is not AckMode.AUTO:
            self._msgid_acks[message_id] = (sub.index, tag)
        if ref.delivery_count > 1:
            extra.append(("redelivered", "true"))
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
        sub.browse = _browse_refs(queue, compile_filter(selector))

    def _browse_queue(self, destination: Destination) -> Queue | None:
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
            self.write(self._message_frame(sub, message, str(message.message_id), []))
            if not self._writable:
                return  # set_writable(True) resumes this browse
            if sent >= BROWSE_BATCH:
                asyncio.get_event_loop().call_soon(self._pump_browse, sub)
                return
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

    def take_output(self) -> bytes:
        """Everything buffered since the last flush (the shell writes it in one call)."""
        data = b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        return data

    def set_writable(self, writable: bool) -> None:
        """Transport flow control: consumers of this connection get no credit while False."""
        self._writable = writable
        for sub in self._by_index.values():
            if sub.consumer is not None:
                sub.consumer.writable = writable
        if writable:
            for sub in list(self._by_index.values()):
                if sub.consumer is not None:
                    sub.consumer.queue.dispatch()
                elif sub.browse is not None:
                    self._pump_browse(sub)

    def _reply(self, future: asyncio.Future[None] | None, frame: bytes) -> None:
        """Send `frame` once `future` (and every earlier reply) is complete."""
        if future is None and not self._replies:
            self.write(frame)
            return
        self._replies.append((future, frame))
        if future is not None:
            self._watch_failure(future)

    def _drain_replies(self, _future: object = None) -> None:
        replies = self._replies
        while replies and not self.closing_hard:
            future, frame = replies[0]
            if future is not None:
                if not future.done():
                    return
                if future.exception() is not None:
                    self.fail(f"message could not be stored: {future.exception()}", None)
                    return
            replies.popleft()
            self.write(frame)
        if not replies and self._after_replies is not None:
            callback, self._after_replies = self._after_replies, None
            callback()

    def _when_replied(self, callback: Callable[[], None]) -> None:
        if self._replies:
            self._after_replies = callback
        else:
            asyncio.get_event_loop().call_soon(callback)

    def _watch_failure(self, future: asyncio.Future[None]) -> None:
        if future is not self._watched:
            self._watched = future
            future.add_done_callback(self._drain_replies)

    # -- errors and close -----------------------------------------------------------------

    def fail(self, message: str, receipt_id: str | None) -> None:
        """ERROR frame, then close (STOMP 1.2); nothing this client was promised is lost."""
        log.info("%s: ERROR %s", self.session_id, message)
        self._fail_raw(self.protocol.error(message, receipt_id=receipt_id))

    def _fail_raw(self, frame: bytes) -> None:
        self.closing = True
        self.closing_hard = True
        self.write(frame)
        self.transport.close()

    def connection_lost(self) -> None:
        """Socket gone: unacknowledged deliveries return to their queues, transactions roll back."""
        self.closing = True
        self.closing_hard = True
        if self._blocked_retry is not None:
            self.broker.memory.cancel(self._blocked_retry)  # type: ignore[arg-type]
            self._blocked_retry = None
        for tx in self.transactions.values():
            self.broker.rollback(tx)
        self.transactions.clear()
        for sub in list(self.subscriptions.values()):
            self._close_subscription(sub)
        self.subscriptions.clear()


_OWN_HEADERS = frozenset(
    {"message-id", "destination", "subscription", "ack", "redelivered", "receipt",
     "transaction", "content-length"}
)


def _browse_refs(queue: Queue | None, selector: Selector | None) -> Iterator[MessageRef]:
    """The whole queue in order without taking anything: delivering, pending, then paged.

    The in-memory part is a snapshot taken now; the paged part is read from the page files
    from the queue's read position at that moment, so no message is seen twice.
    """
    if queue is None:
        return
    cursor = queue.cursor
    in_memory = [ref for c in queue.consumers for ref in c.in_flight.values()] + list(queue)
    if cursor is not None:
        # Refs a selective consumer claimed ahead are shown at their place in the page files.
        in_memory = [ref for ref in in_memory if not cursor.is_ahead(ref)]  # type: ignore[attr-defined]
    snapshot = sorted(in_memory, key=lambda ref: ref.message.message_id)  # arrival order
    paged = cursor.browse(selector) if cursor is not None else iter(())  # type: ignore[attr-defined]
    for ref in snapshot:
        if selector is None or selector.matches_headers(message_view(ref.message)):
            yield ref
    yield from paged


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

"""StompSession over a real Broker, a store whose writes complete when the test says, and a
transport that records what the session asks of it: receipts before an ERROR, receipts that
wait for durable records, the bounded read-ahead of a blocked connection, failed writes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pagemq.core.broker import Broker
from pagemq.core.settings import AddressSettingsRepository
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import Frame, encode_frame
from pagemq.protocol.stomp.parser import FrameParser
from pagemq.server import stomp_session
from pagemq.server.stomp_session import StompSession
from pagemq.storage.api import MemoryStore, QueueRecord


class HeldStore(MemoryStore):
    """Durable writes (messages, flushes) complete only when `complete()` is called."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[asyncio.Future[None]] = []
        self.refuse: OSError | None = None
        self.queues: list[str] = []

    def _future(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        return future

    def add_queue(self, record: QueueRecord) -> None:
        self.queues.append(record.name)

    def store_message(self, message, queue_ids, *, sync):  # type: ignore[no-untyped-def]
        if self.refuse is not None:
            raise self.refuse
        return self._future()

    def flush(self) -> asyncio.Future[None]:
        return self._future()

    def complete(self, error: BaseException | None = None) -> None:
        pending, self.pending = self.pending, []
        for future in pending:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


class RecordingTransport:
    def __init__(self) -> None:
        self.session: StompSession | None = None
        self.out = bytearray()
        self.paused = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def schedule_flush(self) -> None:
        pass

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True

    def frames(self) -> list[Frame]:
        assert self.session is not None
        self.out += self.session.take_output()
        parser = FrameParser()
        parser.version = "1.2"
        return parser.feed(bytes(self.out))


def _frame(command: str, headers: dict[str, str], body: bytes | str = b"") -> bytes:
    raw = body.encode() if isinstance(body, str) else body
    return encode_frame(command, headers, raw, version="1.2")


def _commands(transport: RecordingTransport) -> list[str]:
    return [f"{f.command}:{f.headers.get('receipt-id', '')}" for f in transport.frames()]


def run(test: Callable[..., Awaitable[None]], settings: dict[str, dict[str, object]] | None = None,
        **broker_kwargs: object) -> None:
    async def body() -> None:
        repository = AddressSettingsRepository()
        for match, values in (settings or {}).items():
            repository.add(match, values)
        store = HeldStore()
        broker = Broker(repository, store=store, **broker_kwargs)  # type: ignore[arg-type]
        transport = RecordingTransport()
        session = StompSession(broker, StompConnection(), transport)
        transport.session = session
        session.receive(_frame("CONNECT", {"accept-version": "1.2", "client-id": "c1"}))
        await test(session, transport, store, broker)

    asyncio.run(body())


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


# -- receipts and ERROR ---------------------------------------------------------------------


def test_error_waits_for_the_receipts_of_stored_sends_and_comes_after_them() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        sends = b"".join(_frame("SEND", {"destination": "/queue/q", "persistent": "true",
                                         "receipt": f"r{n}"}, "m") for n in range(3))
        session.receive(sends + b"SEND\nno colon\n\n\x00")
        await turn()
        assert _commands(transport) == ["CONNECTED:"], "ERROR written ahead of receipts due"
        assert not transport.closed
        store.complete()
        await turn()
        assert _commands(transport) == ["CONNECTED:", "RECEIPT:r0", "RECEIPT:r1", "RECEIPT:r2", "ERROR:"]
        assert transport.closed

    run(test)


def test_a_failed_write_drops_its_receipt_and_ends_with_an_error_naming_it() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        session.receive(_frame("SEND", {"destination": "/queue/q", "persistent": "true",
                                        "receipt": "r0"}, "m"))
        store.complete()
        session.receive(_frame("SEND", {"destination": "/queue/q", "persistent": "true",
                                        "receipt": "r1"}, "m"))
        store.complete(OSError(28, "No space left on device"))
        await turn()
        frames = transport.frames()
        assert [f.command for f in frames] == ["CONNECTED", "RECEIPT", "ERROR"]
        assert frames[1].headers["receipt-id"] == "r0"
        assert frames[2].headers["receipt-id"] == "r1"
        assert "could not be stored" in frames[2].headers["message"]
        assert "No space left" in frames[2].headers["message"]

    run(test)


def test_a_failed_write_of_a_send_without_receipt_is_reported() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        session.receive(_frame("SEND", {"destination": "/queue/q", "persistent": "true"}, "m"))
        store.complete(OSError(5, "Input/output error"))
        await turn()
        frames = transport.frames()
        assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
        assert "Input/output error" in frames[1].headers["message"]
        assert transport.closed

    run(test)


def test_a_store_refusing_a_write_at_once_is_an_error_not_an_exception() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        store.refuse = OSError(27, "journal refuses appends after a failure")
        session.receive(_frame("SEND", {"destination": "/queue/q", "persistent": "true",
                                        "receipt": "r0"}, "m"))
        await turn()
        frames = transport.frames()
        assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
        assert frames[1].headers["receipt-id"] == "r0"
        assert "refuses appends" in frames[1].headers["message"]

    run(test)


def test_connect_and_a_bad_frame_in_one_read_answer_connected_then_error() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        other = StompSession(broker, StompConnection(), RecordingTransport())
        other.transport.session = other  # type: ignore[attr-defined]
        other.receive(_frame("CONNECT", {"accept-version": "1.2"}) + b"BOGUS\n\n\x00")
        frames = other.transport.frames()  # type: ignore[attr-defined]
        assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
        assert "unknown command" in frames[1].headers["message"]

    run(test)


# -- receipts that promise durable records ---------------------------------------------------


def test_durable_subscribe_and_unsubscribe_receipts_wait_for_their_records() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        headers = {"destination": "/topic/t", "id": "s1", "durable-subscription-name": "d"}
        session.receive(_frame("SUBSCRIBE", {**headers, "receipt": "sub"}))
        await turn()
        assert store.queues == ["c1.d"]
        assert _commands(transport) == ["CONNECTED:"], "durable SUBSCRIBE receipted before its record"
        store.complete()
        await turn()
        assert _commands(transport)[-1] == "RECEIPT:sub"
        session.receive(_frame("UNSUBSCRIBE", {**headers, "receipt": "unsub"}))
        await turn()
        assert _commands(transport)[-1] == "RECEIPT:sub", "UNSUBSCRIBE receipted before the delete"
        store.complete()
        await turn()
        assert _commands(transport)[-1] == "RECEIPT:unsub"

    run(test)


def test_subscribe_to_an_existing_queue_is_receipted_at_once() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        session.receive(_frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s1", "receipt": "a"}))
        store.complete()
        await turn()
        session.receive(_frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s2", "receipt": "b"}))
        assert _commands(transport)[-1] == "RECEIPT:b"

    run(test)


# -- BLOCK: the read-ahead --------------------------------------------------------------------


BLOCK = {"#": {"max-size-messages": 2, "address-full-policy": "BLOCK"}}


def test_blocked_send_holds_later_frames_but_an_ack_goes_ahead_and_unblocks_it() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        session.receive(_frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s",
                                             "ack": "client-individual"}))
        for n in range(3):
            session.receive(_frame("SEND", {"destination": "/queue/q", "receipt": f"r{n}"}, f"m{n}"))
        assert session.blocked
        session.receive(_frame("BEGIN", {"transaction": "t", "receipt": "begin"}))
        messages = [f for f in transport.frames() if f.command == "MESSAGE"]
        assert [m.body for m in messages] == [b"m0", b"m1"]
        assert "RECEIPT:begin" not in _commands(transport), "a frame behind a blocked SEND went ahead"
        session.receive(_frame("ACK", {"id": messages[0].headers["ack"], "receipt": "ack"}))
        store.complete()
        await turn()
        commands = _commands(transport)
        assert commands.index("RECEIPT:ack") < commands.index("RECEIPT:r2") < commands.index("RECEIPT:begin")
        assert not session.blocked

    run(test, BLOCK)


def test_read_ahead_is_bounded_then_the_socket_is_not_read() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        session.receive(_frame("SEND", {"destination": "/queue/q"}, "a"))
        session.receive(_frame("SEND", {"destination": "/queue/q"}, "b"))
        session.receive(_frame("SEND", {"destination": "/queue/q"}, "c"))
        assert session.blocked and not transport.paused
        chunk = _frame("SEND", {"destination": "/queue/q"}, "x" * 65536)
        for _ in range(stomp_session.READ_AHEAD_BYTES // 65536 + 1):
            session.receive(chunk)
        assert transport.paused
        queue = broker.queues["q"]
        session.receive(_frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s"}))  # held
        assert not queue.consumers
        auto = StompSession(broker, StompConnection(), RecordingTransport())
        auto.transport.session = auto  # type: ignore[attr-defined]
        auto.receive(_frame("CONNECT", {"accept-version": "1.2"}))
        auto.receive(_frame("SUBSCRIBE", {"destination": "/queue/q", "id": "drain"}))  # auto ack
        for _ in range(40):
            await turn()
            if not transport.paused and not session.blocked:
                break
        assert not transport.paused and not session.blocked

    run(test, BLOCK)


def test_a_heart_beat_only_connection_is_never_held() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        for n in range(3):
            session.receive(_frame("SEND", {"destination": "/queue/q"}, f"m{n}"))
        assert session.blocked
        for _ in range(10_000):
            session.receive(b"\n")
        assert not transport.paused

    run(test, BLOCK)


# -- transactions and acks ------------------------------------------------------------------


def test_nack_in_a_transaction_waits_for_commit() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        session.receive(_frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s",
                                             "ack": "client-individual"}))
        session.receive(_frame("SEND", {"destination": "/queue/q"}, "m"))
        (message,) = [f for f in transport.frames() if f.command == "MESSAGE"]
        assert message.headers["redelivered"] == "false"
        session.receive(_frame("BEGIN", {"transaction": "t"}))
        session.receive(_frame("NACK", {"id": message.headers["ack"], "transaction": "t"}))
        assert len([f for f in transport.frames() if f.command == "MESSAGE"]) == 1
        session.receive(_frame("COMMIT", {"transaction": "t"}))
        again = [f for f in transport.frames() if f.command == "MESSAGE"]
        assert len(again) == 2 and again[1].headers["redelivered"] == "true"

    run(test)


def test_stomp_1_1_acks_the_same_message_on_two_subscriptions() -> None:
    async def test(session, transport, store, broker) -> None:  # type: ignore[no-untyped-def]
        old = StompSession(broker, StompConnection(), RecordingTransport())
        old.transport.session = old  # type: ignore[attr-defined]
        old.receive(_frame("CONNECT", {"accept-version": "1.1"}))
        for sub_id in ("a", "b"):
            old.receive(_frame("SUBSCRIBE", {"destination": "/topic/t", "id": sub_id,
                                             "ack": "client-individual"}))
        old.receive(_frame("SEND", {"destination": "/topic/t"}, "m"))
        messages = [f for f in old.transport.frames() if f.command == "MESSAGE"]  # type: ignore[attr-defined]
        assert len(messages) == 2
        for frame in messages:
            old.receive(_frame("ACK", {"message-id": frame.headers["message-id"],
                                       "subscription": frame.headers["subscription"],
                                       "receipt": frame.headers["subscription"]}))
        store.complete()  # an ACK's receipt waits for the flush
        await turn()
        commands = [f.command for f in old.transport.frames()]  # type: ignore[attr-defined]
        assert commands.count("RECEIPT") == 2 and "ERROR" not in commands
        assert not old._msgid_acks

    run(test)

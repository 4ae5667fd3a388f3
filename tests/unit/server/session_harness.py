"""A StompSession over a real Broker, driven in-process with no socket and no event loop:
a `ManualLoop` for its scheduler, a store whose writes complete when the test says, and a
transport that records what the session asks of it."""

from __future__ import annotations

import asyncio
from typing import Any

from manual_loop import ManualLoop

from pagemq.core.broker import Broker
from pagemq.core.settings import AddressSettingsRepository
from pagemq.core.transactions import Transaction
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import Frame, encode_frame
from pagemq.protocol.stomp.parser import FrameParser
from pagemq.server.stomp_session import StompSession
from pagemq.storage.api import MemoryStore, QueueRecord


class HeldStore(MemoryStore):
    """Durable writes (messages, flushes) complete only when `complete()` is called."""

    def __init__(self, loop: ManualLoop) -> None:
        super().__init__()
        self.loop = loop
        self.pending: list[asyncio.Future[None]] = []
        self.refuse: OSError | None = None
        self.queues: list[str] = []

    def _future(self) -> asyncio.Future[None]:
        future = self.loop.create_future()
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
        """Every write so far is done (or failed); their callbacks run on the next turn."""
        pending, self.pending = self.pending, []
        for future in pending:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


class SlowCommitBroker(Broker):
    """With `hold_commits`, a COMMIT takes effect (`tx.applied`) only when the test calls
    `apply_commits()`, as one that pages does once its page files are written."""

    def __init__(self, *args: Any, loop: ManualLoop, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loop = loop
        self.hold_commits = False
        self.applying: list[asyncio.Future[None]] = []

    def commit(self, tx: Transaction) -> asyncio.Future[None] | None:
        future = super().commit(tx)
        if self.hold_commits:
            tx.applied = self.loop.create_future()
            self.applying.append(tx.applied)
        return future

    def apply_commits(self) -> None:
        applying, self.applying = self.applying, []
        for future in applying:
            future.set_result(None)


class RecordingTransport:
    def __init__(self) -> None:
        self.session: StompSession | None = None
        self.out = bytearray()
        self.paused = False
        self.closed = False
        self.flushes_asked = 0

    def write(self, data: bytes) -> None:
        self.out += data

    def schedule_flush(self) -> None:
        self.flushes_asked += 1

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

    def commands(self) -> list[str]:
        """`COMMAND:receipt-id` per frame written so far."""
        return [f"{f.command}:{f.headers.get('receipt-id', '')}" for f in self.frames()]

    def messages(self) -> list[Frame]:
        return [f for f in self.frames() if f.command == "MESSAGE"]


def frame(command: str, headers: dict[str, str], body: bytes | str = b"") -> bytes:
    raw = body.encode() if isinstance(body, str) else body
    return encode_frame(command, headers, raw, version="1.2")


class Harness:
    """One broker and its loop; `session` is a connected 1.2 client with client-id c1."""

    def __init__(self, settings: dict[str, dict[str, object]] | None = None, **broker_kwargs: Any) -> None:
        repository = AddressSettingsRepository()
        for match, values in (settings or {}).items():
            repository.add(match, values)
        self.loop = ManualLoop()
        self.store = HeldStore(self.loop)
        self.broker = SlowCommitBroker(repository, store=self.store, loop=self.loop, **broker_kwargs)
        self.session, self.transport = self.connect(client_id="c1")

    def connect(self, version: str = "1.2", client_id: str | None = None,
                ) -> tuple[StompSession, RecordingTransport]:
        transport = RecordingTransport()
        session = StompSession(self.broker, StompConnection(), transport, self.loop)
        transport.session = session
        headers = {"accept-version": version}
        if client_id is not None:
            headers["client-id"] = client_id
        session.receive(frame("CONNECT", headers))
        return session, transport

    def receive(self, command: str, headers: dict[str, str], body: bytes | str = b"") -> None:
        self.session.receive(frame(command, headers, body))

"""The session's security hook, turn by turn: frames behind CONNECT wait for the password
check, a failed login is one ERROR, a denied frame changes nothing (docs/security.md)."""

from __future__ import annotations

import asyncio

from session_harness import Harness, RecordingTransport, frame

from pagemq.protocol.stomp.connection import StompConnection
from pagemq.security.access import PermissionDenied
from pagemq.security.users import User
from pagemq.server.stomp_session import StompSession


class FakeAccess:
    """A SessionAccess whose password check completes when the test says; `denied` holds
    the (permission, address) pairs refused."""

    def __init__(self, harness: Harness) -> None:
        self.loop = harness.loop
        self.check: asyncio.Future[User | None] | None = None
        self.denied: set[tuple[str, str]] = set()
        self.asked: list[tuple[str, str]] = []
        self.user: str | None = None

    def authenticate(self, login: str | None, passcode: str | None) -> asyncio.Future[User | None]:
        self.check = self.loop.create_future()
        return self.check

    def verify(self, ok: bool) -> None:
        assert self.check is not None
        self.user = "alice" if ok else None
        self.check.set_result(User("alice", "x", frozenset()) if ok else None)

    def require(self, permission: str, address: str) -> None:
        self.asked.append((permission, address))
        if (permission, address) in self.denied:
            raise PermissionDenied(f"User alice lacks permission {permission} on address {address}")


def _secured(h: Harness) -> tuple[StompSession, RecordingTransport, FakeAccess]:
    access = FakeAccess(h)
    transport = RecordingTransport()
    session = StompSession(h.broker, StompConnection(), transport, h.loop, access)  # type: ignore[arg-type]
    transport.session = session
    return session, transport, access


def test_frames_behind_connect_wait_for_the_password_check_then_run_in_order() -> None:
    h = Harness()
    session, transport, access = _secured(h)
    session.receive(frame("CONNECT", {"accept-version": "1.2", "login": "alice", "passcode": "pw"})
                    + frame("SEND", {"destination": "/queue/q", "receipt": "s"}, "m")
                    + frame("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "receipt": "sub"}))
    h.loop.run_ready()
    assert transport.commands() == [] and "q" not in h.broker.addresses
    access.verify(True)
    h.loop.run_ready()
    h.store.complete()
    h.loop.run_ready()
    commands = transport.commands()
    assert commands[:2] == ["CONNECTED:", "RECEIPT:s"] and sorted(commands[2:]) == ["MESSAGE:", "RECEIPT:sub"]
    assert access.asked == [("send", "q"), ("create-address", "q"), ("create-durable-queue", "q"),
                            ("consume", "q")]


def test_a_failed_login_is_one_error_and_nothing_behind_it_runs() -> None:
    h = Harness()
    session, transport, access = _secured(h)
    session.receive(frame("CONNECT", {"accept-version": "1.2", "login": "alice", "passcode": "no"})
                    + frame("SEND", {"destination": "/queue/q", "receipt": "s"}, "m"))
    access.verify(False)
    h.loop.run_ready()
    frames = transport.frames()
    assert [f.command for f in frames] == ["ERROR"]
    assert frames[0].headers["message"] == "Authentication failed"
    assert transport.closed and "q" not in h.broker.addresses and access.asked == []


def test_a_denied_frame_changes_nothing_and_its_error_names_user_permission_and_address() -> None:
    h = Harness()
    session, transport, access = _secured(h)
    session.receive(frame("CONNECT", {"accept-version": "1.2", "client-id": "c9"}))
    access.verify(True)
    h.loop.run_ready()
    access.denied = {("create-durable-queue", "events")}
    h.broker.ensure_address("events", "multicast", auto=False)
    session.receive(frame("SUBSCRIBE", {"destination": "/topic/events", "id": "1", "receipt": "r",
                                        "durable-subscription-name": "d"}))
    h.loop.run_ready()
    error = transport.frames()[-1]
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r"
    assert error.headers["message"] == "User alice lacks permission create-durable-queue on address events"
    assert "c9.d" not in h.broker.queues and not h.broker.addresses["events"].queues

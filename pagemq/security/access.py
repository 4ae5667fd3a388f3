"""Who may connect and what they may do: one `Access` per broker, one `SessionAccess` per
connection (it knows its peer address and, once authenticated, its user).

Authentication runs scrypt (tens of milliseconds) in a small thread pool of its own, never
on the event loop, and remembers successes: the key of the cache is the user name and an
HMAC of the password under a key made at process start (the password itself is never kept),
and an entry counts only while the user's stored hash is the one it was verified against,
so `pagemq user passwd` invalidates it. Identical checks under way are shared: a burst of
connections with one user's credentials (a pool starting) runs scrypt once. An unknown
user is checked against a dummy hash, so both failures cost the same time and get the same
answer. Failures from one peer address (host, any port) past the first FAILURES_FREE (a user
mistyping a password, a test suite trying bad credentials) are answered after a delay that
doubles with each one (50 ms up to 5 s); the count is forgotten after 5 minutes without
failures, or at a successful check of a password.

The passwords one address sends are checked one at a time, and a failure's delay is waited
before that address's next check begins: else an attacker would open many connections at
once and guess at the speed of the hash, whatever the delay (each delay would only postpone
its own answer). At most GATE_WAITERS attempts of one address wait their turn; more are
refused without a check (after the same delay), so a flood holds no unbounded queue.
A password verified before (the cache) is answered at once, without waiting its turn.

Roles are looked up in the current users snapshot at every check, so a role removed from
the users file is taken away from connections already open.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

from pagemq.core.errors import BrokerError
from pagemq.security.hashing import hash_password, verify_password
from pagemq.security.permissions import SecuritySettings
from pagemq.security.users import User, Users

__all__ = ["AUTHENTICATION_FAILED", "Access", "PermissionDenied", "SessionAccess"]

log = logging.getLogger("pagemq.security")

AUTHENTICATION_FAILED = "Authentication failed"
HASH_THREADS = 2  # scrypt takes ~16 MiB each: a flood of logins must not take more
CACHE_LIMIT = 10_000
FAILURES_FREE = 5  # failures from one address answered without a delay
FAILURE_DELAY_BASE = 0.05
FAILURE_DELAY_MAX = 5.0
FAILURE_MEMORY = 300.0  # seconds without a failure after which a peer starts afresh
FAILURE_PEERS_LIMIT = 10_000
GATE_WAITERS = 64  # attempts of one address waiting for their check; more are refused unchecked
_NO_ROLES: frozenset[str] = frozenset()


class PermissionDenied(BrokerError):
    code = "forbidden"
    http_status = 403


class _Gate:
    """One peer address's turn at checking passwords: one check (and its failure delay) at
    a time; `waiting` counts the attempts holding or waiting for it."""

    __slots__ = ("lock", "waiting")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.waiting = 0


class Access:
    def __init__(self, settings: SecuritySettings, users: Users) -> None:
        self.settings = settings
        self.users = users
        self._key = secrets.token_bytes(32)
        self._verified: dict[tuple[str, bytes], str] = {}
        # Checks under way, so a burst of connections with the same credentials (an
        # application starting its pool) runs scrypt once, not once per connection.
        self._checking: dict[tuple[str, bytes, str], asyncio.Future[bool]] = {}
        self._failures: dict[str, tuple[int, float]] = {}
        self._gates: dict[str, _Gate] = {}  # by peer host, while an attempt of it is under way
        self._executor = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="pagemq-auth")
        # Unknown users are checked against this, so they cost what a wrong password costs.
        self._dummy_hash = hash_password(secrets.token_hex(16))

    def replace_users(self, users: Users) -> None:
        self.users = users

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def for_peer(self, peer: str) -> SessionAccess:
        return SessionAccess(self, peer)

    # -- authentication -------------------------------------------------------------------

    def authenticate(self, login: str | None, password: str | None,
                     peer: str) -> asyncio.Future[User | None]:
        """The user once `password` is verified, or None after the failure delay."""
        login, password = login or "", password or ""
        user = self.users.get(login)
        if user is not None and self._verified.get(self._cache_key(login, password)) == user.password_hash:
            done: asyncio.Future[User | None] = asyncio.get_running_loop().create_future()
            done.set_result(user)
            return done
        return asyncio.ensure_future(self._verify(login, password, peer))

    async def _verify(self, login: str, password: str, peer: str) -> User | None:
        """Waits for the peer address's turn (see the module docstring), then checks; joins
        an identical check under way instead (it costs no hash: a pool starting)."""
        user, stored, cache_key = self._lookup(login, password)
        shared = self._checking.get((*cache_key, stored))
        if shared is not None:
            matched = await asyncio.shield(shared)  # one waiter gone does not cancel the others
            return await self._conclude(matched, user, stored, cache_key, login, peer)
        host = _host(peer)
        gate = self._gates.get(host)
        if gate is None:
            gate = self._gates[host] = _Gate()
        if gate.waiting >= GATE_WAITERS:
            await self._failed(login, peer, unchecked=True)
            return None
        gate.waiting += 1
        try:
            async with gate.lock:
                return await self._check(login, password, peer)
        finally:
            gate.waiting -= 1
            if not gate.waiting and self._gates.get(host) is gate:
                del self._gates[host]

    def _lookup(self, login: str, password: str) -> tuple[User | None, str, tuple[str, bytes]]:
        """The user, the hash to check against (a dummy one for an unknown user), the cache key."""
        user = self.users.get(login)
        stored = user.password_hash if user is not None else self._dummy_hash
        return user, stored, self._cache_key(login, password)

    async def _check(self, login: str, password: str, peer: str) -> User | None:
        user, stored, cache_key = self._lookup(login, password)  # the users may have changed
        if user is not None and self._verified.get(cache_key) == stored:
            return await self._conclude(True, user, stored, cache_key, login, peer)  # verified meanwhile
        check_key = (*cache_key, stored)
        checking = self._checking.get(check_key)
        if checking is None:
            loop = asyncio.get_running_loop()
            checking = loop.run_in_executor(self._executor, verify_password, password, stored)
            self._checking[check_key] = checking
            checking.add_done_callback(lambda _done: self._checking.pop(check_key, None))
        matched = await asyncio.shield(checking)  # one waiter gone does not cancel the others
        return await self._conclude(matched, user, stored, cache_key, login, peer)

    async def _conclude(self, matched: bool, user: User | None, stored: str, cache_key: tuple[str, bytes],
                        login: str, peer: str) -> User | None:
        if matched and user is not None:
            if len(self._verified) >= CACHE_LIMIT:
                self._verified.clear()
            self._verified[cache_key] = stored
            self._failures.pop(_host(peer), None)
            return user
        await self._failed(login, peer)
        return None

    async def _failed(self, login: str, peer: str, *, unchecked: bool = False) -> None:
        """Note and log a failure, then wait its delay (holding the address's turn, when the
        password was checked)."""
        delay, count = self._note_failure(peer)
        log.warning("authentication failed from %s (login %r; failure %d from this address; "
                    "answered after %.2fs%s)", peer, login, count, delay,
                    "; not checked: too many attempts from this address waiting" if unchecked else "")
        if delay:
            await asyncio.sleep(delay)

    def _cache_key(self, login: str, password: str) -> tuple[str, bytes]:
        digest = hmac.new(self._key, f"{login}\0{password}".encode(), hashlib.sha256).digest()
        return login, digest

    def _note_failure(self, peer: str) -> tuple[float, int]:
        host = _host(peer)
        now = time.monotonic()
        count, last = self._failures.get(host, (0, now))
        if now - last > FAILURE_MEMORY:
            count = 0
        count += 1
        if host not in self._failures and len(self._failures) >= FAILURE_PEERS_LIMIT:
            self._failures.pop(next(iter(self._failures)))
        self._failures[host] = (count, now)
        delayed = count - FAILURES_FREE
        delay = 0.0 if delayed <= 0 else min(FAILURE_DELAY_MAX, FAILURE_DELAY_BASE * 2 ** (delayed - 1))
        return delay, count

    # -- authorization --------------------------------------------------------------------

    def roles_of(self, user_name: str) -> frozenset[str]:
        user = self.users.get(user_name)
        return user.roles if user is not None else _NO_ROLES

    def allowed(self, user_name: str, permission: str, address: str) -> bool:
        return not self.roles_of(user_name).isdisjoint(self.settings.roles(permission, address))

    def require(self, user_name: str, permission: str, address: str) -> None:
        if not self.allowed(user_name, permission, address):
            raise PermissionDenied(f"User {user_name} lacks permission {permission} on address {address}")


class SessionAccess:
    """One connection's view: its peer, and its user once authenticated."""

    __slots__ = ("_access", "peer", "user")

    def __init__(self, access: Access, peer: str) -> None:
        self._access = access
        self.peer = peer
        self.user: str | None = None

    def authenticate(self, login: str | None, passcode: str | None) -> asyncio.Future[User | None]:
        future = self._access.authenticate(login, passcode, self.peer)
        if future.done():
            self._note_user(future)
        else:  # runs before any callback the caller adds
            future.add_done_callback(self._note_user)
        return future

    def _note_user(self, future: asyncio.Future[User | None]) -> None:
        if not future.cancelled() and future.exception() is None and (user := future.result()):
            self.user = user.name

    def require(self, permission: str, address: str) -> None:
        if self.user is None:
            raise PermissionDenied(f"not authenticated: permission {permission} on address {address}")
        self._access.require(self.user, permission, address)


def _host(peer: str) -> str:
    """`1.2.3.4:5678` -> `1.2.3.4`, `[::1]:5678` -> `::1` (failures count per address)."""
    host, sep, _port = peer.rpartition(":")
    return host.strip("[]") if sep else peer

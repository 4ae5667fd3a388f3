"""One log line when a STOMP connection opens and one when it closes, and their counts.

Operators grep a broker's log for a client: every line names the peer's address, the user
(CONNECT's `login` header, `-` when none was given) and the session id that the broker's
other lines about that connection use. The open line is written when CONNECT is accepted
(before it the user is unknown); a socket closed without a successful CONNECT gets only its
close line, saying so. The fields are also passed as `extra`, so `--log-format json` gives
them as fields of their own.
"""

from __future__ import annotations

import logging
import time

__all__ = ["ConnectionLog", "format_peer"]

log = logging.getLogger("pagemq.connections")


def format_peer(peername: object) -> str:
    """`host:port` (`[v6]:port`) of a transport's `peername`; `?` when unknown (a Unix socket)."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return "?"


class ConnectionLog:
    """Counts of the acceptor's connections (for /metrics) and their open/close lines."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0

    def figures(self) -> tuple[int, int, int]:
        """(open now, accepted since start, closed since start)."""
        return self.opened - self.closed, self.opened, self.closed

    def accepted(self) -> float:
        """A socket was accepted; returns its start time (for the close line's duration)."""
        self.opened += 1
        return time.monotonic()

    def connected(self, peer: str, session_id: str, user: str | None, version: str | None,
                  client_id: str | None) -> None:
        fields = {"peer": peer, "user": user, "session": session_id, "stomp_version": version,
                  "client_id": client_id}
        log.info("connection opened: peer=%s user=%s session=%s version=%s%s", peer, user or "-",
                 session_id, version, f" client-id={client_id}" if client_id else "", extra=fields)

    def lost(self, peer: str, session_id: str, user: str | None, connected: bool, started: float,
             exc: BaseException | None) -> None:
        self.closed += 1
        seconds = round(time.monotonic() - started, 3)
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "closed"
        fields = {"peer": peer, "user": user, "session": session_id, "duration_s": seconds,
                  "reason": reason, "connected": connected}
        log.info("connection closed%s: peer=%s user=%s session=%s after %.3fs (%s)",
                 "" if connected else " before CONNECT", peer, user or "-", session_id, seconds,
                 reason, extra=fields)

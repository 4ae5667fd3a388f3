"""What a listener enforces before a session does anything: how many connections it holds
(`max-connections`), how long a socket may stay without a CONNECT frame (`connect-timeout`,
STOMP), and the `Access` its sessions authenticate and authorize with.

A refused connection is accepted and closed at once with a reply saying why (a STOMP ERROR
frame, an HTTP 503), so a client fails fast instead of waiting on a backlog; refusals are
logged once per burst (the first, then their count when the listener accepts again), so a
flood cannot flood the log too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pagemq.security.access import Access

log = logging.getLogger("pagemq.security")


@dataclass
class ListenerPolicy:
    name: str  # the config key: "stomp", "stomp-tls", "http"
    max_connections: int = -1  # -1: no limit
    connect_timeout: float = 0.0  # seconds; 0: none
    access: Access | None = None  # None: security disabled
    _refused: int = field(default=0, repr=False)

    def admit(self, open_connections: int) -> bool:
        """Whether one more connection may be served; logs refusals once per burst."""
        if self.max_connections < 0 or open_connections < self.max_connections:
            if self._refused:
                log.warning("%s: accepting connections again after refusing %d over max-connections %d",
                            self.name, self._refused, self.max_connections)
                self._refused = 0
            return True
        if not self._refused:
            log.warning("%s: max-connections %d reached, refusing new connections",
                        self.name, self.max_connections)
        self._refused += 1
        return False

    def refusal(self) -> str:
        return f"too many connections: {self.name} allows {self.max_connections} (max-connections)"

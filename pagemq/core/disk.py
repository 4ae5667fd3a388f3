"""Whether the disk may take more messages: the core's side of the disk limits (seed 000 §9).

The broker stops taking new messages before the disk holding its journal or page files is
full, because a broker that runs out of disk space can no longer promise anything. Two
things make the disk *full* here, each a named *reason* set by the server:

- a disk scan (every `disk-scan-period`) found a filesystem past `max-disk-usage` percent or
  under `min-disk-free` bytes free (`server/disk_monitor.py`);
- a write hit ENOSPC or EDQUOT (the journal or a page file), until space is seen again.

While any reason stands, producers meet `disk-full-policy`: FAIL refuses each send with a
`DiskFull` error naming the limit (nothing is stored), BLOCK raises `Blocked`, upon which the
session holds that connection's frames and stops reading its socket, as for an address's
BLOCK policy, until `clear` wakes it. Consumers are not touched: acknowledgements are small
and are what frees the disk (drained pages are deleted). Messages the broker moves itself
(dead letters, expiry) and management requests pass, as Artemis lets them.

The core never looks at the disk: the state is set from outside, so it is plain to test.

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pagemq.core.errors import DiskFull
from pagemq.core.waiters import Waiters

__all__ = ["BLOCK", "FAIL", "DiskGuard"]

log = logging.getLogger("pagemq.disk")

BLOCK, FAIL = "BLOCK", "FAIL"


class DiskGuard:
    """The reasons the disk is full now, the policy producers meet, and who waits."""

    __slots__ = ("_reasons", "_waiters", "blocked_sends", "failed_sends", "filesystems", "full",
                 "limits", "policy")

    def __init__(self, policy: str = BLOCK) -> None:
        self.policy = policy
        # What the last disk scan saw (plain data, set by the server's monitor) and the
        # limits it applied: shown by the management views.
        self.limits: dict[str, object] = {}
        self.filesystems: list[dict[str, object]] = []
        self._reasons: dict[str, str] = {}
        self.full = False  # any reason stands (read for every producer's message: a field)
        self._waiters = Waiters()
        self.failed_sends = 0  # refused by FAIL since start
        self.blocked_sends = 0  # held by BLOCK since start

    @property
    def reasons(self) -> dict[str, str]:
        """source -> what was found (a copy), e.g. {"limit:/data": "..."}."""
        return dict(self._reasons)

    def set(self, source: str, reason: str) -> None:
        """`source` (a filesystem's limit, a writer that hit ENOSPC) says the disk is full."""
        if self._reasons.get(source) == reason:
            return
        if source not in self._reasons:
            log.warning("disk full: %s; producers now %s (disk-full-policy %s)", reason,
                        "blocked" if self.policy == BLOCK else "refused", self.policy)
        self._reasons[source] = reason
        self.full = True

    def clear(self, source: str) -> None:
        """`source` sees space again; once no reason is left, blocked producers go on."""
        reason = self._reasons.pop(source, None)
        if reason is None:
            return
        if self._reasons:
            return
        self.full = False
        log.warning("disk space is back (was: %s); producers resume", reason)
        self._waiters.wake()

    def admit(self) -> None:
        """Called for a producer's message when the disk is full, before anything is stored:
        FAIL raises `DiskFull`; for BLOCK it counts the held send and returns (the router
        then raises `Blocked`)."""
        if not self._reasons:
            return
        if self.policy == FAIL:
            self.failed_sends += 1
            reason = next(iter(self._reasons.values()))
            raise DiskFull(f"disk full: {reason} (disk-full-policy FAIL): message not stored")
        self.blocked_sends += 1

    def wait(self, retry: Callable[[], bool]) -> None:
        """Register `retry`; it is called when the disk is no longer full and removed once it
        returns True."""
        self._waiters.add(retry)

    def cancel(self, retry: Callable[[], bool]) -> None:
        self._waiters.cancel(retry)

    def view(self) -> dict[str, object]:
        return {
            "disk_full": self.full,
            "disk_full_policy": self.policy,
            **self.limits,
            "reasons": sorted(self._reasons.values()),
            "filesystems": [dict(fs) for fs in self.filesystems],
            "failed_sends": self.failed_sends,
            "blocked_sends": self.blocked_sends,
        }

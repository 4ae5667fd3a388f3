"""Follow the users file: a change is picked up within about a second, without a restart.

Polled (stat every `period`, off the hot path: one timer per broker) rather than watched
with inotify, which misses editors that replace the file and does not exist everywhere.
The file is read and parsed in a thread. A broken file (bad TOML, a plain-text password)
keeps the last good users and is reported once with an ERROR log line per change.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from pagemq.security.users import Users, UsersFileError, load_users

__all__ = ["UsersWatcher"]

log = logging.getLogger("pagemq.security")

POLL_PERIOD = 1.0
_Signature = tuple[int, int, int, int] | None


def _signature(path: Path) -> _Signature:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_ctime_ns


class UsersWatcher:
    def __init__(self, path: Path, on_change: Callable[[Users], None], *,
                 period: float = POLL_PERIOD) -> None:
        self.path = path
        self._on_change = on_change
        self._period = period
        self._seen = _signature(path)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            await self.check()

    async def check(self) -> bool:
        """Reload if the file changed since last looked at; True when new users took effect."""
        signature = _signature(self.path)
        if signature == self._seen:
            return False
        self._seen = signature
        if signature is None:
            log.error("users file %s is gone: keeping the last good users", self.path)
            return False
        try:
            users = await asyncio.to_thread(load_users, self.path)
        except UsersFileError as exc:
            log.error("users file not reloaded, keeping the last good users: %s", exc)
            return False
        self._on_change(users)
        log.info("users file %s reloaded: %d users", self.path, len(users))
        return True

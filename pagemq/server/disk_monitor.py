"""The disk scan: the filesystems holding the journal and the page files, every
`disk-scan-period`, against `max-disk-usage` and `min-disk-free` (seed 000 §9).

`statvfs` runs in a worker thread (on a network or FUSE filesystem it can take long), and
only the verdict comes back to the loop, where it sets or clears the core's `DiskGuard`
reasons. Usage is what `df` shows as Use%: used / (used + usable), usable being what an
unprivileged process may still write (`f_bavail`). (Artemis' `FileStoreMonitor` divides by
the total size instead, so root's reserve and, on overlay or thin-provisioned filesystems,
space that is neither used nor available count as used: a disk `df` shows 36 % full reads 74 %
there, and producers block at 90 % of a disk far from full.)
`min-disk-free` wins when both limits are set.

Writes that hit ENOSPC or EDQUOT are reported here too (`no_space`): the disk is full at
once, whatever the limits say, until a scan sees room on that filesystem again
(`RESUME_FREE` usable bytes and within the limits; after EDQUOT, which statvfs cannot see,
the next scan simply lets writes try again). The journal reports its own recovery: it
keeps a batch that found no space and writes it again itself (`journal_space`).

Loop-only, except `scan_filesystems`, which runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pagemq.core.disk import DiskGuard
from pagemq.units import format_size

__all__ = ["RESUME_FREE", "DiskMonitor", "FsUsage", "scan_filesystems"]

log = logging.getLogger("pagemq.disk")

# After a write found no space, usable bytes a scan must see before producers may resume.
RESUME_FREE = 1 << 20
JOURNAL_SOURCE = "no-space:journal"


@dataclass(frozen=True, slots=True)
class FsUsage:
    """One filesystem as a scan saw it: which broker directories it holds."""

    device: int
    roles: tuple[str, ...]  # "journal", "paging"
    path: str  # the first of its directories, to name it in messages
    total_bytes: int
    free_bytes: int  # usable by the broker (f_bavail)
    error: str | None = None  # statvfs failed: the filesystem is not judged
    used_bytes: int | None = None  # (f_blocks - f_bfree); None: total - free

    @property
    def used_percent(self) -> float:
        used = self.used_bytes if self.used_bytes is not None else self.total_bytes - self.free_bytes
        if used + self.free_bytes <= 0:
            return 0.0
        return 100.0 * used / (used + self.free_bytes)


def scan_filesystems(directories: Mapping[str, Path],
                     statvfs: Callable[[Path], os.statvfs_result] = os.statvfs) -> list[FsUsage]:
    """Worker thread: one `FsUsage` per filesystem among `directories` (role -> path)."""
    by_device: dict[int, list[tuple[str, Path]]] = {}
    for role, path in directories.items():
        try:
            device = os.stat(path).st_dev
        except OSError:
            device = -len(by_device) - 1  # not there (yet): judged alone, by its statvfs error
        by_device.setdefault(device, []).append((role, path))
    found = []
    for device, members in by_device.items():
        roles = tuple(role for role, _ in members)
        path = members[0][1]
        try:
            stat = statvfs(path)
        except OSError as exc:
            found.append(FsUsage(device, roles, str(path), 0, 0, error=exc.strerror or str(exc)))
            continue
        found.append(FsUsage(device, roles, str(path), stat.f_blocks * stat.f_frsize,
                             stat.f_bavail * stat.f_frsize,
                             used_bytes=(stat.f_blocks - stat.f_bfree) * stat.f_frsize))
    return found


def _approx(size: int) -> str:
    """Free space as a person reads it (limits keep their exact config spelling)."""
    for suffix, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {suffix}"
    return f"{size} bytes"


class DiskMonitor:
    """Scans on a period, keeps the guard's limit reasons up to date, and hears of
    writes that found no space."""

    def __init__(self, guard: DiskGuard, directories: Mapping[str, Path], *, max_disk_usage: int,
                 min_disk_free: int, period: float,
                 statvfs: Callable[[Path], os.statvfs_result] = os.statvfs) -> None:
        self.guard = guard
        self.directories = dict(directories)
        self.max_disk_usage = max_disk_usage
        self.min_disk_free = min_disk_free
        self.period = period
        self._statvfs = statvfs
        self._no_space: dict[str, tuple[str, int]] = {}  # guard source -> (path, errno)
        self._over: set[str] = set()  # guard sources of limits crossed at the last scan
        self.scans = 0
        guard.limits = {
            "max_disk_usage": max_disk_usage,
            "min_disk_free": min_disk_free,
            "disk_scan_period_seconds": period,
            "limit_in_force": self._limit_in_force(),
        }

    def _limit_in_force(self) -> str | None:
        if self.min_disk_free >= 0:
            return "min-disk-free"
        if self.max_disk_usage >= 0:
            return "max-disk-usage"
        return None

    async def run(self) -> None:
        """Scan now, then every period, until cancelled."""
        while True:
            await self.scan()
            await asyncio.sleep(self.period)

    async def scan(self) -> None:
        usages = await asyncio.to_thread(scan_filesystems, self.directories, self._statvfs)
        self.apply(usages)

    def apply(self, usages: list[FsUsage]) -> None:
        """Set or clear the guard's reasons from one scan's figures."""
        self.scans += 1
        over: set[str] = set()
        shown = []
        for usage in usages:
            source = f"limit:{usage.path}"
            problem = self._over_limit(usage)
            if problem is not None:
                over.add(source)
                self.guard.set(source, problem)
            shown.append({
                "path": usage.path, "directories": list(usage.roles),
                "total_bytes": usage.total_bytes, "free_bytes": usage.free_bytes,
                "used_percent": round(usage.used_percent, 2), "over_limit": problem is not None,
                **({"error": usage.error} if usage.error else {}),
            })
            self._resume_writes(usage, problem is None)
        for source in self._over - over:
            self.guard.clear(source)
        self._over = over
        self.guard.filesystems = shown

    def _over_limit(self, usage: FsUsage) -> str | None:
        """What limit `usage` crosses, in words that name it; None when within them."""
        if usage.error is not None:
            return None
        where = f"{usage.path} ({', '.join(usage.roles)})"
        if self.min_disk_free >= 0:
            if usage.free_bytes < self.min_disk_free:
                return (f"{where} has {_approx(usage.free_bytes)} free, under min-disk-free "
                        f"{format_size(self.min_disk_free)}")
            return None
        if self.max_disk_usage >= 0 and usage.used_percent > self.max_disk_usage:
            return (f"{where} is {usage.used_percent:.1f}% used, over max-disk-usage "
                    f"{self.max_disk_usage}%")
        return None

    def _resume_writes(self, usage: FsUsage, within_limits: bool) -> None:
        """Writes that found no space on this filesystem may go on once there is room."""
        for source, (path, code) in list(self._no_space.items()):
            if not self._on(path, usage):
                continue
            roomy = usage.error is None and usage.free_bytes >= RESUME_FREE and within_limits
            if code == errno.EDQUOT or roomy:  # a quota statvfs cannot see: let writes try
                del self._no_space[source]
                self.guard.clear(source)

    def _on(self, path: str, usage: FsUsage) -> bool:
        try:
            return os.stat(path).st_dev == usage.device
        except OSError:
            return path == usage.path

    # -- reports from the writers ------------------------------------------------------------

    def no_space(self, source: str, path: Path | str, error: OSError) -> None:
        """A write to `path` failed with ENOSPC/EDQUOT: the disk is full from now on, until a
        scan sees room again (or, for the journal, until its retried write succeeds)."""
        key = f"no-space:{source}"
        directory = str(path if Path(path).is_dir() else Path(path).parent)
        self._no_space[key] = (directory, error.errno or errno.ENOSPC)
        self.guard.set(key, f"a write to {path} failed: {error.strerror or error} "
                            f"(no space left on the device)")

    def journal_space(self, error: OSError | None) -> None:
        """The journal writer's report: its batch found no space (`error`), or, None, the
        batch it kept is now written and the journal takes appends again."""
        if error is None:
            self.guard.clear(JOURNAL_SOURCE)
            return
        directory = str(self.directories.get("journal", ""))
        self.guard.set(JOURNAL_SOURCE, f"a journal write in {directory} failed: "
                                       f"{error.strerror or error} (no space left on the device)")

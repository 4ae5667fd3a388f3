"""The disk scan's verdicts (server/disk_monitor.py), from made-up statvfs figures: which
limit is in force, what the reason says, when a write's ENOSPC is let go."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

from pagemq.core.disk import DiskGuard
from pagemq.server.disk_monitor import RESUME_FREE, DiskMonitor, FsUsage, scan_filesystems

MIB = 1 << 20


def usage(free: int, total: int = 100 * MIB, path: str = "/data") -> FsUsage:
    return FsUsage(device=1, roles=("journal", "paging"), path=path, total_bytes=total, free_bytes=free)


def monitor(tmp_path: Path, *, max_usage: int = 90, min_free: int = -1) -> DiskMonitor:
    return DiskMonitor(DiskGuard(), {"journal": tmp_path, "paging": tmp_path},
                       max_disk_usage=max_usage, min_disk_free=min_free, period=5.0)


def test_max_disk_usage_is_crossed_past_its_percentage(tmp_path: Path) -> None:
    watch = monitor(tmp_path, max_usage=90)
    watch.apply([usage(free=11 * MIB)])
    assert not watch.guard.full
    watch.apply([usage(free=9 * MIB)])
    assert watch.guard.full
    (reason,) = watch.guard.reasons.values()
    assert "91.0% used, over max-disk-usage 90%" in reason
    watch.apply([usage(free=50 * MIB)])
    assert not watch.guard.full


def test_min_disk_free_wins_over_max_disk_usage(tmp_path: Path) -> None:
    watch = monitor(tmp_path, max_usage=10, min_free=5 * MIB)
    watch.apply([usage(free=6 * MIB)])  # 94 % used: over 10 %, but min-disk-free decides
    assert not watch.guard.full
    watch.apply([usage(free=4 * MIB)])
    assert watch.guard.full
    assert "4.0 MiB free, under min-disk-free 5MiB" in next(iter(watch.guard.reasons.values()))
    assert watch.guard.view()["limit_in_force"] == "min-disk-free"


def test_both_limits_off_never_block(tmp_path: Path) -> None:
    watch = monitor(tmp_path, max_usage=-1, min_free=-1)
    watch.apply([usage(free=0)])
    assert not watch.guard.full


def test_enospc_holds_until_a_scan_sees_room_again(tmp_path: Path) -> None:
    watch = monitor(tmp_path, max_usage=-1)
    watch.no_space("paging:orders", tmp_path, OSError(errno.ENOSPC, "No space left on device"))
    assert watch.guard.full
    watch.apply([FsUsage(os.stat(tmp_path).st_dev, ("paging",), str(tmp_path), 100 * MIB, 4096)])
    assert watch.guard.full  # a few KiB freed is not room
    watch.apply([FsUsage(os.stat(tmp_path).st_dev, ("paging",), str(tmp_path), 100 * MIB, RESUME_FREE)])
    assert not watch.guard.full


def test_edquot_is_let_go_at_the_next_scan(tmp_path: Path) -> None:
    watch = monitor(tmp_path, max_usage=-1)
    watch.no_space("paging:orders", tmp_path, OSError(errno.EDQUOT, "Disk quota exceeded"))
    watch.apply([FsUsage(os.stat(tmp_path).st_dev, ("paging",), str(tmp_path), 100 * MIB, 0)])
    assert not watch.guard.full  # statvfs cannot see a quota: writes may try again


def test_the_journal_reports_its_own_recovery(tmp_path: Path) -> None:
    watch = monitor(tmp_path)
    watch.journal_space(OSError(errno.ENOSPC, "No space left on device"))
    assert watch.guard.full
    watch.journal_space(None)
    assert not watch.guard.full


def test_a_scan_groups_directories_by_filesystem_and_runs_off_the_loop(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    (tmp_path / "paging").mkdir()
    found = scan_filesystems({"journal": tmp_path / "journal", "paging": tmp_path / "paging"})
    assert len(found) == 1 and found[0].roles == ("journal", "paging")
    assert found[0].free_bytes > 0 and found[0].error is None
    watch = DiskMonitor(DiskGuard(), {"journal": tmp_path / "journal"}, max_disk_usage=100,
                        min_disk_free=-1, period=1.0)
    asyncio.run(watch.scan())
    assert watch.scans == 1 and watch.guard.filesystems[0]["directories"] == ["journal"]


def test_usage_is_what_df_shows_not_a_share_of_the_total_size() -> None:
    """An overlay or thin-provisioned filesystem: 252 GiB in size, 36 GiB used, 66 GiB
    available (the rest neither). `df` says 35 % used; 1 - available/size would say 74 %."""
    gib = 1024 ** 3
    usage = FsUsage(1, ("journal",), "/", total_bytes=252 * gib, free_bytes=66 * gib, used_bytes=36 * gib)
    assert round(usage.used_percent) == 35

"""Resident memory of a process tree, read from /proc (Linux), sampled on a thread.

    from rss import RssSampler, tree_rss
    with RssSampler(pid, interval=0.1) as sampler:
        ...                       # the phase being measured
    sampler.peak, sampler.samples

`tree_rss(pid)` is the RSS of `pid` plus all its descendants (a broker's worker or writer
processes, if it has any), in bytes. Threads share their process's RSS and are not counted
twice. A process that exits between two reads simply stops counting.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

__all__ = ["RssSampler", "children_map", "format_mib", "process_rss", "tree_pids", "tree_rss"]

_PAGE = os.sysconf("SC_PAGE_SIZE")
_PROC = Path("/proc")


def process_rss(pid: int) -> int:
    """RSS of one process in bytes (0 if it is gone): resident pages from /proc/PID/statm."""
    try:
        fields = (_PROC / str(pid) / "statm").read_text().split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0
    return int(fields[1]) * _PAGE


def children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process visible in /proc."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # the command name may hold spaces and parentheses: the fields follow the last ')'
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_pids(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """`pid` and all its descendants."""
    children = children_map() if children is None else children
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def tree_rss(pid: int) -> int:
    """RSS of `pid` and its descendants, in bytes."""
    return sum(process_rss(p) for p in tree_pids(pid))


def format_mib(size: float) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class RssSampler:
    """Samples `tree_rss(pid)` every `interval` seconds on a daemon thread while entered.

    The process tree is re-read every `tree_every` samples (walking /proc is the costly
    part); the root's own RSS is read at every sample.
    """

    def __init__(self, pid: int, interval: float = 0.1, tree_every: int = 10) -> None:
        self.pid = pid
        self.interval = interval
        self.tree_every = tree_every
        self.samples: list[tuple[float, int]] = []  # (seconds since start, bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)
        self._started = 0.0

    def __enter__(self) -> RssSampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sample(tree_pids(self.pid))

    def _sample(self, pids: list[int]) -> None:
        self.samples.append((time.monotonic() - self._started, sum(process_rss(p) for p in pids)))

    def _run(self) -> None:
        pids = tree_pids(self.pid)
        count = 0
        while not self._stop.is_set():
            if count and count % self.tree_every == 0:
                pids = tree_pids(self.pid)
            self._sample(pids)
            count += 1
            self._stop.wait(self.interval)

    @property
    def peak(self) -> int:
        return max((rss for _, rss in self.samples), default=0)

    @property
    def last(self) -> int:
        return self.samples[-1][1] if self.samples else 0


if __name__ == "__main__":
    import sys

    target = int(sys.argv[1]) if len(sys.argv) > 1 else os.getpid()
    print(f"pid {target}: tree {tree_pids(target)}, RSS {format_mib(tree_rss(target))}")

"""Peak resident memory of a broker's whole process tree during a `pagemq perf` phase.

The benchmarking notes ask for each broker's peak RSS per phase, and "whole tree" matters:
RabbitMQ runs epmd and port helpers beside beam.smp, a Java broker may fork, and pagemq may
run helpers. Linux only (/proc); elsewhere the sampler reports nothing instead of failing.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["RssSampler", "tree_pids", "tree_rss_bytes"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children(pid: int) -> list[int]:
    """Direct children, from every thread's `children` file (a child belongs to the thread that forked it)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return found


def tree_pids(pid: int) -> list[int]:
    """`pid` and all its descendants that are still alive."""
    seen: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.append(current)
        todo.extend(_children(current))
    return seen


def tree_rss_bytes(pid: int) -> int | None:
    """Summed RSS of the tree rooted at `pid`; None when `pid` is gone or /proc is missing."""
    total = 0
    alive = False
    for member in tree_pids(pid):
        try:
            fields = Path(f"/proc/{member}/statm").read_text().split()
        except OSError:
            continue
        alive = True
        total += int(fields[1]) * _PAGE
    return total if alive else None


class RssSampler:
    """Keeps the largest tree RSS seen since the last `reset`."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak: int | None = None

    def reset(self) -> None:
        self.peak = None

    def sample(self) -> None:
        if self.pid is None:
            return
        rss = tree_rss_bytes(self.pid)
        if rss is not None and (self.peak is None or rss > self.peak):
            self.peak = rss

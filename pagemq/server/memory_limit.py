"""How much memory the broker may use: the cgroup's limit when it runs in a container, else
the machine's physical memory. `global-max-size` defaults to a fraction of it, so a broker
started without configuration in a 512 MiB container budgets 128 MiB of messages, not a
figure that only suits a large host."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_FRACTION = 4  # global-max-size defaults to a quarter of the memory available ...
DEFAULT_CAP = 512 * 1024 * 1024  # ... and at most 512 MiB

_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)
_NO_LIMIT = 1 << 60  # cgroup v1 reports "no limit" as a huge number


def available_memory() -> int | None:
    """Bytes of memory the process may use, or None when it cannot be told."""
    physical: int | None = None
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _NO_LIMIT:
            limit = int(text)
            return min(limit, physical) if physical else limit
    return physical


def default_global_max_size() -> int:
    memory = available_memory()
    if memory is None:
        return DEFAULT_CAP
    return min(DEFAULT_CAP, memory // DEFAULT_FRACTION)

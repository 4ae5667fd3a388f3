"""Prometheus lines for the broker's limits: each limit beside its use, so an alert can be
written as a ratio (`pagemq_disk_free_bytes / pagemq_disk_min_free_bytes`) rather than a
guess, and `pagemq_disk_full` says when producers are being held back.

Built from the same management views as the JSON API (`core/views.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pagemq.core.views import disk_info, memory_info

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["limit_metrics"]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    return "0"


def _metric(lines: list[str], name: str, kind: str, help_text: str,
            samples: Sequence[tuple[str, object]]) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)


def limit_metrics(broker: Broker, addresses: Sequence[tuple[str, Mapping[str, object]]]) -> list[str]:
    """Memory budget, disk limits and per-address limits; `addresses` are (name, view)."""
    lines: list[str] = []
    memory = memory_info(broker.memory)
    _metric(lines, "pagemq_memory_max_bytes", "gauge", "global-max-size (-1: no limit)",
            [("", memory["global_max_size"])])
    _metric(lines, "pagemq_memory_max_messages", "gauge", "global-max-messages (-1: no limit)",
            [("", memory["global_max_messages"])])
    disk = disk_info(broker.disk)
    _metric(lines, "pagemq_disk_full", "gauge",
            "1 while producers meet disk-full-policy (a disk limit crossed, or no space)",
            [("", disk["disk_full"])])
    _metric(lines, "pagemq_disk_max_usage_percent", "gauge", "max-disk-usage (-1: off)",
            [("", disk.get("max_disk_usage", -1))])
    _metric(lines, "pagemq_disk_min_free_bytes", "gauge", "min-disk-free (-1: off; wins when set)",
            [("", disk.get("min_disk_free", -1))])
    _metric(lines, "pagemq_disk_failed_sends_total", "counter",
            "Sends refused by disk-full-policy FAIL", [("", disk["failed_sends"])])
    _metric(lines, "pagemq_disk_blocked_sends_total", "counter",
            "Sends held back by disk-full-policy BLOCK", [("", disk["blocked_sends"])])
    filesystems = disk.get("filesystems")
    fs_list = filesystems if isinstance(filesystems, list) else []
    for field, help_text in (("free_bytes", "Bytes the broker may still write on the filesystem"),
                             ("total_bytes", "Size of the filesystem"),
                             ("used_percent", "Percent of the filesystem used")):
        _metric(lines, f"pagemq_disk_{field}", "gauge", help_text,
                [(f'{{path="{_label(str(fs["path"]))}"}}', fs.get(field)) for fs in fs_list])
    per_address: dict[str, list[tuple[str, object]]] = {}
    for name, info in addresses:
        limits = info.get("limits")
        if not isinstance(limits, Mapping):
            continue
        label = f'{{address="{_label(name)}"}}'
        for part in ("memory", "paging"):
            figures = limits.get(part)
            if not isinstance(figures, Mapping):
                continue
            for key, value in figures.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    per_address.setdefault(f"{part}_{key}", []).append((label, value))
    for key, samples in sorted(per_address.items()):
        _metric(lines, f"pagemq_address_limit_{key}", "gauge",
                f"Address {key.replace('_', ' ')} (-1: no limit)", samples)
    return lines

"""Metric families for the broker's disk limits and each address's limits, beside their use,
so an alert is a ratio (`pagemq_disk_free_bytes / pagemq_disk_min_free_bytes`) rather than
a guess, and `pagemq_disk_full` says when producers are held back. Part of the broker's
collector (`integrations/metrics.py`), by its conventions: a limit that is off (-1) is
absent, percentages are ratios, counters get `_total`.

Built from the management views (`core/views.py`), as the JSON API.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from pagemq.core.views import disk_info

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = ["PAGED_BYTES", "limit_families", "paged_bytes"]

PAGED_BYTES = ("pagemq_address_paged_bytes",
               "Bytes of the address in page files not yet acknowledged by every queue "
               "(what page-limit-bytes counts)")

# (view part, view field, metric name, help): per address, shown when the limit is on
_ADDRESS_LIMITS = (
    ("memory", "max_size_bytes", "pagemq_address_limit_bytes", "max-size-bytes of the address"),
    ("memory", "max_size_messages", "pagemq_address_limit_messages", "max-size-messages of the address"),
    ("paging", "page_limit_bytes", "pagemq_address_page_limit_bytes", "page-limit-bytes of the address"),
    ("paging", "page_limit_messages", "pagemq_address_page_limit_messages",
     "page-limit-messages of the address"),
)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def limit_families(broker: Broker) -> Iterator[Metric]:
    yield from _disk_families(broker)
    yield from _address_families(broker)


def _disk_families(broker: Broker) -> Iterator[Metric]:
    disk = disk_info(broker.disk)
    yield GaugeMetricFamily("pagemq_disk_full", "1 while producers meet disk-full-policy (a disk "
                            "limit crossed, or a write found no space)", value=1 if disk["disk_full"] else 0)
    max_usage = _number(disk.get("max_disk_usage", -1))
    if max_usage >= 0:
        yield GaugeMetricFamily("pagemq_disk_max_usage_ratio", "max-disk-usage, as a ratio",
                                value=max_usage / 100)
    min_free = _number(disk.get("min_disk_free", -1))
    if min_free >= 0:
        yield GaugeMetricFamily("pagemq_disk_min_free_bytes", "min-disk-free (wins over max-disk-usage)",
                                value=min_free)
    yield CounterMetricFamily("pagemq_disk_refused_sends", "Sends refused by disk-full-policy FAIL",
                              value=_number(disk["failed_sends"]))
    yield CounterMetricFamily("pagemq_disk_held_sends", "Sends held back by disk-full-policy BLOCK",
                              value=_number(disk["blocked_sends"]))
    filesystems = disk.get("filesystems")
    rows = filesystems if isinstance(filesystems, list) else []
    free = GaugeMetricFamily("pagemq_disk_free_bytes", "Bytes the broker may still write on a "
                             "filesystem holding its journal or page files", labels=["path"])
    size = GaugeMetricFamily("pagemq_disk_size_bytes", "Size of that filesystem", labels=["path"])
    used = GaugeMetricFamily("pagemq_disk_used_ratio",
                             "Part of that filesystem used (used / (used + usable), as df)", labels=["path"])
    for fs in rows:
        path = [str(fs["path"])]
        free.add_metric(path, _number(fs["free_bytes"]))
        size.add_metric(path, _number(fs["total_bytes"]))
        used.add_metric(path, _number(fs["used_percent"]) / 100)
    yield from (free, size, used)


def _address_families(broker: Broker) -> Iterator[Metric]:
    """Per address: the bytes in page files now (every address, over the collector's shared
    label rows and fast writer: one row each of 10,000 addresses is most of a scrape), and the
    limits that are on (few addresses set them: the library's families do)."""
    families = {name: GaugeMetricFamily(name, help_text, labels=["address"])
                for _part, _field, name, help_text in _ADDRESS_LIMITS}
    addresses = broker.addresses
    for name in sorted(addresses):
        settings = addresses[name].settings
        for _part, field, metric, _help in _ADDRESS_LIMITS:
            value = getattr(settings, field)
            if value >= 0:
                families[metric].add_metric([name], float(value))
    yield from (family for family in families.values() if family.samples)


def paged_bytes(broker: Broker, names: Sequence[str]) -> list[float]:
    """Bytes of each address (in `names` order) in page files not yet acknowledged by every
    queue: what page-limit-bytes counts."""
    pagers = broker.bindings.pagers
    return [float(pager.bytes_held) if (pager := pagers.get(name)) is not None else 0.0 for name in names]

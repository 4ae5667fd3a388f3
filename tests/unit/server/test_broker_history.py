"""The console's ring of samples (server/broker_history.py) over a real in-process broker
core: rates from the broker-wide totals, which keep what deleted queues counted, the disk
line where the limit in force puts it, and the ring's bound."""

from __future__ import annotations

from typing import Any

from pagemq.core.broker import Broker
from pagemq.core.memory import MemoryAccountant
from pagemq.core.settings import AddressSettingsRepository
from pagemq.server.broker_history import BrokerHistory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _history(broker: Broker, clock: Clock, **kwargs: Any) -> BrokerHistory:
    return BrokerHistory(broker, lambda: {"bytes": 4096}, lambda: (3, 5, 2), clock=clock, **kwargs)


def _count_adds(broker: Broker, name: str, added: int, acknowledged: int) -> None:
    """Counters as routing and acks leave them (what the sampler reads)."""
    address = broker.ensure_address(name, "anycast")
    queue = broker.ensure_queue(address, name, "anycast")
    queue.counters.added += added
    queue.counters.acknowledged += acknowledged


def test_rates_come_from_the_totals_and_a_deleted_queue_does_not_make_them_drop() -> None:
    broker = Broker(AddressSettingsRepository(), memory=MemoryAccountant(1 << 20))
    clock = Clock()
    history = _history(broker, clock)
    first = history.sample()
    assert first["in_per_second"] is None and first["out_per_second"] is None
    assert (first["connections"], first["journal_bytes"]) == (3, 4096)

    _count_adds(broker, "a", 100, 40)
    _count_adds(broker, "b", 50, 0)
    clock.now += 5
    second = history.sample()
    assert (second["in_per_second"], second["out_per_second"]) == (30.0, 8.0)

    broker.bindings.delete_queue(broker.queues["a"])
    clock.now += 5
    third = history.sample()
    assert (third["messages_added"], third["messages_acknowledged"]) == (150, 40)
    assert (third["in_per_second"], third["out_per_second"]) == (0.0, 0.0)
    view = history.view()
    assert view["limits"]["global_max_size"] == 1 << 20  # type: ignore[index]
    assert [s["time"] for s in view["samples"]] == [1000.0, 1005.0, 1010.0]  # type: ignore[index]


def test_the_ring_keeps_the_last_samples_only() -> None:
    broker = Broker(AddressSettingsRepository())
    clock = Clock()
    history = _history(broker, clock, capacity=3)
    for _ in range(5):
        history.sample()
        clock.now += 5
    assert [s["time"] for s in history.view()["samples"]] == [1010.0, 1015.0, 1020.0]  # type: ignore[index]


def test_the_disk_line_is_where_the_limit_in_force_puts_it_on_the_fullest_filesystem() -> None:
    broker = Broker(AddressSettingsRepository())
    disk = broker.disk
    disk.filesystems = [
        {"path": "/a", "total_bytes": 1000, "free_bytes": 800, "used_percent": 20.0},
        {"path": "/b", "total_bytes": 1000, "free_bytes": 300, "used_percent": 70.0},
    ]
    disk.limits = {"max_disk_usage": 90, "min_disk_free": 100}
    sample = _history(broker, Clock()).sample()
    assert (sample["disk_used_percent"], sample["disk_limit_percent"]) == (70.0, 90.0)  # 1000 - 100 free
    disk.limits = {"max_disk_usage": 85, "min_disk_free": -1}
    assert _history(broker, Clock()).sample()["disk_limit_percent"] == 85.0
    disk.limits = {"max_disk_usage": -1, "min_disk_free": -1}
    assert _history(broker, Clock()).sample()["disk_limit_percent"] is None

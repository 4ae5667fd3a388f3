"""The core's side of the disk limits (core/disk.py): producers meet disk-full-policy while
any reason stands; moves the broker makes itself pass; blocked sends resume once the last
reason is cleared, and only then."""

from __future__ import annotations

import pytest

from pagemq.core.broker import Blocked, Broker
from pagemq.core.errors import DiskFull
from pagemq.core.settings import AddressSettingsRepository


def _broker(policy: str) -> Broker:
    broker = Broker(AddressSettingsRepository())
    broker.disk.policy = policy
    return broker


def test_fail_refuses_a_send_naming_the_limit_and_stores_nothing() -> None:
    broker = _broker("FAIL")
    broker.disk.set("limit:/data", "/data (journal) has 1 MiB free, under min-disk-free 2 MiB")
    with pytest.raises(DiskFull) as refused:
        broker.send("orders", "anycast", {}, b"x")
    assert "min-disk-free" in refused.value.message and "FAIL" in refused.value.message
    assert "orders" not in broker.queues  # nothing stored, not even the queue
    assert broker.disk.view()["failed_sends"] == 1


def test_block_holds_a_send_until_every_reason_is_cleared() -> None:
    broker = _broker("BLOCK")
    broker.disk.set("limit:/data", "over max-disk-usage")
    broker.disk.set("no-space:journal", "no space")
    with pytest.raises(Blocked) as blocked:
        broker.send("orders", "anycast", {}, b"x")
    resumed: list[int] = []
    broker.wait_for_memory(blocked.value.address, lambda: resumed.append(1))
    broker.disk.clear("limit:/data")
    assert resumed == []  # the journal still has no space
    broker.disk.clear("no-space:journal")
    assert resumed == [1]
    broker.send("orders", "anycast", {}, b"x")
    assert broker.queues["orders"].pending == 1


def test_a_cancelled_wait_is_not_resumed() -> None:
    broker = _broker("BLOCK")
    broker.disk.set("limit:/data", "full")
    with pytest.raises(Blocked) as blocked:
        broker.send("orders", "anycast", {}, b"x")
    resumed: list[int] = []
    retry = broker.wait_for_memory(blocked.value.address, lambda: resumed.append(1))
    broker.cancel_wait(retry)
    broker.disk.clear("limit:/data")
    assert resumed == []


def test_moves_the_broker_makes_itself_pass_a_full_disk() -> None:
    broker = _broker("FAIL")
    broker.disk.set("limit:/data", "full")
    broker.send("DLQ", "anycast", {}, b"moved", internal=True)
    assert broker.queues["DLQ"].pending == 1


def test_fail_refuses_before_an_address_is_created() -> None:
    broker = _broker("FAIL")
    broker.disk.set("limit:/data", "full")
    with pytest.raises(DiskFull):
        broker.send("brand-new", "anycast", {}, b"x")
    assert "brand-new" not in broker.addresses

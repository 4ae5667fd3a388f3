"""Routing and admission in-process: address-full policies, the global budget, internal
moves past the policies, and the ledger's one shared copy per address."""

from __future__ import annotations

import pytest

from pagemq.core.broker import DROP, MEMORY, PAGE, Blocked, Broker
from pagemq.core.errors import AddressFull
from pagemq.core.memory import MemoryAccountant
from pagemq.core.message import Message
from pagemq.core.settings import AddressSettingsRepository


def _broker(memory: MemoryAccountant | None = None, **settings: object) -> Broker:
    repository = AddressSettingsRepository()
    repository.add("#", settings)
    return Broker(repository, memory=memory)


def _message(broker: Broker, size: int = 100) -> Message:
    return Message(broker.new_id(), "a", {}, b"x" * size, persistent=False, priority=4,
                   expiration=0, timestamp=0)


@pytest.mark.parametrize(("policy", "expected"), [("PAGE", PAGE), ("DROP", DROP)])
def test_full_address_pages_or_drops_by_its_policy(policy: str, expected: str) -> None:
    broker = _broker(**{"max-size-messages": 1, "address-full-policy": policy})
    address = broker.ensure_address("a", "anycast")
    assert broker.router.admit(address, _message(broker)) is MEMORY
    address.charge(100)
    assert broker.router.admit(address, _message(broker)) is expected
    assert address.paging == (expected is PAGE)
    assert address.dropped_messages == (1 if expected is DROP else 0)


def test_fail_policy_rejects_send_when_address_full() -> None:
    broker = _broker(**{"max-size-messages": 0, "address-full-policy": "FAIL"})
    with pytest.raises(AddressFull, match="address-full-policy FAIL"):
        broker.send("a", "anycast", {}, b"x")
    assert broker.queue_info("a")["messages"] == 0


def test_block_policy_raises_blocked_and_wakes_the_waiter_when_memory_frees() -> None:
    broker = _broker(**{"max-size-messages": 1, "address-full-policy": "BLOCK"})
    broker.send("a", "anycast", {}, b"x")
    with pytest.raises(Blocked) as blocked:
        broker.send("a", "anycast", {}, b"y")
    woken: list[bool] = []
    broker.wait_for_memory(blocked.value.address, lambda: woken.append(True))
    queue = broker.queues["a"]
    (ref,) = queue.remove_pending()
    broker.ledger.release(queue, ref)
    assert woken == [True]


def test_the_global_budget_counts_every_address() -> None:
    broker = _broker(memory=MemoryAccountant(max_bytes=3000), **{"address-full-policy": "DROP"})
    broker.send("a", "anycast", {}, b"x" * 1000)
    broker.send("b", "anycast", {}, b"x" * 1000)
    assert broker.send("c", "anycast", {}, b"x" * 1000) is None
    assert broker.addresses["c"].dropped_messages == 1


def test_a_moved_message_is_admitted_past_a_refusing_policy() -> None:
    broker = _broker(**{"max-size-messages": 0, "address-full-policy": "FAIL"})
    address = broker.ensure_address("dlq", "anycast")
    assert broker.router.admit(address, _message(broker), internal=True) is MEMORY  # no paging here


def test_a_multicast_send_is_one_copy_charged_once() -> None:
    broker = _broker()
    address = broker.ensure_address("t", "multicast")
    for name in ("s1", "s2", "s3"):
        broker.ensure_queue(address, name, "multicast", durable=False)
    broker.send("t", "multicast", {}, b"x" * 500)
    copies = {id(ref.message) for name in ("s1", "s2", "s3") for ref in broker.queues[name]}
    assert len(copies) == 1
    assert address.messages_in_memory == 1
    for name in ("s1", "s2", "s3"):
        queue = broker.queues[name]
        (ref,) = queue.remove_pending()
        broker.ledger.release(queue, ref)
    assert address.messages_in_memory == 0
    assert broker.memory.used_bytes == 0

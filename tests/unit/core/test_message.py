"""The memory estimate must track what CPython really allocates, or limits don't bound RSS."""

import tracemalloc

import pytest

from pagemq.core.consumer import MessageRef
from pagemq.core.message import Message


def _headers(count: int) -> dict[str, str]:
    return {f"header-{i}": f"value-{i:04d}" for i in range(count)}


def _measure(body_size: int, header_count: int, copies: int = 2000) -> float:
    """Average bytes allocated per message + its queue ref, from headers built fresh each time."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = []
    for i in range(copies):
        message = Message(i, "orders", _headers(header_count), bytes(body_size), persistent=True)
        held.append(MessageRef(message))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # The `held` list itself costs 8 bytes a slot; it stands in for the queue's deque slot.
    return (after - before) / copies


@pytest.mark.parametrize(("body_size", "header_count"), [(0, 0), (1024, 6), (100, 20), (65536, 3)])
def test_memory_estimate_is_within_a_quarter_of_real_allocation(body_size, header_count):
    estimate = Message(0, "orders", _headers(header_count), bytes(body_size)).memory_size
    real = _measure(body_size, header_count)
    assert 0.75 * real <= estimate <= 1.25 * real, (estimate, real)


def test_memory_estimate_never_undercounts_a_1kib_message_by_much():
    estimate = Message(0, "orders", _headers(6), bytes(1024)).memory_size
    assert estimate >= 0.95 * _measure(1024, 6)

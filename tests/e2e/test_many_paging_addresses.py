"""Hundreds of paging addresses (a queue per tenant) on a real broker: every receipted message
survives a kill -9, and the broker's thread count does not grow with the addresses (their
page writes share a small pool: storage/paging/page_sync_pool.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from brokerproc import BrokerProcess, StompClient, wait_until

ADDRESSES = 600
PER_ADDRESS = 2
MAX_THREADS = 50  # the broker had one writer thread per paging address: 600+ here
PAGE_TENANTS = {"address-settings": {"tenant.#": {"max-size-bytes": 0, "page-size-bytes": "16KiB"}}}


def threads(proc: BrokerProcess) -> int:
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads: line")


def send_receipted(client: StompClient, prefix: str) -> set[str]:
    """PER_ADDRESS persistent messages to each address, pipelined; returns once every one
    has its RECEIPT (so every one is on disk, fsynced)."""
    bodies: set[str] = set()
    for tenant in range(ADDRESSES):
        for n in range(PER_ADDRESS):
            body = f"{prefix}-{tenant}-{n}"
            client.conn.send(f"/queue/tenant.{tenant}", body,
                             headers={"persistent": "true", "receipt": body})
            bodies.add(body)
    listener = client.listener
    listener.wait(lambda: len(listener.receipts) >= len(bodies) or bool(listener.errors), 120,
                  f"{len(bodies)} receipts")
    assert not listener.errors, [(e.headers, e.body) for e in listener.errors][:3]
    assert set(listener.receipts) >= bodies
    return bodies


def drain(client: StompClient, expected: int) -> list[str]:
    for tenant in range(ADDRESSES):
        client.subscribe(f"/queue/tenant.{tenant}", ack="auto", receipt=False)
    return [frame.body for frame in client.listener.wait_for(expected, timeout=120)]


@pytest.mark.slow  # make test-slow
def test_receipted_messages_of_600_paging_addresses_survive_kill_9_with_a_bounded_thread_count(
    start_broker, stomp_client
) -> None:
    proc = start_broker(PAGE_TENANTS)
    producer = stomp_client(proc)
    sent = send_receipted(producer, "before")
    assert threads(proc) < MAX_THREADS, f"{threads(proc)} threads for {ADDRESSES} paging addresses"
    paged = proc.http_get("/api/queues/tenant.7")[1]
    assert paged["messages_paged"] == PER_ADDRESS, paged
    producer.drop()

    proc.restart(kill=True)  # no clean stop: each address's live page has no summary
    assert threads(proc) < MAX_THREADS
    # After the crash, more of the same: new pages beside the recovered ones.
    producer = stomp_client(proc)
    sent |= send_receipted(producer, "after")
    producer.drop()

    proc.restart(kill=True)
    consumer = stomp_client(proc)
    received = drain(consumer, len(sent))
    assert sorted(received) == sorted(sent)  # every receipted message once, none lost
    consumer.listener.assert_no_more(len(sent), within=0.5)
    assert threads(proc) < MAX_THREADS
    wait_until(lambda: proc.http_get("/api/queues/tenant.0")[1]["messages"] == 0,
               what="tenant.0 drained")

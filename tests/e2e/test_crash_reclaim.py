"""A broker killed again and again before any cleanup period must not replay a growing
history at each start (issue 13, defect 14): what recovery proves spent is reclaimed right
after start-up, and the journal is cleaned as it grows, not only every `cleanup-period`.

The measured figures (30 kill -9 cycles under 4+4 clients, start-up time per cycle) come
from benchmarks/crash_recovery_bench.py; this test holds the mechanism: on-disk bytes stay
bounded by the live data, in the journal and everywhere else in the data directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from brokerproc import unique, wait_until
from test_paging_helpers import consume, numbered, send_all, wait_frames

# No periodic cleanup within the test: only what start-up and journal growth trigger.
NEVER = {"broker": {"cleanup-period": "1h", "journal-file-size": "4MiB"}}
PER_CYCLE = 3000


def _files(directory: Path, pattern: str = "*") -> list[Path]:
    """The files under `directory`, less the broker's lock files (one per directory, kept)."""
    if not directory.is_dir():
        return []
    return [p for p in directory.rglob(pattern) if p.is_file() and p.name != "server.lock"]


def _journal_bytes(proc) -> int:
    """The journal's size now; a file the broker's cleanup thread removes while we look
    counts as gone."""
    total = 0
    for path in _files(proc.data_dir / "journal"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def _traffic(proc, stomp_client, queue: str, cycle: int) -> None:
    """PER_CYCLE persistent 1 KiB messages sent and consumed (acked): ~3.5 MB of journal."""
    producer = stomp_client(proc)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="auto", headers={"activemq.prefetchSize": 100_000})
    send_all(producer, f"/queue/{queue}", numbered(f"c{cycle}-", PER_CYCLE))
    wait_frames(consumer, PER_CYCLE, timeout=30)
    proc.wait_queue(queue, timeout=15, messages=0)
    producer.drop()
    consumer.drop()


@pytest.mark.slow  # make test-slow
def test_repeated_kills_before_any_cleanup_period_leave_no_growing_history(start_broker, stomp_client):
    proc = start_broker(NEVER)
    queue = unique("reclaim")
    after_start: list[int] = []
    for cycle in range(4):
        _traffic(proc, stomp_client, queue, cycle)
        # Cleaned as it grew: the journal does not keep the cycle's spent records.
        wait_until(lambda: _journal_bytes(proc) < 2 << 20, timeout=5,
                   what=f"the journal to shrink below 2 MiB in cycle {cycle}")
        proc.kill()
        proc.start()
        wait_until(lambda: any("journal cleanup after start-up" in line for line in proc.current_log)
                   or _journal_bytes(proc) < 64 << 10, timeout=10, what="the cleanup after start-up")
        after_start.append(_journal_bytes(proc))
    assert max(after_start) < 1 << 20, after_start  # the live data (none) and a fresh file, no history
    assert after_start[-1] <= after_start[0] + (256 << 10), after_start
    everything = _files(proc.data_dir)
    assert not [p for p in everything if p.name.endswith((".tmp", ".cmp"))], everything
    assert len(_files(proc.data_dir / "journal")) <= 3, _files(proc.data_dir / "journal")
    assert proc.queue(queue)["messages"] == 0


@pytest.mark.slow  # make test-slow
def test_repeated_kills_of_a_paging_broker_leave_no_growing_page_folders(start_broker, stomp_client):
    config = {**NEVER, "address-settings": {"#": {"max-size-bytes": 0, "page-size-bytes": "64KiB"}}}
    proc = start_broker(config)
    queue = unique("reclaim-paged")
    counts = []
    for cycle in range(3):
        producer = stomp_client(proc)
        send_all(producer, f"/queue/{queue}", numbered(f"c{cycle}-", 300))
        consumer = stomp_client(proc)
        consume(consumer, f"/queue/{queue}", 300, settle=0)
        proc.wait_queue(queue, timeout=15, messages=0)
        producer.drop()
        consumer.drop()
        proc.kill()
        proc.start()
        counts.append(len(_files(proc.data_dir / "paging")))
    assert max(counts) <= 2, counts  # address.txt and last-page: every page went
    assert not [p for p in _files(proc.data_dir) if p.name.endswith((".tmp", ".cmp"))]

"""Disk limits (issue 16, part 2): what the scan costs, and how soon producers go on once
space is back.

1. `scan_filesystems` over the journal and paging directories: microseconds per scan (it
   runs in a worker thread every `disk-scan-period`; this is its whole cost).
2. A real broker on a 24 MiB tmpfs (root needed: `mount -t tmpfs`), BLOCK policy,
   `min-disk-free = 8MiB`: a filler file crosses the limit, a producer's persistent SEND is
   held, the filler is deleted; the time from the delete to the SEND's RECEIPT, for each
   `disk-scan-period` given (expected: about half a period on average, at most one).
3. The same broker with no limit, the tmpfs filled so a journal write meets ENOSPC: the
   time from the delete to the RECEIPT of a send held meanwhile (the journal writes its
   kept batch again every second, then the next scan lets producers go on).

    .venv/bin/python benchmarks/disk_limits_bench.py [--periods 100ms 1s] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))

from brokerproc import BrokerProcess, StompClient, wait_until

from pagemq.server.disk_monitor import scan_filesystems


def scan_cost(rounds: int = 2000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        journal, paging = Path(tmp) / "journal", Path(tmp) / "paging"
        journal.mkdir()
        paging.mkdir()
        started = time.perf_counter()
        for _ in range(rounds):
            scan_filesystems({"journal": journal, "paging": paging})
        return (time.perf_counter() - started) / rounds * 1e6


def _fill(path: Path, leave: int) -> Path:
    import os

    filler = path / "filler.bin"
    with open(filler, "ab") as handle:
        while True:
            stat = os.statvfs(path)
            room = stat.f_bavail * stat.f_frsize - leave
            if room <= 0:
                break
            try:
                handle.write(b"\0" * min(room, 1 << 20))
                handle.flush()
            except OSError:
                break
    return filler


def _disk_full(proc: BrokerProcess) -> bool:
    return bool(proc.http_get("/api/broker")[1]["disk"]["disk_full"])


def resume_time(mount: Path, config: dict[str, object], leave: int, fill_first: bool) -> float:
    """Seconds from deleting the filler to the held SEND's RECEIPT."""
    proc = BrokerProcess(mount / f"b{time.monotonic_ns()}", config).start()
    try:
        client = StompClient(proc.stomp_port).connect()
        if fill_first:  # a journal write that meets ENOSPC makes the disk full
            filler = _fill(mount, leave)
            n = 0
            while not client.listener.errors and n < 1000:
                client.conn.send("/queue/bench", "x" * 8192,
                                 headers={"persistent": "true", "receipt": f"r{n}"})
                client.listener.wait(lambda n=n: f"r{n}" in client.listener.receipts
                                     or bool(client.listener.errors), 10, "receipt or error")
                n += 1
            client = StompClient(proc.stomp_port).connect()
        else:
            filler = _fill(mount, leave)
        wait_until(lambda: _disk_full(proc), 10, what="disk full")
        client.send("/queue/bench", "held", headers={"persistent": "true", "receipt": "held"})
        time.sleep(0.3)
        assert "held" not in client.listener.receipts
        started = time.monotonic()
        filler.unlink()
        client.listener.wait_for_receipt("held", 30)
        took = time.monotonic() - started
        client.disconnect()
        return took
    finally:
        proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--periods", nargs="*", default=["100ms", "1s"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"scan of journal + paging directories: {scan_cost():.1f} µs")
    mount = Path(tempfile.mkdtemp(prefix="pagemq-disk-bench-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"no tmpfs (needs root): {done.stderr.strip()}; resume times skipped")
        return
    try:
        for period in args.periods:
            config = {"broker": {"min-disk-free": "8MiB", "disk-scan-period": period}}
            times = [resume_time(mount, config, 4 << 20, False) for _ in range(args.rounds)]
            print(f"min-disk-free crossed, BLOCK, disk-scan-period {period}: resumed "
                  f"{statistics.median(times) * 1000:.0f} ms after the delete (median of "
                  f"{args.rounds}; max {max(times) * 1000:.0f} ms)")
        config = {"broker": {"max-disk-usage": -1, "min-disk-free": -1, "disk-scan-period": "100ms"}}
        times = [resume_time(mount, config, 600 << 10, True) for _ in range(args.rounds)]
        print(f"journal ENOSPC, disk-scan-period 100ms: resumed {statistics.median(times) * 1000:.0f} ms "
              f"after the delete (median of {args.rounds}; max {max(times) * 1000:.0f} ms)")
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)
        mount.rmdir()


if __name__ == "__main__":
    main()

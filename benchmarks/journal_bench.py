"""Journal throughput: pipelined sync appends, sync deletes, recovery and cleanup.

    .venv/bin/python benchmarks/journal_bench.py [--count N] [--payload BYTES]
        [--window OUTSTANDING] [--dir DIR] [--no-sync]

Each phase prints records/s, fsyncs and the mean group-commit batch (records per fsync).
"Pipelined" means up to `--window` appends are outstanding (issued, not yet durable), as
a broker with many producers waiting for receipts would have; every append is sync=True,
so each one is covered by an fsync before its future resolves. The physical limits here
are about 4,400 fsyncs/s and 400 MB/s (docs: notes/benchmarking.md), so the rate is
bounded by min(400 MB/s / record size, 4,400 x batch).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from pipeline import pipelined

from pagemq.storage.journal import Journal


def _report(name: str, count: int, seconds: float, before: dict[str, int], after: dict[str, int]) -> None:
    fsyncs = after["flushes"] - before["flushes"]
    batches = after["batches"] - before["batches"]
    written = after["bytes"] - before["bytes"]
    print(f"{name:<28} {count:>8} records  {count / seconds:>10,.0f} rec/s  "
          f"{written / seconds / 1e6:>7.1f} MB/s  {fsyncs:>6} fsyncs  "
          f"{count / max(batches, 1):>7.1f} rec/batch")


async def _bench(directory: Path, count: int, payload_size: int, window: int, sync: bool) -> None:
    journal = Journal(directory, sync=sync)
    journal.load()
    journal.start(asyncio.get_running_loop())
    payload = b"p" * payload_size

    before, started = journal.stats(), time.perf_counter()
    await pipelined(count, window, lambda i: journal.add(i, 1, payload, sync=True))
    _report(f"add {payload_size} B, sync", count, time.perf_counter() - started, before, journal.stats())

    before, started = journal.stats(), time.perf_counter()
    await pipelined(count, window, lambda i: journal.delete(i, sync=True))
    _report("delete, sync", count, time.perf_counter() - started, before, journal.stats())

    before, started = journal.stats(), time.perf_counter()
    for i in range(count):
        journal.add(count + i, 1, payload)
        if i % 1024 == 1023:
            await asyncio.sleep(0)
    await journal.flush()
    _report(f"add {payload_size} B, no sync", count, time.perf_counter() - started, before, journal.stats())

    started = time.perf_counter()
    report = journal.cleanup()
    print(f"{'cleanup':<28} {time.perf_counter() - started:.3f} s: {vars(report)}")
    await journal.close()

    started = time.perf_counter()
    result = Journal(directory).load()
    seconds = time.perf_counter() - started
    print(f"{'recovery (load)':<28} {len(result.records):>8} live  {seconds:.2f} s  "
          f"{len(result.records) / seconds:,.0f} live rec/s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--payload", type=int, default=1024)
    parser.add_argument("--window", type=int, default=5_000)
    parser.add_argument("--dir", type=Path, default=None, help="journal directory (default: a temp dir)")
    parser.add_argument("--no-sync", action="store_true", help="journal-sync = false")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="pagemq-journal-bench-"))
    try:
        asyncio.run(_bench(directory, args.count, args.payload, args.window, not args.no_sync))
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()

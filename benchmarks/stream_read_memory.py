"""The broker's memory while many streaming range reads run at once (docs/spark.md).

    .venv/bin/python benchmarks/stream_read_memory.py [--messages 200000] [--slices 8]

Starts `pagemq serve` (every message paged, 10 MiB pages: `spark_batch_bench.Broker`), fills
one queue with `--messages` persistent 1 KiB messages, asks `offsets` for the whole backlog
cut into about `--slices` slices (page boundaries decide the exact number), and reads every
slice at once, one thread each, as a query's partitions would (nothing committed). Prints
the broker's RSS before the reads (after a first small read: the broker imports pyarrow
then), its peak during them (sampled every 20 ms), one second after, and the read rate.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_batch_bench import HOST, SOURCE, Broker, fill


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    import pyarrow as pa

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--slices", type=int, default=8)
    args = parser.parse_args()
    broker = Broker(Path(tempfile.mkdtemp(prefix="stream-read-memory-")), "10MiB")
    pid = broker.proc.pid
    try:
        fill(broker, args.messages, 1024)
        time.sleep(2)
        base = f"http://{HOST}:{broker.http_port}/api/streams/{SOURCE}"
        size = max(1, args.messages // args.slices)
        with urllib.request.urlopen(f"{base}/offsets?after=0&max={args.messages}&size={size}") as response:
            slices = json.load(response)["splits"]
        with urllib.request.urlopen(f"{base}/read?after=0&upto={slices[0][0] + 1}") as response:
            pa.ipc.open_stream(response).read_all()
        time.sleep(0.5)
        before = rss_mib(pid)
        peak = [before]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss_mib(pid))
                time.sleep(0.02)

        rows = [0] * len(slices)

        def read(index: int, low: int, high: int, page: int) -> None:
            with urllib.request.urlopen(f"{base}/read?after={low}&upto={high}&from_page={page}") as response:
                for batch in pa.ipc.open_stream(response):
                    rows[index] += batch.num_rows

        threading.Thread(target=sample, daemon=True).start()
        started = time.monotonic()
        readers = [threading.Thread(target=read, args=(n, *piece)) for n, piece in enumerate(slices)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        elapsed = time.monotonic() - started
        done.set()
        time.sleep(1)
        print(f"{len(slices)} slices read at once: {sum(rows):,} rows in {elapsed:.1f} s "
              f"({sum(rows) / elapsed:,.0f} msg/s); broker RSS {before:.0f} MiB before, "
              f"peak {peak[0]:.0f} MiB, {rss_mib(pid):.0f} MiB 1 s after")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()

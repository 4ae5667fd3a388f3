"""What decoding page frames into Arrow costs per row (`pagemq/spark/page_decode.py`):
the work of a Spark task reading a shipped span (`pages=raw`) or a page file, and of the
broker walking a span it ships (`locate(verify=False)`).

    .venv/bin/python benchmarks/page_decode_bench.py [--rows 125000] [--size 1024] [--batch 8192]

Builds one span of `--rows` MESSAGE frames (bodies of `--size` bytes, two headers, as STOMP
producers' sends page), then times, best of `--repeat`:
- `locate` verified (CRCs computed) and unverified;
- `build_batch` of the whole span and in batches of `--batch` rows, with and without the
  `headers` column.
No broker, no Spark: one process, one core.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from pagemq.core.message import Message
from pagemq.spark.page_decode import build_batch, locate
from pagemq.storage.message_codec import encode_message
from pagemq.storage.paging.page_format import PagedRecord, encode_frames


def span(rows: int, size: int) -> bytes:
    records = [PagedRecord(1000 + n, (1,), True, encode_message(Message(
        1000 + n, "orders", {"persistent": "true", "n": str(n)}, b"x" * size, persistent=True, priority=4,
        timestamp=1_700_000_000_000 + n))) for n in range(rows)]
    return encode_frames(records, 0)


def best(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=125_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = span(args.rows, args.size)
    found = locate(data, 0, len(data))
    assert len(found) == args.rows and not found.damage

    def built(headers: bool, batch: int) -> None:
        for start in range(0, len(found), batch):
            made, problems = build_batch(found.take(slice(start, start + batch)), address="orders",
                                         seq_base=0, queue_name=lambda _queue: "orders",
                                         include_headers=headers, seq_from_id=True)
            assert made.num_rows and not problems

    figures = {
        "locate, CRCs verified": lambda: locate(data, 0, len(data)),
        "locate, CRCs not computed": lambda: locate(data, 0, len(data), verify=False),
        "build_batch, whole span": lambda: built(True, args.rows),
        f"build_batch, {args.batch}-row batches": lambda: built(True, args.batch),
        "build_batch, whole span, no headers": lambda: built(False, args.rows),
    }
    print(f"{args.rows:,} MESSAGE frames of {args.size} B bodies, {len(data) / 2**20:.1f} MiB")
    for label, work in figures.items():
        print(f"  {label:<40} {best(work, args.repeat) / args.rows * 1e6:6.3f} µs/row")


if __name__ == "__main__":
    main()

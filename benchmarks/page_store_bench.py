"""Page store throughput: codec, pipelined persistent appends, reads, and open time.

    .venv/bin/python benchmarks/page_store_bench.py [--count N] [--window OUTSTANDING]
        [--open-messages M] [--page-size BYTES] [--sync-timeout S] [--dir DIR]

Phases (1 KiB bodies, 6 headers, as a STOMP producer would send):
- codec: `encode_message` / `decode_message` rates.
- append: N persistent records, up to `--window` outstanding (issued, not yet fsynced), as
  a broker with many producers waiting for receipts would have; every future covers an
  fsync (one per sync batch, batches every `--sync-timeout`). Printed with and without the
  cost of encoding the message first.
- read: every record back through `read_page` (and with `decode_message`).
- open: a store holding M messages (default 2,000,000 ≈ 200 pages of 10 MiB) opened after a
  clean close (summaries only), and after a kill (the live page has no summary: one scan).

Physical limits here (notes/benchmarking.md): ~400 MB/s sequential with fdatasync, ~4,400
fsyncs/s, so 1 KiB appends are bounded near 350k/s by bandwidth, never by fsyncs.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from pipeline import pipelined

from pagemq.core.message import Message
from pagemq.core.message_codec import decode_message, encode_message
from pagemq.storage.paging.page_store import PagedRecord, PageStore

HEADERS = {
    "content-type": "application/json", "color": "red", "region": "eu-west",
    "correlation-id": "c0ffee-1234", "reply-to": "/queue/replies", "app-id": "bench",
}


def _message(i: int) -> Message:
    return Message(i, "bench", dict(HEADERS), b"x" * 1024, persistent=True, timestamp=1_700_000_000_000)


def _codec(count: int) -> None:
    message = _message(1)
    started = time.perf_counter()
    for _ in range(count):
        encode_message(message)
    encode_rate = count / (time.perf_counter() - started)
    data = encode_message(message)
    started = time.perf_counter()
    for _ in range(count):
        decode_message(data, "bench")
    decode_rate = count / (time.perf_counter() - started)
    print(f"{'codec encode':<30} {encode_rate:>12,.0f} msg/s   ({len(data)} bytes encoded)")
    print(f"{'codec decode':<30} {decode_rate:>12,.0f} msg/s")


def _store(directory: Path, page_size: int, sync_timeout: float) -> PageStore:
    store = PageStore(directory, "bench", page_size_bytes=page_size, sync_timeout=sync_timeout)
    store.open()
    store.start(asyncio.get_running_loop())
    return store


async def _append(directory: Path, count: int, window: int, page_size: int, sync_timeout: float) -> None:
    encoded = encode_message(_message(0))
    for label, encode in (("append (pre-encoded)", False), ("append (encode + append)", True)):
        shutil.rmtree(directory, ignore_errors=True)
        store = _store(directory, page_size, sync_timeout)
        message = _message(0)

        def one(i: int, store: PageStore = store, encode: bool = encode,
                message: Message = message) -> asyncio.Future[None] | None:
            payload = encode_message(message) if encode else encoded
            return store.append([PagedRecord(i, (1, 2), True, payload)])[2]

        started = time.perf_counter()
        await pipelined(count, window, one)
        seconds = time.perf_counter() - started
        stats = store.stats()
        await store.close()
        print(f"{label:<30} {count / seconds:>12,.0f} msg/s   {stats['bytes'] / seconds / 1e6:>6.1f} MB/s  "
              f"{stats['fsyncs']:>5} fsyncs  {count / max(stats['batches'], 1):>7.1f} msg/batch")


def _read(directory: Path, page_size: int) -> None:
    store = PageStore(directory, "bench", page_size_bytes=page_size)
    pages = store.open()
    for label, decode in (("read_page", False), ("read_page + decode", True)):
        count = 0
        started = time.perf_counter()
        for info in pages:
            for _ordinal, record in store.read_page(info.page_no):
                if decode:
                    decode_message(record.message, "bench")
                count += 1
        seconds = time.perf_counter() - started
        print(f"{label:<30} {count / seconds:>12,.0f} msg/s   ({count} records, {len(pages)} pages)")


async def _fill(directory: Path, count: int, page_size: int, sync_timeout: float) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    store = _store(directory, page_size, sync_timeout)
    encoded = encode_message(_message(0))
    started = time.perf_counter()
    await pipelined(count, 5000, lambda i: store.append([PagedRecord(i, (1,), True, encoded)])[2])
    await store.close()
    seconds = time.perf_counter() - started
    print(f"{'fill for open test':<30} {count / seconds:>12,.0f} msg/s   ({count} messages)")


def _open(directory: Path, page_size: int, label: str) -> None:
    started = time.perf_counter()
    store = PageStore(directory, "bench", page_size_bytes=page_size)
    pages = store.open()
    seconds = time.perf_counter() - started
    stats = store.stats()
    print(f"{label:<30} {seconds * 1000:>10.1f} ms     {len(pages)} pages, "
          f"{sum(p.count for p in pages):,} messages, {stats['summaries_read']} summaries read, "
          f"{stats['pages_scanned']} pages scanned")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--open-messages", type=int, default=2_000_000)
    parser.add_argument("--page-size", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--sync-timeout", type=float, default=0.003)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="page-bench-", dir=args.dir))
    try:
        _codec(args.count)
        asyncio.run(_append(root / "append", args.count, args.window, args.page_size, args.sync_timeout))
        _read(root / "append", args.page_size)
        if args.open_messages:
            asyncio.run(_fill(root / "open", args.open_messages, args.page_size, args.sync_timeout))
            _open(root / "open", args.page_size, "open after clean close")
            folder = next(p for p in (root / "open").iterdir() if p.is_dir())
            max(folder.glob("*.summary")).unlink()  # as after kill -9: the live page has none
            _open(root / "open", args.page_size, "open after kill (1 scan)")
            _open(root / "open", args.page_size, "open again")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

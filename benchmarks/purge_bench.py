"""Purge of a deep paged queue over the management API (issue 18's figure).

    .venv/bin/python benchmarks/purge_bench.py --messages 1M --cache /tmp/purge-cache
        [--runs 2] [--size 1024] [--producers 2] [--delete] [--json]

1. Fill, once per (messages, size), cached under `--cache`: a broker with `global-max-size`
   64 MiB and one anycast queue takes `--messages` persistent receipted messages from this
   directory's paging_bench client with no consumer (all but the first ~64 MiB page), then
   is stopped with SIGTERM. 1M 1 KiB messages are ~1.1 GB of page files.
2. R runs, each on a fresh copy of the cached data directory (journal copied, page files
   hard-linked: the broker never writes into an existing page file after a SIGTERM, and a
   purge unlinks its links, not the cache's): start the broker, read the queue's counts,
   page files and RSS, then `POST /api/queues/<q>/purge` and report the seconds until its
   answer (the purge is durable then), until no `*.page` file is left, the broker's RSS
   after, and the counts after.

Target: purge < 2 s and no page file left.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from paging_bench import QUEUE, Broker, broker_config, page_file_count, run_phase
from rss import format_mib, process_rss

PURGE_LIMIT = 2.0
GLOBAL_MAX_SIZE = "64MiB"


def _count(text: str) -> int:
    text = text.strip().upper()
    factor = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if factor > 1 else text) * factor)


@dataclass
class Run:
    messages_before: int
    paged_before: int
    page_files_before: int
    rss_before: int
    purged: int
    purge_seconds: int | float
    files_gone_seconds: float
    page_files_after: int
    messages_after: int
    rss_after: int

    def passed(self) -> bool:
        return self.purge_seconds < PURGE_LIMIT and self.page_files_after == 0 and self.messages_after == 0


def fill(cache: Path, messages: int, size: int, producers: int) -> Path:
    data = cache / f"data-{messages}-{size}"
    if (data / ".complete").exists():
        return data
    shutil.rmtree(data, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="fill-", dir=cache))
    broker = Broker(work, broker_config(GLOBAL_MAX_SIZE))
    broker.start()
    try:
        started = time.monotonic()
        phase = run_phase(broker, "fill", "producer", producers, messages, size, client="own")
        if not phase.complete:
            raise RuntimeError(f"fill incomplete: {phase.messages} of {messages}")
        print(f"fill: {messages:,} messages in {time.monotonic() - started:.1f}s", file=sys.stderr)
    finally:
        broker.stop(signal.SIGTERM)
    (work / "data").rename(data)
    shutil.rmtree(work, ignore_errors=True)
    (data / ".complete").write_text("")
    return data


def copy_data(source: Path, target: Path) -> None:
    """Journal and small files copied; page files hard-linked."""
    for root, _dirs, files in os.walk(source):
        rel = Path(root).relative_to(source)
        (target / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            if name == ".complete":
                continue
            src, dst = Path(root) / name, target / rel / name
            if name.endswith(".page"):
                os.link(src, dst)
            else:
                shutil.copy2(src, dst)


def purge_once(data: Path) -> Run:
    work = Path(tempfile.mkdtemp(prefix="purge-run-"))
    try:
        broker = Broker(work, broker_config(GLOBAL_MAX_SIZE))
        copy_data(data, broker.data_dir)
        broker.start()
        try:
            before = broker.queue()
            files_before = page_file_count(broker.data_dir)
            rss_before = process_rss(broker.pid)
            request = urllib.request.Request(
                f"http://127.0.0.1:{broker.http_port}/api/queues/{QUEUE}/purge", method="POST")
            started = time.monotonic()
            with urllib.request.urlopen(request, timeout=120) as response:
                answer = json.loads(response.read())
            purge_seconds = time.monotonic() - started
            while page_file_count(broker.data_dir) and time.monotonic() - started < 60:
                time.sleep(0.005)
            gone = time.monotonic() - started
            after = broker.queue()
            return Run(before["messages"], before["messages_paged"], files_before, rss_before,
                       answer["purged"], round(purge_seconds, 3), round(gone, 3),
                       page_file_count(broker.data_dir), after["messages"], process_rss(broker.pid))
        finally:
            broker.stop(signal.SIGTERM)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", default="1M")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "purge-bench-cache")
    parser.add_argument("--delete", action="store_true", help="remove the cache when done")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    messages = _count(args.messages)
    args.cache.mkdir(parents=True, exist_ok=True)
    try:
        data = fill(args.cache, messages, args.size, args.producers)
        runs = []
        for n in range(args.runs):
            run = purge_once(data)
            runs.append(run)
            print(f"run {n + 1}: {run.messages_before:,} messages ({run.paged_before:,} paged, "
                  f"{run.page_files_before} page files, RSS {format_mib(run.rss_before)}) -> purged "
                  f"{run.purged:,} in {run.purge_seconds:.3f}s, page files gone after "
                  f"{run.files_gone_seconds:.3f}s (left: {run.page_files_after}), messages after "
                  f"{run.messages_after}, RSS after {format_mib(run.rss_after)}  "
                  f"{'PASS' if run.passed() else 'FAIL'} (purge < {PURGE_LIMIT:.0f} s, no page file)")
        if args.json:
            print(json.dumps({"messages": messages, "size": args.size, "runs": [asdict(r) for r in runs]}))
        return 0 if all(r.passed() for r in runs) else 1
    finally:
        if args.delete:
            shutil.rmtree(args.cache, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

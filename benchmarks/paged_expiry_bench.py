"""The expiry scan of page files (core/paged_expiry.py): what it costs when something is due,
and when nothing is.

    .venv/bin/python benchmarks/paged_expiry_bench.py [--messages 20000] [--addresses 2000]
        [--idle-seconds 20]

1. due: `--messages` persistent 1 KiB messages to one queue nobody consumes (1 MiB pages,
   `max-size-bytes` 1 MiB, so nearly all page), every second one expiring at the same
   moment; `message-expiry-scan-period` 1 s. Reported: how long after that moment every
   due one had moved to `ExpiryQueue`, and the STOMP round trip (a SEND with a receipt, on
   another connection, every 20 ms) meanwhile: what the scan's turns on the event loop
   cost other clients.
2. idle: `--addresses` paging addresses of 3 messages each, none expiring (a page each),
   then the broker's CPU seconds over `--idle-seconds` with the scan every second and with
   it off (`-1`): what looking at pages that hold nothing due costs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from brokerproc import BrokerProcess, StompClient, now_ms

PAGES = {"page-size-bytes": "1MiB", "max-size-bytes": "1MiB"}


def cpu_seconds(proc: BrokerProcess) -> float:
    fields = Path(f"/proc/{proc.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def due(messages: int, workdir: Path) -> None:
    config = {"broker": {"message-expiry-scan-period": "1s"}, "address-settings": {"#": PAGES}}
    proc = BrokerProcess(workdir / "due", config).start()
    try:
        producer = StompClient(proc.stomp_port).connect()
        moment = now_ms() + 5000 + messages // 4  # after the sends (~4,000-8,000 a second here)
        for n in range(messages):
            headers = {"persistent": "true", "n": n}
            if n % 2 == 0:
                headers["expires"] = moment
            producer.send("/queue/big", "x" * 1024, headers=headers, receipt=n % 500 == 499)
        producer.send("/queue/big", "end", headers={"persistent": "true"}, receipt=True)
        if now_ms() >= moment:
            raise SystemExit("the sends took longer than planned: fewer --messages")
        paged = proc.queue("big")["messages_paged"]
        ping = StompClient(proc.stomp_port).connect()
        trips: list[float] = []
        took = None
        while now_ms() < moment + 60_000:
            started = time.monotonic()
            ping.send("/queue/ping", "p", receipt=True)
            if now_ms() > moment:
                trips.append(time.monotonic() - started)
                if proc.queue("big")["messages_expired"] >= (messages + 1) // 2:
                    took = now_ms() - moment
                    break
            time.sleep(0.02)
        trips.sort()
        print(f"due: {messages} messages, {paged} paged, {(messages + 1) // 2} expiring at once: all moved "
              f"within {took} ms (scan period 1 s); STOMP round trip meanwhile p50 "
              f"{trips[len(trips) // 2] * 1000:.1f} ms, p99 {trips[int(len(trips) * 0.99)] * 1000:.1f} ms, "
              f"max {trips[-1] * 1000:.1f} ms ({len(trips)} trips)")
    finally:
        proc.stop()


def idle(addresses: int, seconds: float, workdir: Path) -> None:
    for period in ("1s", -1):
        config = {"broker": {"message-expiry-scan-period": period},
                  "address-settings": {"#": {**PAGES, "max-size-bytes": 0}}}
        proc = BrokerProcess(workdir / f"idle{period}", config).start()
        try:
            producer = StompClient(proc.stomp_port).connect()
            for a in range(addresses):
                for n in range(3):
                    producer.send(f"/queue/tenant.{a}", "y" * 256, headers={"persistent": "true"},
                                  receipt=n == 2 and a % 100 == 99)
            producer.send("/queue/tenant.0", "sync", headers={"persistent": "true"}, receipt=True)
            time.sleep(2)
            before = cpu_seconds(proc)
            time.sleep(seconds)
            used = cpu_seconds(proc) - before
            print(f"idle: {addresses} paging addresses, nothing expiring, scan period {period}: broker CPU "
                  f"{used:.2f} s over {seconds:g} s")
        finally:
            proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--addresses", type=int, default=2_000)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="paged-expiry-bench-"))
    due(args.messages, workdir)
    idle(args.addresses, args.idle_seconds, workdir)


if __name__ == "__main__":
    main()

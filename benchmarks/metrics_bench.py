"""How long `GET /metrics` takes on a real broker with many queues (issue 18: < 200 ms at 10,000).

    .venv/bin/python benchmarks/metrics_bench.py [--queues 10000] [--scrapes 20] [--openmetrics]

Starts `pagemq serve` on a fresh data directory with N anycast addresses configured (each
with its queue, so N addresses and N queues: ~16 samples each), sends one message to every
100th queue over STOMP so the figures are not all zero, then times N scrapes from a client
on the same machine (wall time from request to the last byte) and prints min / median / max
and the body size, and how late the broker's event loop ran meanwhile (`GET /api/broker
?since=`): a scrape reads the figures on the loop and writes the text in a thread, so that
lag is what the other clients of the broker felt.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PAGEMQ = str(Path(sys.executable).with_name("pagemq"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(queues: int) -> str:
    return "".join(f'[[addresses]]\nname = "bench.q{n:05d}"\n' for n in range(queues))


def _send(port: int, destinations: list[str]) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        frames = b"".join(f"SEND\ndestination:/queue/{d}\n\nhello\0".encode() for d in destinations)
        sock.sendall(frames + b"DISCONNECT\nreceipt:end\n\n\0")
        seen = b""
        while b"receipt-id:end" not in seen:
            chunk = sock.recv(65536)
            if not chunk:
                break
            seen += chunk


def _scrape(url: str, accept: str | None) -> tuple[float, int]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        size = len(response.read())
    return time.perf_counter() - started, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--openmetrics", action="store_true", help="ask for OpenMetrics")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="metrics-bench-"))
    (work / "pagemq.toml").write_text(_config(args.queues))
    stomp, http = _free_port(), _free_port()
    log = (work / "broker.log").open("wb")
    proc = subprocess.Popen(
        [PAGEMQ, "serve", "--config", str(work / "pagemq.toml"), "--data-dir", str(work / "data"),
         "--stomp", f"127.0.0.1:{stomp}", "--http", f"127.0.0.1:{http}", "--log-level", "WARNING"],
        stdout=log, stderr=log,
    )
    try:
        url = f"http://127.0.0.1:{http}/metrics"
        deadline = time.monotonic() + 60
        while True:
            try:
                _scrape(url, None)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"broker did not start; log in {work / 'broker.log'}") from None
                time.sleep(0.2)
        _send(stomp, [f"bench.q{n:05d}" for n in range(0, args.queues, 100)])
        accept = "application/openmetrics-text; version=1.0.0" if args.openmetrics else None
        times = []
        size = 0
        time.sleep(1.1)  # the lag figures are kept per whole second: start in a fresh one
        since = time.time()
        for _ in range(args.scrapes):
            took, size = _scrape(url, accept)
            times.append(took)
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/api/broker?since={since}", timeout=30) as r:
            lag = json.loads(r.read())["event_loop"]
        print(f"/metrics with {args.queues} queues ({'OpenMetrics' if accept else 'text 0.0.4'}, "
              f"{size / 1e6:.1f} MB, {args.scrapes} scrapes): min {min(times) * 1000:.0f} ms, "
              f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms; "
              f"event loop meanwhile: at most {lag['lag_max_ms']:.0f} ms late, "
              f"{lag['stalls']} stalls >= 50 ms")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()

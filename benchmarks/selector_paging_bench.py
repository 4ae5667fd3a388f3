"""The selector issue's figure: a red message behind a million paged blue ones, at once.

    .venv/bin/python benchmarks/selector_paging_bench.py [--messages 100000] [--size 256]
        [--producers 4] [--processes P] [--selector S] [--page-size 10MiB] [--global-max-size 64MiB]
        [--dir DIR] [--keep] [--json]

Artemis and HornetQ starve a consumer whose selector matches nothing that is in memory:
with `color='red'` one million messages after the blue ones, it gets nothing until the blue
ones are consumed (seed 000, 1.). pagemq's selective consumers look ahead in the page files.

What it does, one fresh broker (`pagemq serve`, global-max-size 64 MiB, journal-sync,
default page size 10 MiB) per run:
1. fill: `--messages` persistent blue messages (header `color:blue`) into one anycast queue
   with no consumer, by `pagemq perf --phase produce` (separate producer processes,
   pipelined receipts); then one red message (`color:red`) with stomp.py, receipted;
2. the broker's RSS (its process tree) is read: "before";
3. a new consumer subscribes with `selector: color = 'red'`; the time from sending its
   SUBSCRIBE to the red MESSAGE is the figure; RSS is sampled every 20 ms meanwhile;
4. the red message is acknowledged; the queue must still hold every blue message, none
   delivering; RSS "after".
Targets (PASS/FAIL lines): red in < 1 s; broker peak RSS < 160 MiB (the paging benchmark's
bound for a 64 MiB global-max-size) before, during and after; no blue consumed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import stomp
from rss import RssSampler, format_mib, tree_rss

HOST = "127.0.0.1"
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
QUEUE = "selector-bench"
SELECTOR = "color = 'red'"
MIB = 1 << 20

RED_LIMIT = 1.0
RSS_LIMIT = 160 * MIB


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class Broker:
    """`pagemq serve` on free ports with a TOML config; stderr to broker.log."""

    def __init__(self, workdir: Path, global_max_size: str, page_size: str) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.config_path = workdir / "pagemq.toml"
        self.config_path.write_text(
            "[broker]\n"
            f'global-max-size = "{global_max_size}"\n'
            "journal-sync = true\n\n"
            '[address-settings."#"]\n'
            f'page-size-bytes = "{page_size}"\n\n'
            "[[addresses]]\n"
            f'name = "{QUEUE}"\n'
            'routing-type = "anycast"\n'
        )
        self.log_path = workdir / "broker.log"
        self.stomp_port, self.http_port = _free_port(), _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [PAGEMQ, "serve", "--data-dir", str(self.data_dir), "--config", str(self.config_path),
                 "--stomp", f"{HOST}:{self.stomp_port}", "--http", f"{HOST}:{self.http_port}"],
                cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.queue()
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker not ready after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 120.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode

    def http(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://{HOST}:{self.http_port}{path}", timeout=30) as response:
            return json.loads(response.read())

    def queue(self) -> dict[str, Any]:
        return self.http(f"/api/queues/{QUEUE}")

    def address(self) -> dict[str, Any]:
        return self.http(f"/api/addresses/{QUEUE}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


# -- clients --------------------------------------------------------------------------------------


def fill_blue(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    """`pagemq perf --phase produce` with header color:blue; its JSON report."""
    command = [
        PAGEMQ, "perf", "--url", f"stomp://{HOST}:{broker.stomp_port}", "--destination", f"/queue/{QUEUE}",
        "--header", "color:blue", "--phase", "produce", "--count", str(args.messages),
        "--producers", str(args.producers), "--size", str(args.size), "--persistent",
        "--broker-pid", str(broker.pid), "--idle-timeout", "60s", "--json",
    ]
    if args.processes:
        command += ["--processes", str(args.processes)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pagemq perf exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[tuple[float, Any]] = []
        self.receipts: set[str] = set()
        self.errors: list[Any] = []

    def on_message(self, frame: Any) -> None:
        with self.cond:
            self.messages.append((time.monotonic(), frame))
            self.cond.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipts.add(frame.headers.get("receipt-id", ""))
            self.cond.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def wait(self, predicate: Any, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate() or bool(self.errors), timeout)


def connect(port: int) -> tuple[stomp.Connection12, Listener]:
    conn = stomp.Connection12([(HOST, port)], heartbeats=(0, 0), reconnect_attempts_max=1)
    listener = Listener()
    conn.set_listener("bench", listener)
    conn.connect(wait=True)
    return conn, listener


def send_red(port: int, size: int) -> None:
    conn, listener = connect(port)
    try:
        conn.send(f"/queue/{QUEUE}", "red|" + "r" * max(0, size - 4),
                  headers={"color": "red", "persistent": "true", "receipt": "red"})
        if not listener.wait(lambda: "red" in listener.receipts, 30) or listener.errors:
            raise RuntimeError(f"no RECEIPT for the red message: {[e.headers for e in listener.errors]}")
    finally:
        conn.disconnect()


def red_consumer(broker: Broker, timeout: float, selector: str) -> dict[str, Any]:
    """Subscribe with the selector; seconds until the red MESSAGE, RSS sampled meanwhile."""
    conn, listener = connect(broker.stomp_port)
    try:
        with RssSampler(broker.pid, interval=0.02, tree_every=50) as sampler:
            started = time.monotonic()
            conn.subscribe(f"/queue/{QUEUE}", id="red", ack="client-individual",
                           headers={"selector": selector, "activemq.prefetchSize": "1000"})
            arrived = listener.wait(lambda: bool(listener.messages), timeout)
            seconds = (listener.messages[0][0] - started) if listener.messages else None
            if arrived and listener.messages:
                frame = listener.messages[0][1]
                conn.ack(frame.headers["ack"], receipt="ack")
                listener.wait(lambda: "ack" in listener.receipts, 30)
            time.sleep(0.5)  # anything else it would get
        frames = [f for _, f in listener.messages]
        return {
            "seconds": seconds,
            "messages": len(frames),
            "colors": sorted({f.headers.get("color", "?") for f in frames}),
            "errors": [(e.headers, e.body) for e in listener.errors],
            "rss_peak": sampler.peak,
        }
    finally:
        with contextlib.suppress(Exception):
            conn.disconnect()


# -- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    broker = Broker(workdir, args.global_max_size, args.page_size)
    broker.start()
    try:
        rss_start = tree_rss(broker.pid)
        fill_started = time.monotonic()
        perf = fill_blue(broker, args)
        send_red(broker.stomp_port, args.size)
        fill_seconds = time.monotonic() - fill_started
        queue, address = broker.queue(), broker.address()
        if queue["messages"] != args.messages + 1:
            raise RuntimeError(f"after the fill the queue holds {queue['messages']}, "
                               f"expected {args.messages + 1}: {queue}")
        time.sleep(1.0)  # let the fill's transient memory settle before "before"
        rss_before = tree_rss(broker.pid)
        red = red_consumer(broker, args.timeout, args.selector)
        time.sleep(0.5)
        rss_after = tree_rss(broker.pid)
        queue_after = broker.queue()
        if not perf.get("complete", False):
            raise RuntimeError(f"pagemq perf did not complete the fill: {perf.get('error')}")
        phases = perf.get("results") or []
        fill_peak = int(max((p.get("broker_peak_rss_mib") or 0 for p in phases), default=0) * MIB)
        return {
            "messages": args.messages, "size": args.size, "producers": args.producers,
            "selector": args.selector,
            "global_max_size": args.global_max_size, "page_size": args.page_size,
            "fill_seconds": fill_seconds,
            "fill_rate": (args.messages + 1) / fill_seconds if fill_seconds else None,
            "messages_paged": address["messages_paged"], "messages_in_memory": address["messages_in_memory"],
            "page_files": address["page_files"], "paging": address["paging"],
            "red_seconds": red["seconds"], "red_consumer_messages": red["messages"],
            "red_consumer_colors": red["colors"], "red_consumer_errors": red["errors"],
            "rss_start": rss_start, "rss_fill_peak": fill_peak, "rss_before": rss_before,
            "rss_peak_while_waiting": red["rss_peak"], "rss_after": rss_after,
            "queue_after": {k: queue_after[k] for k in (
                "messages", "messages_delivering", "messages_acknowledged", "messages_paged")},
        }
    finally:
        code = broker.stop()
        if code not in (0, None):
            print(f"broker exited with {code}:\n{broker.log_tail()}", file=sys.stderr)


def verdicts(result: dict[str, Any]) -> list[tuple[bool, str]]:
    seconds = result["red_seconds"]
    rss = {k: result[k] for k in ("rss_fill_peak", "rss_before", "rss_peak_while_waiting", "rss_after")}
    queue = result["queue_after"]
    return [
        (result["paging"] and result["messages_paged"] > 0,
         f"{result['messages_paged']:,} of {result['messages'] + 1:,} messages paged, the red one "
         "among them (target: the address pages; with too few messages it does not)"),
        (seconds is not None and seconds < RED_LIMIT,
         f"red message behind {result['messages']:,} paged blue ones in "
         f"{'never' if seconds is None else f'{seconds:.3f} s'} (target < {RED_LIMIT:.0f} s)"),
        (result["red_consumer_messages"] == 1 and result["red_consumer_colors"] == ["red"],
         f"the selective consumer got {result['red_consumer_messages']} message(s), colors "
         f"{result['red_consumer_colors']} (target: exactly the red one)"),
        (queue["messages"] == result["messages"] and queue["messages_delivering"] == 0,
         f"queue after: {queue['messages']:,} messages, {queue['messages_delivering']} delivering "
         f"(target: all {result['messages']:,} blue ones left, none delivering)"),
        (max(rss.values()) < RSS_LIMIT,
         "broker RSS peak " + format_mib(max(rss.values())) + f" (target < {format_mib(RSS_LIMIT)})"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="blue messages (figure: 1000000)")
    parser.add_argument("--size", type=int, default=256, help="body bytes (default 256)")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--processes", type=int, default=0, help="perf worker processes (default: perf's)")
    parser.add_argument("--selector", default=SELECTOR,
                        help=f"the consumer's selector (default \"{SELECTOR}\"); it must match the red "
                             "message only, e.g. \"color LIKE 'r%%'\", which page summaries cannot rule out")
    parser.add_argument("--page-size", default="10MiB")
    parser.add_argument("--global-max-size", default="64MiB")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up on the red message after this")
    parser.add_argument("--dir", type=Path, help="work directory (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line too")
    args = parser.parse_args()

    workdir = args.dir or Path(tempfile.mkdtemp(prefix="selector-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = run(args, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"selector paging benchmark: {result['messages']:,} blue + 1 red, {result['size']} B bodies, "
          f"persistent, global-max-size {result['global_max_size']}, page size {result['page_size']}")
    print(f"fill:  {result['fill_seconds']:.1f} s ({result['fill_rate']:,.0f} msg/s, "
          f"{result['producers']} producers); paged {result['messages_paged']:,}, in memory "
          f"{result['messages_in_memory']:,}, page files {result['page_files']}")
    seconds = result["red_seconds"]
    shown = "never" if seconds is None else f"{seconds:.3f} s"
    print(f"red:   {shown} from SUBSCRIBE (selector \"{result['selector']}\") to the red MESSAGE")
    print(f"RSS:   start {format_mib(result['rss_start'])}, fill peak {format_mib(result['rss_fill_peak'])}, "
          f"before {format_mib(result['rss_before'])}, peak while waiting "
          f"{format_mib(result['rss_peak_while_waiting'])}, after {format_mib(result['rss_after'])}")
    checks = verdicts(result)
    for ok, text in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    if args.json:
        print(json.dumps(result, separators=(",", ":")))
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

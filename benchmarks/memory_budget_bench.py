"""The one memory budget under many readers (issue 16): RSS of the broker while many durable
subscribers of a paged topic, or many consumers of a paged queue, all read back at once.

    python benchmarks/memory_budget_bench.py --subscribers 200 --messages 1000000
    python benchmarks/memory_budget_bench.py --mode queue --consumers 1000 --prefetch 1000
    python benchmarks/memory_budget_bench.py --mode block --producers 8 --duration 60
    python benchmarks/memory_budget_bench.py --mode selector --messages 10000000 --fill-connections 4

block mode: `--producers` connections send persistent messages at full speed (pipelined
receipts) for `--duration` seconds into an address with `max-size-bytes = --max-size` and
`address-full-policy = BLOCK` and no consumer; then one consumer drains it while the producers
finish. Every receipted message must be consumed; RSS bound: max-size + idle RSS + 40 MiB.
selector mode: every other message of the paged backlog is red; one consumer with the
selector `color = 'red'` takes them all (the others stay paged, acknowledged gaps on every page).

1. Starts the broker (`pagemq serve`) with `global-max-size` (default 64MiB) and every
   message of the address paging (`max-size-bytes = 0`).
2. topic mode: creates `--subscribers` durable subscriptions of one topic, disconnects them;
   queue mode: nothing. Then `--messages` persistent messages of `--size` bytes are sent
   (pipelined receipts) and the broker's idle RSS is read.
3. Every subscriber (or consumer) connects at once, with `--prefetch`, and consumes,
   acknowledging with cumulative `client` acks every `--ack-every` messages, in one asyncio
   process (the project's own STOMP codec: cheap enough for 1,000 connections).
   `--fill-connections` producers share the fill (a 10M backlog in minutes, not an hour).
4. The broker's RSS is sampled every 0.2 s throughout; at the end the bound
   `global-max-size + idle RSS + 40 MiB` is checked against the peak, and every subscriber
   must have received every message (topic) / the consumers all of them once (queue).

Prints one JSON line with the figures, with the CPU seconds the broker and this client
process used while consuming (which of the two limits the rate) and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rss import RssSampler, format_mib, process_rss

from pagemq.protocol.stomp.frames import encode_frame
from pagemq.protocol.stomp.parser import FrameParser
from pagemq.units import parse_size

MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Connection:
    """One STOMP 1.2 connection over asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = FrameParser()
        self.frames: list = []

    @classmethod
    async def open(cls, port: int, client_id: str | None = None) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        conn = cls(reader, writer)
        headers = [("accept-version", "1.2"), ("host", "127.0.0.1"), ("heart-beat", "0,0")]
        if client_id:
            headers.append(("client-id", client_id))
        writer.write(encode_frame("CONNECT", headers))
        frame = await conn.next_frame()
        assert frame.command == "CONNECTED", frame
        return conn

    async def next_frame(self):
        while not self.frames:
            data = await self.reader.read(256 * 1024)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.frames.extend(self.parser.feed(data))
        return self.frames.pop(0)

    async def receipt(self, headers: list[tuple[str, str]], command: str) -> None:
        self.writer.write(encode_frame(command, [*headers, ("receipt", "r")]))
        while (await self.next_frame()).command != "RECEIPT":
            pass

    def close(self) -> None:
        self.writer.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc/PID/stat)."""
    stat = (Path("/proc") / str(pid) / "stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuWatch:
    """CPU seconds of the broker and of this client between `start` and `stop`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.figures: dict[str, object] = {}

    def __enter__(self) -> CpuWatch:
        self._broker, self._client = cpu_seconds(self.pid), time.process_time()
        self._wall, self._load = time.monotonic(), os.getloadavg()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._wall
        broker = cpu_seconds(self.pid) - self._broker
        client = time.process_time() - self._client
        self.figures = {
            "broker_cpu_s": round(broker, 1), "client_cpu_s": round(client, 1),
            "broker_cpu_share": round(broker / wall, 2) if wall else None,
            "client_cpu_share": round(client / wall, 2) if wall else None,
            "loadavg_before": [round(x, 2) for x in self._load],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }


class BudgetSampler:
    """Polls `GET /api/broker` every 0.5 s on a thread: the peaks of the memory budget's use
    and of its parts (what the broker accounts, beside the RSS the kernel reports)."""

    FIELDS = ("used_bytes", "read_back_bytes", "connection_buffer_bytes", "page_read_ahead_bytes",
              "browse_read_ahead_bytes", "expiry_timer_bytes", "journal_index_bytes")

    def __init__(self, http_port: int) -> None:
        self.url = f"http://127.0.0.1:{http_port}/api/broker"
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    memory = json.load(response)["memory"]
            except (OSError, ValueError, KeyError):
                continue
            for field in self.FIELDS:
                if isinstance(memory.get(field), int):
                    self.peaks[field] = max(self.peaks.get(field, 0), memory[field])

    def __enter__(self) -> BudgetSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def figures(self) -> dict[str, str]:
        return {f"peak_{field}": format_mib(value) for field, value in self.peaks.items()}


async def fill(port: int, destination: str, count: int, size: int, connections: int,
               colors: bool = False) -> tuple[float, int]:
    """`count` messages over `connections` producers; (messages/s, how many are red)."""
    shares = [count // connections + (1 if n < count % connections else 0) for n in range(connections)]
    started = time.monotonic()
    await asyncio.gather(*(produce(port, destination, share, size, colors) for share in shares if share))
    red = sum((share + 1) // 2 for share in shares) if colors else 0
    return count / (time.monotonic() - started), red


async def produce(port: int, destination: str, count: int, size: int, colors: bool = False) -> float:
    conn = await Connection.open(port)
    body = b"x" * size
    started = time.monotonic()
    window, sent, confirmed = 2000, 0, 0
    while sent < count:
        batch = []
        while sent < count and sent - confirmed < window:
            sent += 1
            headers = [("destination", destination), ("persistent", "true"), ("receipt", str(sent))]
            if colors:  # every other message red (selector mode)
                headers.append(("color", "red" if sent % 2 else "blue"))
            batch.append(encode_frame("SEND", headers, body))
        conn.writer.write(b"".join(batch))
        while sent - confirmed >= window or (sent == count and confirmed < count):
            frame = await conn.next_frame()
            assert frame.command == "RECEIPT", (frame.command, frame.headers)
            confirmed = int(frame.headers["receipt-id"])
    conn.close()
    return count / (time.monotonic() - started)


async def consume(port: int, destination: str, client_id: str | None, durable: str | None,
                  prefetch: int, ack_every: int, stop: asyncio.Event, counts: list[int], index: int,
                  selector: str | None = None) -> None:
    conn = await Connection.open(port, client_id)
    headers = [("destination", destination), ("id", "1"), ("ack", "client"),
               ("activemq.prefetchSize", str(prefetch))]
    if selector:
        headers.append(("selector", selector))
    if durable:
        headers.append(("durable-subscription-name", durable))
    conn.writer.write(encode_frame("SUBSCRIBE", headers))
    since_ack = 0
    try:
        while not stop.is_set():
            try:
                frame = await asyncio.wait_for(conn.next_frame(), 0.5)
            except TimeoutError:
                continue
            if frame.command != "MESSAGE":
                raise RuntimeError(f"{frame.command} {frame.headers}")
            counts[index] += 1
            since_ack += 1
            # Cumulative ACK every `ack_every`, and whenever nothing more is buffered: a
            # client that waited for a full batch would wait forever on a broker that keeps
            # its window below the batch (a tight budget gives each reader one message).
            if since_ack >= ack_every or not conn.frames:
                conn.writer.write(encode_frame("ACK", [("id", frame.headers["ack"])]))
                since_ack = 0
    finally:
        conn.close()


async def produce_for(port: int, destination: str, seconds: float, size: int, sent: list[int],
                      index: int) -> None:
    """Persistent SENDs with pipelined receipts for `seconds`; counts receipted ones."""
    conn = await Connection.open(port)
    body = b"x" * size
    window, issued, confirmed = 500, 0, 0
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at or confirmed < issued:
        if time.monotonic() < stop_at and issued - confirmed < window:
            batch = []
            while issued - confirmed < window:
                issued += 1
                batch.append(encode_frame("SEND", [("destination", destination), ("persistent", "true"),
                                                   ("receipt", str(issued))], body))
            conn.writer.write(b"".join(batch))
        try:
            frame = await asyncio.wait_for(conn.next_frame(), 1.0)
        except TimeoutError:
            continue  # blocked: the broker stopped reading us; keep waiting for receipts
        assert frame.command == "RECEIPT", (frame.command, frame.headers)
        confirmed = int(frame.headers["receipt-id"])
        sent[index] = confirmed
    conn.close()


async def run_block(args: argparse.Namespace, port: int, pid: int) -> dict[str, object]:
    """8 producers at full speed into a BLOCK address with no consumer, then a consumer."""
    destination = "/queue/blocked"
    await asyncio.sleep(0.5)
    idle = process_rss(pid)
    sent = [0] * args.producers
    with RssSampler(pid, interval=0.2) as sampler:
        producers = [asyncio.create_task(produce_for(port, destination, args.duration, args.size, sent, n))
                     for n in range(args.producers)]
        await asyncio.sleep(args.duration)
        blocked_total = sum(sent)
        counts = [0]
        stop = asyncio.Event()
        consumer = asyncio.create_task(consume(port, destination, None, None, args.prefetch,
                                               args.ack_every, stop, counts, 0))
        await asyncio.wait_for(asyncio.gather(*producers), args.timeout)
        total = sum(sent)
        deadline = time.monotonic() + args.timeout
        while counts[0] < total and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(consumer, return_exceptions=True)
    limit = parse_size(args.max_size, "max-size-bytes")
    bound = limit + idle + 40 * MIB
    return {
        "mode": "block", "producers": args.producers, "seconds": args.duration, "size": args.size,
        "max_size_bytes": args.max_size, "receipted_while_blocking": blocked_total,
        "receipted": total, "consumed": counts[0], "nothing_lost": counts[0] == total,
        "idle_rss": format_mib(idle), "peak_rss": format_mib(sampler.peak), "bound": format_mib(bound),
        "within_bound": sampler.peak <= bound,
    }


async def run_selector(args: argparse.Namespace, port: int, pid: int) -> dict[str, object]:
    """One consumer with a selector taking every other message of a paged backlog."""
    destination = "/queue/budget"
    with RssSampler(pid, interval=0.2) as filling:
        fill_rate, expected = await fill(port, destination, args.messages, args.size,
                                         args.fill_connections, colors=True)
    await asyncio.sleep(1.0)
    idle = process_rss(pid)
    counts = [0]
    stop = asyncio.Event()
    started = time.monotonic()
    with RssSampler(pid, interval=0.2) as sampler, CpuWatch(pid) as cpu:
        task = asyncio.create_task(consume(port, destination, None, None, args.prefetch, args.ack_every,
                                           stop, counts, 0, selector="color = 'red'"))
        deadline = started + args.timeout
        while counts[0] < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        elapsed = time.monotonic() - started
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
    bound = parse_size(args.global_max_size, "global-max-size") + idle + 40 * MIB
    return {
        "mode": "selector", "messages": args.messages, "size": args.size,
        "global_max_size": args.global_max_size, "fill_msgs_per_s": round(fill_rate),
        "matched": counts[0], "expected": expected, "nothing_lost": counts[0] == expected,
        "deliveries_per_s": round(counts[0] / elapsed), "seconds": round(elapsed, 1),
        "idle_rss": format_mib(idle), "peak_rss": format_mib(sampler.peak), "bound": format_mib(bound),
        "within_bound": sampler.peak <= bound, "fill_peak_rss": format_mib(filling.peak), **cpu.figures,
    }


async def run(args: argparse.Namespace, port: int, pid: int) -> dict[str, object]:
    if args.mode == "block":
        return await run_block(args, port, pid)
    if args.mode == "selector":
        return await run_selector(args, port, pid)
    topic = args.mode == "topic"
    destination = "/topic/budget" if topic else "/queue/budget"
    readers = args.subscribers if topic else args.consumers
    if topic:  # the durable subscriptions exist before the messages are sent
        for n in range(readers):
            conn = await Connection.open(port, f"c{n}")
            await conn.receipt([("destination", destination), ("id", "1"), ("ack", "client"),
                                ("durable-subscription-name", "s")], "SUBSCRIBE")
            conn.close()
    with RssSampler(pid, interval=0.2) as filling:
        fill_rate, _ = await fill(port, destination, args.messages, args.size, args.fill_connections)
    await asyncio.sleep(1.0)
    idle = process_rss(pid)
    expected = args.messages * (readers if topic else 1)
    counts = [0] * readers
    stop = asyncio.Event()
    bound = parse_size(args.global_max_size, "global-max-size") + idle + 40 * MIB
    started = time.monotonic()
    with RssSampler(pid, interval=0.2) as sampler, CpuWatch(pid) as cpu:
        tasks = [asyncio.create_task(consume(port, destination, f"c{n}" if topic else None,
                                             "s" if topic else None, args.prefetch, args.ack_every,
                                             stop, counts, n)) for n in range(readers)]
        deadline = started + args.timeout
        reported = started
        while sum(counts) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            if time.monotonic() - reported >= args.progress_every:
                # A run of hours says how far it is, so a stopped session still has figures.
                reported = time.monotonic()
                print(json.dumps({"seconds": round(reported - started), "deliveries": sum(counts),
                                  "expected": expected, "peak_rss_so_far": format_mib(sampler.peak),
                                  "bound": format_mib(bound)}),
                      file=sys.stderr, flush=True)
        elapsed = time.monotonic() - started
        await asyncio.sleep(0.5)  # anything extra (a duplicate) would arrive now
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    complete = (all(c == args.messages for c in counts) if topic else sum(counts) == args.messages)
    return {
        "mode": args.mode, "readers": readers, "messages": args.messages, "size": args.size,
        "prefetch": args.prefetch, "global_max_size": args.global_max_size,
        "fill_msgs_per_s": round(fill_rate), "deliveries": sum(counts), "expected": expected,
        "every_reader_got_every_message": complete,
        "min_per_reader": min(counts), "max_per_reader": max(counts),
        "deliveries_per_s": round(sum(counts) / elapsed), "seconds": round(elapsed, 1),
        "idle_rss": format_mib(idle), "peak_rss": format_mib(sampler.peak), "bound": format_mib(bound),
        "within_bound": sampler.peak <= bound, "fill_peak_rss": format_mib(filling.peak), **cpu.figures,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("topic", "queue", "block", "selector"), default="topic")
    parser.add_argument("--producers", type=int, default=8, help="block mode")
    parser.add_argument("--duration", type=float, default=60.0, help="block mode: seconds of producing")
    parser.add_argument("--max-size", default="10MiB", help="block mode: the address's max-size-bytes")
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--consumers", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--ack-every", type=int, default=100)
    parser.add_argument("--global-max-size", default="64MiB")
    parser.add_argument("--page-size", default="10MiB")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--progress-every", type=float, default=60.0,
                        help="seconds between progress lines on stderr while readers consume")
    parser.add_argument("--fill-connections", type=int, default=1,
                        help="producer connections sharing the fill of the backlog")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pagemq-budget-"))
    stomp, http = free_port(), free_port()
    config = workdir / "pagemq.toml"
    config.write_text(
        f'[broker]\ndata-directory = "{workdir / "data"}"\nglobal-max-size = "{args.global_max_size}"\n'
        f'[acceptors]\nstomp = "127.0.0.1:{stomp}"\nhttp = "127.0.0.1:{http}"\n'
        f'[address-settings."#"]\nmax-size-bytes = 0\npage-size-bytes = "{args.page_size}"\n'
        f'[address-settings.blocked]\nmax-size-bytes = "{args.max_size}"\naddress-full-policy = "BLOCK"\n'
    )
    log = (workdir / "broker.log").open("w")
    # PAGEMQ_BENCH_SERVE: a script to run instead of `-m pagemq` (a profiling wrapper).
    wrapper = os.environ.get("PAGEMQ_BENCH_SERVE")
    launcher = [wrapper] if wrapper else ["-m", "pagemq"]
    broker = subprocess.Popen([sys.executable, *launcher, "serve", "--config", str(config)],
                              stderr=log, cwd=workdir)
    try:
        deadline = time.monotonic() + 60
        while "ready" not in (workdir / "broker.log").read_text():
            if broker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("broker did not start: " + (workdir / "broker.log").read_text())
            time.sleep(0.1)
        with BudgetSampler(http) as budget:
            figures = asyncio.run(run(args, stomp, broker.pid))
        figures.update(budget.figures())
        print(json.dumps(figures))
        complete = figures.get("every_reader_got_every_message", figures.get("nothing_lost"))
        return 0 if figures["within_bound"] and complete else 1
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

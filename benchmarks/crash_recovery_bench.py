"""Recovery time under repeated kill -9 (issue 13, defect 14).

A broker on one queue with 4 persistent producers and 4 consumers (client-individual acks)
is killed with SIGKILL every 3-10 s and started again, CYCLES times. Each start is timed
from the process start to the STOMP port accepting a connection. At the end the queue is
drained (every ACK receipted) and every message whose SEND was receipted must have been
acknowledged by a consumer: nothing receipted may be lost. Also printed per cycle: the
journal's files and bytes and the number of files under the paging directory and of temp
files, so growth anywhere shows.

    .venv/bin/python benchmarks/crash_recovery_bench.py [--cycles 30] [--seed N] [--json]

Target (issue 13): median start under 1 s, the last cycle no slower than the first.
Clients are raw-socket STOMP in worker processes (4 producers and 4 consumers over 2
processes by default), reconnecting whenever the broker goes away.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
QUEUE = "/queue/crash-bench"
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
RECEIPT_WINDOW = 200  # unreceipted SENDs a producer keeps in flight
ACK_RECEIPT_EVERY = 50
BODY = 512


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


# ----- a minimal STOMP client (bytes in, frames out) ------------------------------------------


class Stomp:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=2)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.send_frame("CONNECT", {"accept-version": "1.2", "host": HOST})
        frame = self.read(5.0)
        if frame is None or frame[0] != "CONNECTED":
            raise OSError(f"no CONNECTED: {frame}")

    def send_frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items())
        if body:
            head += f"content-length:{len(body)}\n"
        self.sock.sendall(head.encode() + b"\n" + body + b"\0")

    def read(self, timeout: float) -> tuple[str, dict[str, str], bytes] | None:
        """The next frame, None on timeout; OSError when the broker is gone."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], remaining)
            if ready:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise OSError("connection closed")
                self.buf += chunk

    def _parse(self) -> tuple[str, dict[str, str], bytes] | None:
        self.buf = self.buf.lstrip(b"\r\n")
        end = self.buf.find(b"\n\n")
        if end < 0:
            return None
        lines = self.buf[:end].decode().split("\n")
        headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
        start = end + 2
        if "content-length" in headers:
            stop = start + int(headers["content-length"])
            if len(self.buf) < stop + 1:
                return None
        else:
            stop = self.buf.find(b"\0", start)
            if stop < 0:
                return None
        body = self.buf[start:stop]
        self.buf = self.buf[stop + 1:]
        return lines[0], headers, body

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _connect(port: int, stop: mp.synchronize.Event) -> Stomp | None:
    while not stop.is_set():
        try:
            return Stomp(port)
        except OSError:
            time.sleep(0.05)
    return None


def producer(port: int, name: str, stop: mp.synchronize.Event, ledger: Path) -> None:
    """Sends numbered persistent messages; writes the ids whose RECEIPT came."""
    sent = 0
    receipted: list[str] = []
    while not stop.is_set():
        client = _connect(port, stop)
        if client is None:
            break
        outstanding: set[str] = set()
        try:
            while not stop.is_set():
                while len(outstanding) < RECEIPT_WINDOW and not stop.is_set():
                    body_id = f"{name}-{sent}"
                    sent += 1
                    client.send_frame("SEND", {"destination": QUEUE, "persistent": "true",
                                               "receipt": body_id}, body_id.encode().ljust(BODY, b"."))
                    outstanding.add(body_id)
                frame = client.read(1.0)
                while frame is not None:
                    if frame[0] == "RECEIPT":
                        outstanding.discard(frame[1]["receipt-id"])
                        receipted.append(frame[1]["receipt-id"])
                    frame = client.read(0)
        except OSError:
            pass
        # Stopping: wait (bounded) for the receipts still owed.
        with contextlib.suppress(OSError):
            deadline = time.monotonic() + 10
            while outstanding and time.monotonic() < deadline and stop.is_set():
                frame = client.read(0.5)
                if frame is not None and frame[0] == "RECEIPT":
                    outstanding.discard(frame[1]["receipt-id"])
                    receipted.append(frame[1]["receipt-id"])
        client.close()
    ledger.write_text("\n".join(receipted))


def consumer(port: int, name: str, stop: mp.synchronize.Event, ledger: Path) -> None:
    """Receives and acks every message (a receipt every ACK_RECEIPT_EVERY); writes the ids
    it sent an ACK for. An ACK cut off by a kill may or may not have been stored, so a
    message acked once may legitimately be gone: "lost" is receipted and never acked."""
    acked: list[str] = []
    while not stop.is_set():
        client = _connect(port, stop)
        if client is None:
            break
        count = 0
        try:
            client.send_frame("SUBSCRIBE", {"destination": QUEUE, "id": "0", "ack": "client-individual",
                                            "activemq.prefetchSize": "200"})
            while not stop.is_set():
                frame = client.read(0.5)
                if frame is None or frame[0] != "MESSAGE":
                    continue
                count += 1
                headers = {"id": frame[1]["ack"]}
                if count % ACK_RECEIPT_EVERY == 0:
                    headers["receipt"] = f"{name}-ack-{count}"
                client.send_frame("ACK", headers)
                acked.append(frame[2].rstrip(b".").decode())
        except OSError:
            pass
        client.close()
    ledger.write_text("\n".join(acked))


def _encode(frame: tuple[str, dict[str, str], bytes]) -> bytes:
    command, headers, body = frame
    head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items())
    return head.encode() + b"\n" + body + b"\0"


def final_acker(port: int, ledger: Path) -> None:
    """Drains what is left, acking each message with a receipt, until the queue is idle."""
    client = Stomp(port)
    client.send_frame("SUBSCRIBE", {"destination": QUEUE, "id": "0", "ack": "client-individual",
                                    "activemq.prefetchSize": "1000"})
    acked: list[str] = []
    n = 0
    while True:
        frame = client.read(3.0)
        if frame is None:
            break
        if frame[0] != "MESSAGE":
            continue
        n += 1
        client.send_frame("ACK", {"id": frame[1]["ack"], "receipt": f"f{n}"})
        body_id = frame[2].rstrip(b".").decode()
        while True:
            reply = client.read(10.0)
            if reply is None:
                raise OSError("no receipt for a final ACK")
            if reply[0] == "RECEIPT":
                acked.append(body_id)
                break
            client.buf = _encode(reply) + client.buf
            break
    client.close()
    ledger.write_text("\n".join(acked))


# ----- the broker -----------------------------------------------------------------------------


class Broker:
    def __init__(self, workdir: Path, stomp_port: int, http_port: int) -> None:
        self.workdir, self.stomp_port, self.http_port = workdir, stomp_port, http_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = open(workdir / "broker.log", "ab")  # noqa: SIM115 - kept for the run

    def start(self) -> tuple[float, float]:
        """Start; seconds from the process start until the STOMP port accepts (the start-up
        time of docs/interface), and until a CONNECT is answered with CONNECTED."""
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [PAGEMQ, "serve", "--data-dir", str(self.workdir / "data"),
             "--stomp", f"{HOST}:{self.stomp_port}", "--http", f"{HOST}:{self.http_port}"],
            stdout=subprocess.DEVNULL, stderr=self.log, cwd=self.workdir)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}; "
                                   f"see {self.workdir}/broker.log")
            try:
                socket.create_connection((HOST, self.stomp_port), timeout=0.2).close()
            except OSError:
                time.sleep(0.005)
            else:
                accepted = time.monotonic() - started
                Stomp(self.stomp_port).close()
                return accepted, time.monotonic() - started
            if time.monotonic() - started > 120:
                raise RuntimeError("broker not accepting after 120 s")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)

    def queue_messages(self) -> int:
        url = f"http://{HOST}:{self.http_port}/api/queues/{QUEUE.rsplit('/', 1)[1]}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(json.loads(response.read())["messages"])


def _disk(data: Path) -> dict[str, int]:
    journal = list((data / "journal").glob("*")) if (data / "journal").is_dir() else []
    paging = [p for p in (data / "paging").rglob("*") if p.is_file()] if (data / "paging").is_dir() else []
    temps = [p for p in data.rglob("*") if p.is_file() and p.name.endswith((".tmp", ".cmp"))]
    return {"journal_files": len(journal), "journal_bytes": sum(p.stat().st_size for p in journal),
            "paging_files": len(paging), "temp_files": len(temps)}


def _slope(values: list[float]) -> float:
    """Least-squares slope of values against their index (seconds per cycle)."""
    if len(values) < 2:
        return 0.0
    mean_x, mean_y = (len(values) - 1) / 2, statistics.mean(values)
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    return num / sum((x - mean_x) ** 2 for x in range(len(values)))


def run(cycles: int, seed: int, workdir: Path) -> dict[str, object]:
    rng = random.Random(seed)
    broker = Broker(workdir, _free_port(), _free_port())
    ledgers = workdir / "ledgers"
    ledgers.mkdir()
    stop_producers, stop_consumers = mp.Event(), mp.Event()
    ctx = mp.get_context("fork")
    first, _ = broker.start()
    workers = [ctx.Process(target=producer, args=(broker.stomp_port, f"p{i}", stop_producers,
                                                 ledgers / f"p{i}")) for i in range(4)]
    workers += [ctx.Process(target=consumer, args=(broker.stomp_port, f"c{i}", stop_consumers,
                                                  ledgers / f"c{i}")) for i in range(4)]
    for worker in workers:
        worker.start()
    cycle_rows = []
    for cycle in range(1, cycles + 1):
        time.sleep(rng.uniform(3, 10))
        broker.kill()
        disk = _disk(workdir / "data")
        seconds, connected = broker.start()
        cycle_rows.append({"cycle": cycle, "start_s": round(seconds, 3), "connected_s": round(connected, 3),
                           **disk})
        print(f"cycle {cycle:2d}: start {seconds:6.3f}s (CONNECTED {connected:6.3f}s)  "
              f"journal {disk['journal_files']:3d} files "
              f"{disk['journal_bytes'] / 1e6:8.1f} MB  paging files {disk['paging_files']}  "
              f"temp files {disk['temp_files']}", flush=True)
    stop_producers.set()
    for worker in workers[:4]:
        worker.join(60)
    time.sleep(2)
    stop_consumers.set()
    for worker in workers[4:]:
        worker.join(60)
    final_acker(broker.stomp_port, ledgers / "final")
    left = broker.queue_messages()
    broker.stop()
    receipted = set().union(*(set(filter(None, (ledgers / f"p{i}").read_text().split("\n")))
                              for i in range(4)))
    acked = set().union(*(set(filter(None, (ledgers / name).read_text().split("\n")))
                          for name in ("c0", "c1", "c2", "c3", "final")))
    lost = receipted - acked
    starts = [row["start_s"] for row in cycle_rows]
    connects = [row["connected_s"] for row in cycle_rows]
    return {
        "cycles": cycles, "seed": seed, "first_start_s": round(first, 3),
        "median_start_s": round(statistics.median(starts), 3),
        "median_connected_s": round(statistics.median(connects), 3),
        "first_cycle_s": starts[0], "last_cycle_s": starts[-1], "max_start_s": max(starts),
        "first5_mean_s": round(statistics.mean(starts[:5]), 3),
        "last5_mean_s": round(statistics.mean(starts[-5:]), 3),
        "trend_ms_per_cycle": round(1000 * _slope(starts), 2),
        "receipted": len(receipted), "acked": len(acked), "lost": len(lost),
        "lost_sample": sorted(lost)[:10], "left_in_queue": left,
        "final_disk": _disk(workdir / "data"), "per_cycle": cycle_rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pagemq-crash-bench-"))
    try:
        result = run(args.cycles, args.seed, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work directory kept: {workdir}")
    if args.json:
        print(json.dumps(result))
    else:
        print(f"seed {result['seed']}: median start {result['median_start_s']}s (CONNECTED "
              f"{result['median_connected_s']}s), first cycle "
              f"{result['first_cycle_s']}s, last cycle {result['last_cycle_s']}s, "
              f"max {result['max_start_s']}s, first 5 {result['first5_mean_s']}s, last 5 "
              f"{result['last5_mean_s']}s, trend {result['trend_ms_per_cycle']} ms/cycle; "
              f"{result['receipted']} receipted, {result['acked']} acked, "
              f"lost {result['lost']} {result['lost_sample']}, left in queue {result['left_in_queue']}; "
              f"final disk {result['final_disk']}")
    ok = result["lost"] == 0 and result["left_in_queue"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

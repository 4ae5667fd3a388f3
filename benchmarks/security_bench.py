"""Security figures (issue 17): what TLS costs, and how fast authenticated CONNECTs are.

    .venv/bin/python benchmarks/security_bench.py tls  [--rounds 2] [--duration 6s]
    .venv/bin/python benchmarks/security_bench.py auth [--connections 1000]
    .venv/bin/python benchmarks/security_bench.py guess [--guesses 200] [--window 10]

`tls`: one broker of this tree with a plaintext STOMP listener and a `stomp-tls` one (a CA,
a server certificate made by `openssl` for the run), and the foundation load on each in
turn, alternating (plain, TLS, plain, TLS, ...: the machine's speed drifts): `pagemq perf
--phase both`, 4 producers and 4 consumers, persistent 1 KiB bodies with pipelined receipts
(window 1,000), client-individual acks, a fresh queue per round. Reported: msg/s produced
and consumed per round and the broker's CPU time per message (user + system, from /proc:
steadier than rates on a shared machine), and the TLS/plaintext ratios of the medians
(the issue's bound: TLS costs at most 30 % of the throughput, a rate ratio of at least 0.70).

`auth`: a broker with `security-enabled = true`; N connections opened at once from one
asyncio client, each sending CONNECT with the same login/passcode, not verified before (a
cold cache: the broker runs scrypt once for the burst and the rest share or hit the cache);
reported: seconds from the first connect to the last CONNECTED (the bound: 1,000 within
10 s), the slowest CONNECT, and one CONNECT of another user alone before (one scrypt check).

`guess`: the same broker; N CONNECTs with N different wrong passwords sent at once, each on
its own connection from one address (an attacker trying to outrun the failure delay), and
how many of them the broker has checked after a window of seconds (one address's passwords
are checked one at a time, each after the previous failure's delay; docs/security.md).

Each mode runs in under 60 s. The broker logs go to a temporary directory, removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
HOST = "127.0.0.1"
OPENSSL = "/usr/bin/openssl"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def make_certificates(directory: Path) -> None:
    def openssl(*args: str) -> None:
        subprocess.run([OPENSSL, *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "1", "-subj", "/CN=bench CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=localhost")
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "san.ext")


class Broker:
    def __init__(self, workdir: Path, config: str) -> None:
        self.workdir = workdir
        (workdir / "pagemq.toml").write_text(config)
        self.log = open(workdir / "broker.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [PAGEMQ, "serve", "--config", str(workdir / "pagemq.toml")], cwd=workdir,
            stdout=subprocess.DEVNULL, stderr=self.log,
        )
        deadline = time.monotonic() + 30
        while b" ready" not in (workdir / "broker.log").read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"broker did not start:\n{(workdir / 'broker.log').read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used (Linux /proc): steadier than wall time on a
    machine shared with other work."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def perf(url: str, destination: str, duration: str, extra: list[str], pid: int) -> dict[str, float]:
    cpu_before = cpu_seconds(pid)
    result = subprocess.run(
        [PAGEMQ, "perf", "--url", url, "--destination", destination, "--phase", "both",
         "--producers", "4", "--consumers", "4", "--duration", duration, "--size", "1024",
         "--receipt-window", "1000", "--json", *extra],
        capture_output=True, text=True, timeout=120,
    )
    document = json.loads(result.stdout.strip().splitlines()[-1])
    if not document["complete"]:
        raise SystemExit(f"perf failed: {document['error']}")
    cpu = cpu_seconds(pid) - cpu_before
    rates = {row["role"]: float(row["msgs_per_s"]) for row in document["results"]}
    messages = {row["role"]: int(row["messages"]) for row in document["results"]}
    return {"produced": rates.get("producers", 0.0), "consumed": rates.get("consumers", 0.0),
            "broker_cpu_us_per_msg": cpu / max(1, messages.get("producers", 0)) * 1e6}


def run_tls(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="pagemq-tls-bench-") as temp:
        workdir = Path(temp)
        make_certificates(workdir)
        plain_port, tls_port, http_port = free_port(), free_port(), free_port()
        broker = Broker(workdir, f"""
[broker]
data-directory = "data"
[acceptors]
stomp = "{HOST}:{plain_port}"
stomp-tls = "{HOST}:{tls_port}"
http = "{HOST}:{http_port}"
[tls]
cert-file = "server.pem"
key-file = "server.key"
""")
        rounds: list[dict[str, object]] = []
        try:
            for index in range(args.rounds):
                for kind, url, extra in (
                    ("plaintext", f"stomp://{HOST}:{plain_port}", []),
                    ("tls", f"stomp+ssl://localhost:{tls_port}", ["--tls-ca", str(workdir / "ca.pem")]),
                ):
                    rates = perf(url, f"/queue/bench-{kind}-{index}", args.duration, extra, broker.proc.pid)
                    rounds.append({"kind": kind, "round": index, **rates})
                    print(f"  round {index} {kind:9}: produced {rates['produced']:9,.0f} msg/s, "
                          f"consumed {rates['consumed']:9,.0f} msg/s, broker CPU "
                          f"{rates['broker_cpu_us_per_msg']:5.0f} us/msg", flush=True)
        finally:
            broker.stop()

    def median(kind: str, role: str) -> float:
        return statistics.median(float(r[role]) for r in rounds if r["kind"] == kind)  # type: ignore[arg-type]

    summary = {
        role: {"plaintext": median("plaintext", role), "tls": median("tls", role),
               "ratio": median("tls", role) / median("plaintext", role)}
        for role in ("produced", "consumed", "broker_cpu_us_per_msg")
    }
    for role, figures in summary.items():
        unit = "us/msg" if role.startswith("broker") else "msg/s"
        print(f"{role} (medians): plaintext {figures['plaintext']:,.0f} {unit}, TLS {figures['tls']:,.0f} "
              f"{unit}, TLS/plaintext {figures['ratio']:.2f}")
    return {"rounds": rounds, "summary": summary}


async def _connect(port: int, login: str, passcode: str) -> tuple[float, asyncio.StreamWriter]:
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(f"CONNECT\naccept-version:1.2\nhost:{HOST}\nlogin:{login}\npasscode:{passcode}\n"
                 f"heart-beat:0,0\n\n\0".encode())
    frame = await reader.readuntil(b"\0")
    if not frame.startswith(b"CONNECTED"):
        raise SystemExit(f"no CONNECTED: {frame[:200]!r}")
    return time.monotonic() - started, writer


async def _auth_load(port: int, connections: int) -> dict[str, float]:
    first, writer = await _connect(port, "solo", "solo-password")  # one scrypt check alone
    writer.close()
    started = time.monotonic()  # "bench" is not verified yet: the burst starts cold
    results = await asyncio.gather(*(_connect(port, "bench", "bench-password") for _ in range(connections)))
    elapsed = time.monotonic() - started
    for _, writer in results:
        writer.close()
    return {"connections": connections, "seconds": elapsed, "first_connect_s": first,
            "slowest_connect_s": max(seconds for seconds, _ in results)}


def _secured_broker(workdir: Path) -> tuple[Broker, int]:
    """A broker with security enabled and users `bench`, `solo` (password: NAME-password)."""
    for user in ("bench", "solo"):
        subprocess.run([PAGEMQ, "user", "add", user, "--role", "apps", "--password-stdin",
                        "--users-file", str(workdir / "users.toml")], input=f"{user}-password\n",
                       text=True, check=True, capture_output=True)
    port, http_port = free_port(), free_port()
    return Broker(workdir, f"""
[broker]
data-directory = "data"
security-enabled = true
users-file = "users.toml"
[acceptors]
stomp = "{HOST}:{port}"
http = "{HOST}:{http_port}"
[security-settings."#"]
send = ["apps"]
"""), port


def run_auth(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="pagemq-auth-bench-") as temp:
        broker, port = _secured_broker(Path(temp))
        try:
            figures = asyncio.run(_auth_load(port, args.connections))
        finally:
            broker.stop()
    print(f"{figures['connections']:.0f} authenticated CONNECTs at once: all CONNECTED in "
          f"{figures['seconds']:.2f} s (slowest {figures['slowest_connect_s']:.2f} s); the first "
          f"CONNECT alone (scrypt, uncached) {figures['first_connect_s'] * 1000:.0f} ms")
    return figures


def run_guess(args: argparse.Namespace) -> dict[str, object]:
    """N wrong passwords sent at once, each on its own connection from one address: how many
    the broker checks within the window (the rest wait their turn, or are refused unchecked)."""
    with tempfile.TemporaryDirectory(prefix="pagemq-guess-bench-") as temp:
        workdir = Path(temp)
        broker, port = _secured_broker(workdir)
        sockets = []
        try:
            for n in range(args.guesses):
                sock = socket.create_connection((HOST, port))
                sock.sendall(f"CONNECT\naccept-version:1.2\nhost:{HOST}\nlogin:bench\n"
                             f"passcode:guess-{n}\n\n\0".encode())
                sockets.append(sock)
            time.sleep(args.window)
            lines = [line for line in (workdir / "broker.log").read_text().splitlines()
                     if "authentication failed from" in line]
        finally:
            for sock in sockets:
                sock.close()
            broker.stop()
    unchecked = sum("not checked" in line for line in lines)
    figures = {"guesses": args.guesses, "window_s": args.window, "checked": len(lines) - unchecked,
               "refused_unchecked": unchecked}
    print(f"{args.guesses} wrong passwords at once from one address: {figures['checked']} checked "
          f"within {args.window:.0f} s, {unchecked} refused unchecked")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    tls = modes.add_parser("tls")
    tls.add_argument("--rounds", type=int, default=3)
    tls.add_argument("--duration", default="5s")
    auth = modes.add_parser("auth")
    auth.add_argument("--connections", type=int, default=1000)
    guess = modes.add_parser("guess")
    guess.add_argument("--guesses", type=int, default=200)
    guess.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    result = {"tls": run_tls, "auth": run_auth, "guess": run_guess}[args.mode](args)
    print(f"({time.monotonic() - started:.0f} s in all)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()

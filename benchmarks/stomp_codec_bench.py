"""STOMP codec throughput on one core: parse SEND frames, build events, encode MESSAGE frames.

    .venv/bin/python benchmarks/stomp_codec_bench.py [--count N] [--body BYTES]
        [--chunk BYTES] [--repeat R]

The input is a stream of SEND frames with a 1 KiB body and 7 headers (destination,
content-type, persistent, priority, receipt, one application header, content-length), cut
into `--chunk`-byte reads as a socket would deliver it. Phases:

- parse:   `FrameParser.feed` over the chunks (frames/s);
- events:  `StompConnection.receive_data` (parse, validate, build `Send` events; frames/s);
- encode:  `StompConnection.message` for MESSAGE frames with 7 headers (frames/s).

Each phase runs `--repeat` times and the best run is printed, per wall-clock second and per
CPU second of this process (the machine is shared).
Targets: parse >= 150,000 frames/s, encode >= 200,000 frames/s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import encode_frame
from pagemq.protocol.stomp.parser import FrameParser


def _send_stream(count: int, body: bytes) -> bytes:
    frames = []
    for n in range(count):
        headers = [
            ("destination", "/queue/orders"),
            ("content-type", "application/octet-stream"),
            ("persistent", "true"),
            ("priority", "4"),
            ("receipt", f"r-{n}"),
            ("region", "eu"),
        ]
        frames.append(encode_frame("SEND", headers, body))
    return b"".join(frames)


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _best(repeat: int, run: Callable[[], int]) -> tuple[float, float]:
    """Best frames per wall second and per CPU second over `repeat` runs of `run`.

    On a shared machine the CPU-time figure is the steadier one: it leaves out the time
    other processes held the core.
    """
    best_wall = best_cpu = 0.0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        frames = run()
        best_wall = max(best_wall, frames / (time.perf_counter() - wall))
        best_cpu = max(best_cpu, frames / max(time.process_time() - cpu, 1e-9))
    return best_wall, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=64 * 1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    body = b"x" * args.body
    stream = _send_stream(args.count, body)
    chunks = _chunks(stream, args.chunk)
    connect = b"CONNECT\naccept-version:1.2\nhost:bench\n\n\x00"

    def parse() -> int:
        frame_parser = FrameParser()
        frame_parser.version = "1.2"
        parsed = 0
        for chunk in chunks:
            parsed += len(frame_parser.feed(chunk))
        assert parsed == args.count
        return parsed

    def events() -> int:
        connection = StompConnection()
        connection.receive_data(connect)
        handled = 0
        for chunk in chunks:
            handled += len(connection.receive_data(chunk))
        assert handled == args.count
        return handled

    connection = StompConnection()
    connection.receive_data(connect)
    message_headers = {"content-type": "application/octet-stream", "persistent": "true", "region": "eu"}

    def encode() -> int:
        message = connection.message
        for n in range(args.count):
            headers = [
                ("message-id", str(n)),
                ("destination", "/queue/orders"),
                ("subscription", "sub-1"),
                ("ack", f"1.{n}"),
            ]
            headers.extend(message_headers.items())
            message(headers, body)
        return args.count

    print(f"{args.count} frames, {args.body}-byte bodies, {len(stream) / args.count:.0f} bytes/frame, "
          f"{args.chunk}-byte reads, best of {args.repeat}")
    for name, run in (("parse (FrameParser.feed)", parse), ("events (receive_data)", events),
                      ("encode (message)", encode)):
        wall, cpu = _best(args.repeat, run)
        print(f"{name:<26} {wall:>10,.0f} frames/s  {cpu:>10,.0f} frames/CPU-s  "
              f"{wall * len(stream) / args.count / 1e6:>7.1f} MB/s")


if __name__ == "__main__":
    main()

"""Broker CPU per SEND, in-process: protocol parse → session → broker → journal, no sockets.

Separates the broker's own cost from client and kernel noise on a shared machine:
    .venv/bin/python benchmarks/send_path_bench.py [--messages 100000] [--persistent] [--deliver]

`--consume` then times the drain: one client-individual consumer (prefetch 1,000) ACKs each
MESSAGE in batches of `--batch` ACK frames per read (the `pagemq perf` consumer's load).

`--transaction N` sends as the Spark sink does: transactions of N SENDs (BEGIN, the SENDs
with no receipt and an `_AMQ_DUPL_ID` each, a receipted COMMIT).

The garbage collector runs with the server's thresholds (`--default-gc`: Python's own, which
cost the dup-id path ~40 µs a message more than the server pays).

`--deliver` subscribes one auto-ack consumer first, so every SEND is also delivered (the
path the delivery-latency histogram observes on); `--no-latency` leaves that consumer
without the histogram, to measure what it costs in the same build.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import tempfile
import time
from pathlib import Path

from pagemq.core.broker import Broker
from pagemq.core.selector.summary import PageSummary
from pagemq.core.settings import AddressSettings, AddressSettingsRepository
from pagemq.protocol.stomp.batch import encode_batch
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import encode_frame
from pagemq.server.app import GC_THRESHOLD
from pagemq.server.stomp_session import StompSession
from pagemq.storage.message_store import JournalMessageStore
from pagemq.storage.paging.page_store import PageStore

NOSYNC = False


class NullTransport:
    def __init__(self) -> None:
        self.bytes = 0
        self.session: StompSession | None = None
        self.kept: list[bytes] | None = None  # what the broker wrote, while a consumer runs

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        if self.kept is not None:
            self.kept.append(data)

    def schedule_flush(self) -> None:
        asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        session = self.session
        if session is not None:
            self.write(session.take_output())
            # As the server's shell does: input held for a receipt backlog goes on once
            # the receipts are out (stomp_server.StompServerProtocol._flush).
            if not session.writable and not session.replies_backlogged:
                session.set_writable(True)

    paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
    def close(self) -> None: ...


async def run(messages: int, persistent: bool, batch: int, paging: bool = False,
              deliver: bool = False, latency: bool = True, consume: bool = False,
              transaction: int = 0) -> None:
    directory = Path(tempfile.mkdtemp())
    store = JournalMessageStore(directory / "journal", file_size=32 << 20, sync=not NOSYNC)
    settings = AddressSettingsRepository()
    if paging:
        settings.add("#", {"max-size-bytes": 0})
    loop = asyncio.get_running_loop()

    def page_store(address: str, address_settings: AddressSettings) -> PageStore:
        pages = PageStore(directory / "paging", address,
                          page_size_bytes=address_settings.page_size_bytes)
        pages.set_summary_builder(PageSummary)
        pages.open()
        pages.start(loop)
        return pages

    broker = Broker(settings, store=store, page_stores=page_store)
    if not latency:
        broker.delivery_latency = None  # type: ignore[assignment]
    broker.paging_directory = directory / "paging"
    broker.recover()
    store.start(asyncio.get_running_loop())
    transport = NullTransport()
    session = StompSession(broker, StompConnection(), transport)
    transport.session = session
    session.receive(encode_frame("CONNECT", {"accept-version": "1.2", "host": "x"}))
    if deliver:
        session.receive(encode_frame("SUBSCRIBE", {"destination": "/queue/bench", "id": "0",
                                                   "ack": "auto", "activemq.prefetchSize": "-1"}))
    body = b"x" * 1024
    flag = "true" if persistent else "false"
    if transaction:
        chunks = [_sink_transaction(i, min(transaction, messages - i), flag, body)
                  for i in range(0, messages, transaction)]
    else:
        chunks = [
            b"".join(
                encode_frame("SEND", {"destination": "/queue/bench", "persistent": flag,
                                      "receipt": str(i + j), "perf-ts": str(time.time_ns() + i + j)}, body)
                for j in range(batch)
            )
            for i in range(0, messages, batch)
        ]
    cpu, wall, loop_cpu = time.process_time(), time.perf_counter(), time.thread_time()
    for chunk in chunks:
        if not transaction:
            session.receive(chunk)
            await asyncio.sleep(0)
            continue
        # The sink's socket: reads of up to READ bytes, none while the session paused
        # reading (a whole run fed at once would grow the parser's buffer to the run's size).
        for at in range(0, len(chunk), READ):
            while transport.paused:
                transport.flush()
                await asyncio.sleep(0.0002)
            session.receive(chunk[at:at + READ])
            await asyncio.sleep(0)
    while session.buffered_bytes():  # frames held for receipts or deferred: carried out yet
        transport.flush()
        # Not sleep(0): frames held behind a COMMIT wait for its page fsync (another
        # thread), and spinning meanwhile would count as the loop's CPU.
        await asyncio.sleep(0.0002)
    await store.flush()
    await asyncio.sleep(0.01)
    cpu, wall, loop_cpu = time.process_time() - cpu, time.perf_counter() - wall, time.thread_time() - loop_cpu
    print(f"{messages} SENDs ({'persistent' if persistent else 'non-persistent'}"
          f"{f', in transactions of {transaction}' if transaction else ''}"
          f"{' with _AMQ_DUPL_ID' if transaction and DUPL_IDS else ''}"
          f"{', batch SENDs' if transaction and BATCH_FRAMES else ''}): "
          f"{', paged' if paging else ''}{', delivered' if deliver else ''}"
          f"{'' if latency or not deliver else ' (no latency histogram)'}: "
          f"{cpu / messages * 1e6:.1f} µs CPU each (all threads; "
          f"{loop_cpu / messages * 1e6:.1f} the loop's), "
          f"{messages / wall:,.0f}/s wall")
    if consume:
        await drain(session, transport, messages, batch)
    await store.close()


READ = 64 << 10  # bytes a socket read hands the session (--transaction)
DUPL_IDS = True  # --no-dupl-ids: the sink's transactions without the ids
BATCH_FRAMES = False  # --batch-frames: each transaction's SENDs as one batch SEND


def _sink_transaction(first: int, count: int, flag: str, body: bytes) -> bytes:
    """One read's worth as the Spark sink sends it (pagemq.spark.stomp_sender)."""
    tx = f"tx-{first}"
    if BATCH_FRAMES:  # one batch SEND, as the sink sends to a pagemq broker
        own = [[("_AMQ_DUPL_ID", f"spark:0f3e19a2-77aa:12:3:{first + j}")] if DUPL_IDS else []
               for j in range(count)]
        sends = encode_batch("/queue/bench", tx, [(ids, body) for ids in own], {"persistent": flag})
        return (encode_frame("BEGIN", {"transaction": tx}) + sends
                + encode_frame("COMMIT", {"transaction": tx, "receipt": f"c-{first}"}))
    sends = b"".join(
        encode_frame("SEND", {"destination": "/queue/bench", "transaction": tx, "persistent": flag,
                              **({"_AMQ_DUPL_ID": f"spark:0f3e19a2-77aa:12:3:{first + j}"}
                                 if DUPL_IDS else {})}, body)
        for j in range(count)
    )
    return (encode_frame("BEGIN", {"transaction": tx}) + sends
            + encode_frame("COMMIT", {"transaction": tx, "receipt": f"c-{first}"}))


async def drain(session: StompSession, transport: NullTransport, messages: int, batch: int) -> None:
    """The consume phase: ACK every MESSAGE as it comes, `batch` ACK frames per read."""
    transport.kept = []
    cpu, wall, loop_cpu = time.process_time(), time.perf_counter(), time.thread_time()
    session.receive(encode_frame("SUBSCRIBE", {"destination": "/queue/bench", "id": "1",
                                               "ack": "client-individual",
                                               "activemq.prefetchSize": "1000"}))
    acked = 0
    progress = time.monotonic()
    while acked < messages:
        await asyncio.sleep(0)
        transport.flush()
        ids = ACK_ID.findall(b"".join(transport.kept))
        transport.kept.clear()
        if not ids:
            if time.monotonic() - progress > 10:
                raise SystemExit(f"stalled: {acked} of {messages} consumed; queue "
                                 f"{session.broker.queue_info('bench')}")
            continue
        progress = time.monotonic()
        for i in range(0, len(ids), batch):
            session.receive(b"".join(ACK_FRAME % ack for ack in ids[i:i + batch]))
        acked += len(ids)
    cpu, wall, loop_cpu = time.process_time() - cpu, time.perf_counter() - wall, time.thread_time() - loop_cpu
    print(f"{messages} consumed (client-individual ACKs): "
          f"{cpu / messages * 1e6:.1f} µs CPU each (all threads; "
          f"{loop_cpu / messages * 1e6:.1f} the loop's), "
          f"{messages / wall:,.0f}/s wall")


ACK_ID = re.compile(rb"\nack:([^\n]*)\n")
ACK_FRAME = b"ACK\nid:%s\n\n\x00"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--batch", type=int, default=64, help="SEND frames per socket read")
    parser.add_argument("--paging", action="store_true", help="max-size-bytes 0: every message pages")
    parser.add_argument("--deliver", action="store_true", help="an auto-ack consumer takes every message")
    parser.add_argument("--consume", action="store_true", help="then time a client-individual drain")
    parser.add_argument("--transaction", type=int, default=0,
                        help="SENDs per transaction with _AMQ_DUPL_ID each, as the Spark sink")
    parser.add_argument("--no-dupl-ids", action="store_true", help="--transaction without _AMQ_DUPL_ID")
    parser.add_argument("--batch-frames", action="store_true",
                        help="--transaction with each transaction's SENDs as one batch SEND (the sink's way "
                             "to a pagemq broker)")
    parser.add_argument("--no-latency", action="store_true", help="deliver without the latency histogram")
    parser.add_argument("--default-gc", action="store_true",
                        help="keep Python's GC thresholds (before 2026-11-29 the bench did)")
    args = parser.parse_args()
    if not args.default_gc:  # as the server runs (server/app.py): young objects collected rarely
        gc.freeze()
        gc.set_threshold(GC_THRESHOLD, 20, 100)
    global DUPL_IDS, BATCH_FRAMES
    DUPL_IDS = not args.no_dupl_ids
    BATCH_FRAMES = args.batch_frames
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(run(args.messages, args.persistent, args.batch, args.paging, args.deliver,
                    not args.no_latency, args.consume, args.transaction))


if __name__ == "__main__":
    main()

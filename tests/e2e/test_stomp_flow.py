"""Flow control and dead peers over real sockets (issue 13, defects 7 and 8).

- A producer blocked by address-full-policy BLOCK is still read: its heart-beats keep it
  connected, and a connection that also consumes can ACK (which is what unblocks it).
- What a blocked or non-reading client can make the broker hold is bounded by TCP.
- A peer that stops reading and heart-beating is dropped at its heart-beat timeout (aborted,
  not closed politely behind a write buffer it will never read): its prefetched messages go
  to another consumer at once. An ERROR to a peer that does not read is followed by an abort
  after a short grace.

The server expects a heart-beat every max(cx, 500) ms and drops a peer after twice that.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

from brokerproc import HOST, RawStomp, encode_frame, unique, wait_until
from test_paging_helpers import body, consume, numbered

BROKER_CONFIG = {
    "address-settings": {
        "block.#": {"max-size-bytes": "16KiB", "address-full-policy": "BLOCK"},
    },
}

BIG = 256 * 1024
TCP_ESTABLISHED = 1


class StalledSocket(RawStomp):
    """A client whose receive buffer is tiny, so what the broker writes piles up on its side
    as soon as the client stops reading (a hung process keeps its socket open)."""

    def __init__(self, port: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(5.0)
        sock.connect((HOST, port))
        self.sock = sock
        self.timeout = 5.0
        self.buffer = b""
        self.heartbeats = 0
        self.heartbeat_times: list[float] = []
        self.closed = False
        self.version = None

    def tcp_state(self) -> int:
        """The kernel's TCP state of this socket (1 = ESTABLISHED), read without reading data."""
        info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        return struct.unpack("B", info[:1])[0]


def _stalled(broker, opened: list[RawStomp]) -> StalledSocket:
    client = StalledSocket(broker.stomp_port)
    opened.append(client)
    return client


def _fill_queue(broker, stomp_client, queue: str, count: int, size: int) -> list[str]:
    producer = stomp_client(broker)
    names = numbered("big", count)
    for name in names:
        producer.send(f"/queue/{queue}", body(name, size), receipt=True)
    producer.disconnect()
    return names


def _labels(frames) -> list[str]:
    return [f.body.split("|", 1)[0] for f in frames]


# -- defect 7: BLOCK ---------------------------------------------------------------------


def test_blocked_producer_that_sends_heart_beats_stays_connected(broker, stomp_client, queue_name):
    address = f"block.{queue_name}"
    # stomp.py heart-beats every max(300, 500) ms; the broker drops it after 1 s of silence.
    producer = stomp_client(broker, heartbeats=(300, 0))
    tag = uuid.uuid4().hex[:8]
    for n in range(40):  # pipelined: 40 KiB to a 16 KiB BLOCK address
        producer.conn.send(f"/queue/{address}", body(f"m{n}"), headers={"receipt": f"{tag}-{n}"})
    listener = producer.listener
    time.sleep(0.5)
    stalled = len(listener.receipts)
    assert stalled < 40, "the producer was not blocked"
    time.sleep(3.0)  # three heart-beat timeouts while blocked
    assert producer.is_connected, "a heart-beating producer was dropped while blocked"
    assert len(listener.receipts) == stalled, "receipts came while the address was full"

    assert consume(stomp_client(broker), f"/queue/{address}", 40, ack="auto") == numbered("m", 40)
    listener.wait(lambda: len(listener.receipts) == 40, 5, "all 40 receipts after the drain")
    assert not listener.errors, [(e.headers, e.body) for e in listener.errors]
    assert producer.is_connected


def test_blocked_connection_can_ack_what_it_consumes_and_so_unblocks_itself(
        broker, stomp_client, queue_name):
    """One connection produces to a full BLOCK address and consumes from it: its ACKs,
    sent behind a blocked SEND, are carried out and free the room the SEND waits for."""
    address = f"block.{queue_name}"
    client = stomp_client(broker)
    client.subscribe(f"/queue/{address}", ack="client-individual")
    for n in range(60):
        client.conn.send(f"/queue/{address}", body(f"m{n}"))
    acked: list[str] = []
    while len(acked) < 60:
        frames = client.wait_for(len(acked) + 1, timeout=5)
        for frame in frames[len(acked):]:
            client.ack(frame)
            acked.append(frame.body.split("|", 1)[0])
    assert acked == numbered("m", 60)
    assert not client.listener.errors
    broker.wait_queue(address, messages=0)


def test_blocked_producer_is_held_back_by_tcp_not_buffered(broker, stomp_client, queue_name):
    """A producer that keeps writing to a full BLOCK address: the broker stops reading it
    after a bounded read-ahead, so the client's writes stall and the broker's memory stays put.
    (Each message is larger than the address's limit: one goes in whenever it is empty.)"""
    address = f"block.{queue_name}"
    rss_before = broker.rss_bytes()
    with RawStomp(broker.stomp_port) as raw:
        raw.connect("1.2")
        frame = encode_frame("SEND", {"destination": f"/queue/{address}"}, "x" * 60_000)
        sent = _write_for(raw.sock, frame, seconds=4.0, limit=200 << 20)
        assert sent < 48 << 20, f"the broker took {sent >> 20} MiB from a blocked producer"
        assert broker.rss_bytes() - rss_before < 64 << 20
    consumer = stomp_client(broker)  # auto ack, and it reads: the queue empties
    consumer.subscribe(f"/queue/{address}", ack="auto")
    broker.wait_queue(address, timeout=30, messages=0)


def _write_for(sock: socket.socket, frame: bytes, seconds: float, limit: int) -> int:
    """Write `frame` over and over for `seconds` (or `limit` bytes); bytes the kernel took."""
    sock.setblocking(False)
    sent = 0
    view = memoryview(b"")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and sent < limit:
            if not view:
                view = memoryview(frame)
            try:
                n = sock.send(view)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            view = view[n:]
            sent += n
    finally:
        sock.setblocking(True)
    return sent


# -- defect 8: dead peers ----------------------------------------------------------------


def test_consumer_that_hangs_is_dropped_at_its_heart_beat_timeout_and_its_messages_redelivered(
        broker, stomp_client, queue_name):
    names = _fill_queue(broker, stomp_client, queue_name, 12, BIG)
    opened: list[RawStomp] = []
    try:
        hung = _stalled(broker, opened)
        hung.connect("1.2", headers={"heart-beat": "500,0"})  # expected every 500 ms
        hung.send_frame("SUBSCRIBE", {"id": "s", "destination": f"/queue/{queue_name}",
                                      "ack": "client-individual", "activemq.prefetchSize": "12"})
        time.sleep(0.3)  # it takes what fits, then hangs: no reads, no heart-beats
        started = time.monotonic()
        wait_until(lambda: hung.tcp_state() != TCP_ESTABLISHED, timeout=5,
                   what="the broker to drop the hung consumer")
        assert time.monotonic() - started < 4
        other = stomp_client(broker)
        other.subscribe(f"/queue/{queue_name}", ack="auto")
        assert sorted(_labels(other.wait_for(12, timeout=5))) == sorted(names)
    finally:
        for raw in opened:
            raw.close()


def test_error_to_a_peer_that_does_not_read_is_followed_by_an_abort(broker, stomp_client, queue_name):
    names = _fill_queue(broker, stomp_client, queue_name, 12, BIG)
    opened: list[RawStomp] = []
    try:
        hung = _stalled(broker, opened)
        hung.connect("1.2")  # no heart-beats: only the close grace can end this connection
        hung.send_frame("SUBSCRIBE", {"id": "s", "destination": f"/queue/{queue_name}",
                                      "ack": "client-individual", "activemq.prefetchSize": "12"})
        time.sleep(0.3)
        hung.send(b"SEND\nno colon here\n\nbad\x00")  # ERROR, then close: it never reads
        other = stomp_client(broker)
        other.subscribe(f"/queue/{queue_name}", ack="auto")
        assert sorted(_labels(other.wait_for(12, timeout=5))) == sorted(names)
        wait_until(lambda: hung.tcp_state() != TCP_ESTABLISHED, timeout=8,
                   what="the broker to abort a closing connection that does not read")
    finally:
        for raw in opened:
            raw.close()


def test_producer_that_never_reads_its_receipts_is_held_back_by_tcp(broker):
    """Receipts pile up unread; past the write buffer's high-water mark the broker stops
    reading the producer, so neither its write buffer nor its input grows without bound."""
    topic = unique("nobody")  # no subscriber: each message is dropped, each RECEIPT still due
    rss_before = broker.rss_bytes()
    opened: list[RawStomp] = []
    try:
        producer = _stalled(broker, opened)
        producer.connect("1.2")
        receipt_id = "r" * 60_000  # each RECEIPT is as large as the SEND that asks for it
        frame = encode_frame("SEND", {"destination": f"/topic/{topic}", "receipt": receipt_id}, "x")
        sent = _write_for(producer.sock, frame, seconds=4.0, limit=300 << 20)
        assert sent < 48 << 20, f"the broker took {sent >> 20} MiB from a client that never reads"
        assert broker.rss_bytes() - rss_before < 64 << 20
    finally:
        for raw in opened:
            raw.close()

"""What the broker holds besides messages draws from `global-max-size` and is bounded (issue 16):
connections' buffers and browsers' page read-ahead, shown in `GET /api/broker` memory.

Real broker, real sockets: a client with a tiny receive window (test_stomp_flow's
`StalledSocket`) stands for a peer that stops reading (a hung process keeps its socket open).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, RawStomp, StompClient, encode_frame, unique, wait_until
from test_stomp_flow import StalledSocket, _write_for  # a client with a tiny receive window

MIB = 1 << 20
BROKER_CONFIG = {
    "broker": {"global-max-size": "32MiB"},
    "address-settings": {"#": {"max-size-bytes": 0, "page-size-bytes": "1MiB"}},
}


def memory(broker: BrokerProcess) -> dict[str, Any]:
    status, body = broker.http_get("/api/broker")
    assert status == 200, body
    return dict(body["memory"])


class PeakSampler:
    """Polls one figure of `GET /api/broker` memory on a thread; keeps its peak."""

    def __init__(self, broker: BrokerProcess, field: str) -> None:
        self.broker, self.field, self.peak = broker, field, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, int(memory(self.broker)[self.field]))
            self._stop.wait(0.05)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_receipts_a_producer_never_reads_are_charged_to_the_budget_bounded_and_released(broker):
    """A producer that never reads its RECEIPTs: what the broker holds for it (unsent
    receipts, held input) is charged as connection_buffer_bytes and stays bounded (the broker
    stops reading it: TCP holds the producer back); once it reads, every receipt comes, every
    message is stored, and the charge goes back to nothing."""
    queue = unique("unread")
    client = StalledSocket(broker.stomp_port)
    try:
        client.connect("1.2")
        receipt_id = "r" * 60_000  # each RECEIPT is as large as the SEND that asks for it
        frame = encode_frame("SEND", {"destination": f"/queue/{queue}", "receipt": receipt_id,
                                      "persistent": "true"}, "x")
        with PeakSampler(broker, "connection_buffer_bytes") as sampler:
            sent = _write_for(client.sock, frame, seconds=4.0, limit=300 * MIB)
            time.sleep(0.3)  # a last measurement of the stalled connection
        held = memory(broker)["connection_buffer_bytes"]
        assert sent < 48 * MIB, f"the broker took {sent / MIB:.0f} MiB from a client that never reads"
        assert held > MIB, f"only {held} bytes charged for a stalled connection's unread receipts"
        # bound: transport write buffer 1 MiB + one turn's output + 1 MiB held input + frames
        assert sampler.peak <= 6 * MIB, f"connection buffers reached {sampler.peak / MIB:.1f} MiB"

        complete, partial = divmod(sent, len(frame))
        rest = frame[partial:] if partial else b""
        client.send_while_reading(rest + encode_frame("DISCONNECT", {"receipt": "bye"}), timeout=60)
        receipts = 0
        while True:
            reply = client.read_frame(timeout=60)
            assert reply is not None, "closed before the DISCONNECT's receipt"
            assert reply.command == "RECEIPT", reply
            if reply.headers["receipt-id"] == "bye":
                break
            receipts += 1
        expected = complete + (1 if partial else 0)
        assert receipts == expected
        broker.wait_queue(queue, messages=expected, timeout=30)
        wait_until(lambda: memory(broker)["connection_buffer_bytes"] == 0, timeout=5,
                   what="the closed connection's buffers released")
    finally:
        client.close()


BROWSE_CONFIG = {
    "broker": {"global-max-size": "4MiB"},
    "address-settings": {"#": {"max-size-bytes": 0, "page-size-bytes": "256KiB"}},
}
BROWSED = 3000
BODY_PAD = b"b" * 4096  # 3000 x 4 KiB: 12 MiB of page files, three times the budget


def test_a_browser_over_a_paged_queue_three_times_the_budget_sees_everything_within_it(
    start_broker: Callable[..., BrokerProcess], stomp_client: Callable[..., StompClient],
) -> None:
    """The browse's page read-ahead is charged while it is open (at most three ranges of a
    reader's size), a browser that stops reading holds it open without the broker reading
    further, every message is shown in order, nothing is taken, and the charge goes at the end."""
    broker = start_broker(BROWSE_CONFIG)
    queue = unique("browsed")
    producer = stomp_client(broker)
    for n in range(BROWSED):
        producer.send(f"/queue/{queue}", f"{n:05d}|".encode() + BODY_PAD, receipt=n == BROWSED - 1)
    broker.wait_queue(queue, messages=BROWSED, timeout=60)
    idle_rss = broker.rss_bytes()

    browser = StalledSocket(broker.stomp_port)
    try:
        browser.connect("1.2")
        browser.send_frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "b", "browser": "true"})
        time.sleep(1.0)  # it reads nothing: the broker stops at its write buffer
        stalled = memory(broker)
        assert 0 < stalled["browse_read_ahead_bytes"] <= 3 * 256 * 1024, stalled
        assert stalled["connection_buffer_bytes"] > 0, stalled
        assert stalled["used_bytes"] <= 4 * MIB + 2 * MIB, stalled  # budget + one connection's buffers

        shown: list[int] = []
        peak_rss = 0
        while True:
            frame = browser.read_frame(timeout=60)
            assert frame is not None and frame.command == "MESSAGE", frame
            if frame.headers.get("browser") == "end":
                break
            shown.append(int(frame.body[:5]))
            if len(shown) % 500 == 0:
                peak_rss = max(peak_rss, broker.rss_bytes())
        jumps = [(i, a, b) for i, (a, b) in enumerate(itertools.pairwise(shown)) if b != a + 1]
        assert shown == list(range(BROWSED)), (len(shown), sorted(shown) == list(range(BROWSED)), jumps[:10])
        assert peak_rss <= idle_rss + 4 * MIB + 40 * MIB, (idle_rss / MIB, peak_rss / MIB)
        after = memory(broker)
        assert after["browse_read_ahead_bytes"] == 0, after
        assert broker.queue(queue)["messages"] == BROWSED  # a browser takes nothing
    finally:
        browser.close()


def test_a_commit_held_by_block_keeps_its_sends_charged_so_waiting_commits_cannot_outgrow_the_budget(
    start_broker, stomp_client
):
    """Found by a breaker: a COMMIT held by address-full-policy BLOCK gave its sends' charge
    back while it waited, so transaction after transaction staged and waited outside the
    budget (RSS 50 -> 254 MiB under a 16 MiB one). Now the waiting COMMIT's sends stay
    charged, and once waiting ones fill the budget the next transaction's send is refused."""
    block = {"max-size-bytes": "64KiB", "address-full-policy": "BLOCK"}
    proc = start_broker({"broker": {"global-max-size": "1MiB"}, "address-settings": {"#": block}})
    body = "x" * (20 * 1024)
    filler = stomp_client(proc)  # the address over its limit: no COMMIT fits
    filler.send("/queue/blocked", "f" * (70 * 1024), receipt=True)
    waiting = []
    for n in range(8):
        producer = stomp_client(proc)
        producer.begin(f"t{n}", receipt=False)
        for _ in range(10):  # 200 KiB: more than the address ever takes, so the COMMIT waits
            producer.send("/queue/blocked", body, headers={"transaction": f"t{n}"}, receipt=False)
        producer.commit(f"t{n}", receipt=False)
        time.sleep(0.3)
        if producer.listener.errors:
            break
        waiting.append(producer)
        staged = memory(proc)["pending_transactional_bytes"]
        assert staged >= len(waiting) * 200 * 1024, (n, staged)
    error = producer.listener.errors[0]
    assert "global-max-size" in error.headers.get("message", ""), error.headers
    assert 3 <= len(waiting) <= 5
    assert memory(proc)["pending_transactional_bytes"] <= 1 << 20
    assert proc.queue("blocked")["messages"] == 1  # the filler


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_two_commits_waiting_for_the_budget_wait_quietly_then_both_go_through(start_broker, stomp_client):
    """Found by a breaker: two COMMITs blocked on the global budget woke each other for ever
    (each retry gave its charge back and took it again), the broker at a full core."""
    proc = start_broker({"broker": {"global-max-size": "16MiB"},
                         "address-settings": {"#": {"address-full-policy": "BLOCK"}}})
    body = "x" * (100 * 1024)
    filler = stomp_client(proc)
    for _ in range(59):  # 6 MiB held, no consumer
        filler.send("/queue/held", body, receipt=False)
    filler.send("/queue/held", body, receipt=True)
    producers = []
    for n in range(2):
        producer = stomp_client(proc)
        producer.begin(f"t{n}", receipt=False)
        for _ in range(60):  # 6 MiB each: a COMMIT routes 4 MiB of it, then blocks
            producer.send("/queue/held", body, headers={"transaction": f"t{n}"}, receipt=False)
        producers.append(producer)
    time.sleep(0.5)  # both staged (18 MiB charged in all) before either commits
    for n, producer in enumerate(producers):
        producer.conn.commit(f"t{n}", headers={"receipt": f"c{n}"})  # not waited for
    time.sleep(0.5)
    assert not any(f"c{n}" in p.listener.receipts for n, p in enumerate(producers))
    pid = proc.proc.pid
    before = _cpu_seconds(pid)
    time.sleep(2)
    assert _cpu_seconds(pid) - before < 0.5, "the broker spun while the COMMITs waited"
    consumer = stomp_client(proc)
    consumer.subscribe("/queue/held", ack="auto", headers={"activemq.prefetchSize": 1000})
    consumer.wait_for(180, timeout=30)
    for n, producer in enumerate(producers):
        producer.listener.wait_for_receipt(f"c{n}", timeout=20)


HUGE = 15 * MIB


@pytest.mark.slow  # make test-slow
def test_huge_frames_from_many_producers_into_a_blocked_address_wait_in_the_socket_not_in_the_broker(
    start_broker, stomp_client
):
    """Found by a breaker: sixteen producers each sending a 15 MiB frame into a blocked
    address held 240 MiB of connection buffers under an 8 MiB budget (each connection was
    bounded by max-frame-size, their sum by nothing). While the budget is full, one connection
    at a time may hold more than a little input; the others are not read (TCP holds them).
    A message larger than the address's limit goes in once the address is below it, so
    every one of them arrives once a consumer drains the address."""
    proc = start_broker({
        "broker": {"global-max-size": "8MiB"},
        "address-settings": {"#": {"max-size-bytes": "1MiB", "address-full-policy": "BLOCK"}},
    })
    filler = stomp_client(proc)
    for n in range(10):  # 1 MiB: the address is full before the huge frames come
        filler.send("/queue/held", f"filler-{n}|" + "f" * (100 * 1024), receipt=n == 9)
    producers = [RawStomp(proc.stomp_port, timeout=120) for _ in range(16)]
    for producer in producers:
        producer.connect("1.2")
    done: list[int] = []

    def produce(n: int) -> None:
        frame = encode_frame("SEND", {"destination": "/queue/held", "receipt": f"huge-{n}",
                                      "content-type": "application/octet-stream"},
                             f"huge-{n}|".encode() + b"h" * HUGE)
        if producers[n].send(frame):
            done.append(n)

    threads = [threading.Thread(target=produce, args=(n,), daemon=True) for n in range(16)]
    with PeakSampler(proc, "connection_buffer_bytes") as sampler:
        for thread in threads:
            thread.start()
        time.sleep(4)
    assert sampler.peak < 40 * MIB, (
        f"connection buffers reached {sampler.peak / MIB:.0f} MiB under an 8 MiB budget")
    assert proc.rss_bytes() < 200 * MIB

    consumer = stomp_client(proc)
    consumer.subscribe("/queue/held", ack="auto", headers={"activemq.prefetchSize": 1})
    wait_until(lambda: len(consumer.messages) >= 26, timeout=120, what="all 26 messages")
    labels = sorted(frame.body[:12].split("|", 1)[0] for frame in consumer.messages)
    assert labels == sorted([f"filler-{n}" for n in range(10)] + [f"huge-{n}" for n in range(16)])
    for thread in threads:
        thread.join(30)
    assert sorted(done) == list(range(16))
    for n, producer in enumerate(producers):
        reply = producer.read_frame(timeout=30)
        assert reply is not None and reply.command == "RECEIPT", reply
        assert reply.headers["receipt-id"] == f"huge-{n}"
        producer.close()
    wait_until(lambda: memory(proc)["connection_buffer_bytes"] < MIB, timeout=5,
               what="the producers' buffers released")


@pytest.mark.slow  # make test-slow
def test_a_producer_stalling_in_the_middle_of_a_huge_frame_does_not_stop_other_large_frames(
    start_broker, stomp_client
):
    """Past the input share one connection at a time may read a large frame: a peer that
    sends half of one and then nothing loses that turn after a few seconds, so the next
    producer's large frame goes through (and the stalled one is still served when it goes on)."""
    proc = start_broker({"broker": {"global-max-size": "4MiB"}})  # input share: 1 MiB
    staller = RawStomp(proc.stomp_port, timeout=60)
    staller.connect("1.2")
    frame = encode_frame("SEND", {"destination": "/queue/big", "receipt": "stalled"},
                         b"s" * (6 * MIB))
    assert staller.send(frame[: 3 * MIB])  # past the share: it holds the turn, then stalls
    wait_until(lambda: memory(proc)["connection_buffer_bytes"] >= 2 * MIB, timeout=10,
               what="the stalled frame's first half read")
    producer = RawStomp(proc.stomp_port, timeout=60)
    producer.connect("1.2")
    started = time.monotonic()
    sender = threading.Thread(target=producer.send, daemon=True, args=(encode_frame(
        "SEND", {"destination": "/queue/big", "receipt": "next"}, b"n" * (4 * MIB)),))
    sender.start()
    reply = producer.read_frame(timeout=30)
    assert reply is not None and reply.headers.get("receipt-id") == "next", reply
    assert time.monotonic() - started < 15
    assert staller.send(frame[3 * MIB:])  # it goes on: read again in its turn
    reply = staller.read_frame(timeout=30)
    assert reply is not None and reply.headers.get("receipt-id") == "stalled", reply
    assert proc.queue("big")["messages"] == 2


def _send_in_background(client: RawStomp, frame: bytes) -> threading.Thread:
    thread = threading.Thread(target=client.send, args=(frame,), daemon=True)
    thread.start()
    return thread


def _full_block_address(start_broker, stomp_client, name: str) -> BrokerProcess:
    """A broker with an 8 MiB budget (input share: 2 MiB) whose BLOCK address `name`, of
    max-size-bytes 1 MiB, holds ten 100 KiB messages (as good as full)."""
    proc = start_broker({
        "broker": {"global-max-size": "8MiB"},
        "address-settings": {name: {"address-full-policy": "BLOCK", "max-size-bytes": "1MiB"}},
    })
    filler = stomp_client(proc)
    for n in range(10):
        filler.send(f"/queue/{name}", f"{name}-{n}|" + name * (100 * 1024), receipt=n == 9)
    return proc


def test_a_consumer_publishing_elsewhere_before_it_acks_is_not_held_up_by_producers_blocked_on_its_queue(
    start_broker, stomp_client
):
    """Found by a breaker (a deadlock of the first input bound): producers of large frames
    blocked on A held the input turn, so a consumer of A publishing a 300 KiB result to B
    before each ACK was never read, never acknowledged, and A never drained. A frame whose
    address would hold it now never takes the turn from a frame that may go."""
    proc = _full_block_address(start_broker, stomp_client, "A")
    producers = [RawStomp(proc.stomp_port, timeout=60) for _ in range(3)]
    for n, producer in enumerate(producers):
        producer.connect("1.2")
        _send_in_background(producer, encode_frame(
            "SEND", {"destination": "/queue/A", "receipt": f"h-{n}"}, b"h" * (1536 * 1024)))
        time.sleep(0.3)
    processor = stomp_client(proc)
    processor.subscribe("/queue/A", ack="client-individual", headers={"activemq.prefetchSize": 1})
    result = "r" * (300 * 1024)
    for n in range(13):
        wait_until(lambda n=n: len(processor.messages) > n, timeout=20, what=f"message {n} of A")
        processor.send("/queue/B", result, receipt=True)  # a RECEIPT within the client's wait
        processor.ack(processor.messages[n])
    for n, producer in enumerate(producers):
        reply = producer.read_frame(timeout=20)
        assert reply is not None and reply.headers.get("receipt-id") == f"h-{n}", reply
    proc.wait_queue("B", messages=13)


def test_a_consumer_producing_into_its_own_full_address_still_gets_its_acks_read(
    start_broker, stomp_client
):
    """Found by a breaker: a consumer that sent a 900 KiB message into its own full BLOCK
    address, then acknowledged, had its ACKs held behind the input bound while another
    producer's large frame held the turn (stomp.md: ACKs go ahead of a blocked SEND)."""
    proc = _full_block_address(start_broker, stomp_client, "q")
    first = RawStomp(proc.stomp_port, timeout=60)
    first.connect("1.2")
    _send_in_background(first, encode_frame("SEND", {"destination": "/queue/q"}, b"1" * MIB))
    worker = stomp_client(proc)
    worker.subscribe("/queue/q", ack="client-individual", headers={"activemq.prefetchSize": 1})
    worker.send("/queue/q", "w" * (900 * 1024))  # blocked: held with the worker's input
    late = RawStomp(proc.stomp_port, timeout=60)
    late.connect("1.2")
    _send_in_background(late, encode_frame(
        "SEND", {"destination": "/queue/q", "receipt": "late"}, b"l" * (1536 * 1024)))
    time.sleep(0.5)
    for n in range(8):  # each ACK frees room; its RECEIPT comes though the SEND is blocked
        wait_until(lambda n=n: len(worker.messages) > n, timeout=20, what=f"message {n} of q")
        worker.ack(worker.messages[n], receipt=True)


def test_a_producer_faster_than_the_disk_waits_for_page_writes_instead_of_queueing_them_in_memory(
    start_broker
):
    """Found by a breaker: non-persistent (or unreceipted) sends into a paging address were
    queued for the page writer without bound (RSS 453 MiB under an 8 MiB budget). Records not
    yet written now count in the budget (`page_write_bytes`); past a quarter of it, paged
    sends wait (TCP slows the producer) until the writes catch up."""
    proc = start_broker({"broker": {"global-max-size": "4MiB"},  # writes may lag by 1 MiB
                         "address-settings": {"#": {"max-size-bytes": 0}}})
    idle = proc.rss_bytes()
    producer = RawStomp(proc.stomp_port, timeout=120)
    producer.connect("1.2")
    frame = encode_frame("SEND", {"destination": "/queue/fast", "persistent": "false"},
                         b"p" * (512 * 1024))
    with PeakSampler(proc, "page_write_bytes") as sampler:
        peak_rss = 0
        for _ in range(20):  # 200 x 512 KiB: 100 MiB of page files
            producer.send(frame * 10)
            peak_rss = max(peak_rss, proc.rss_bytes())
        producer.send_frame("DISCONNECT", {"receipt": "bye"})
        reply = producer.read_frame(timeout=60)
        assert reply is not None and reply.headers.get("receipt-id") == "bye", reply
    assert sampler.peak <= 4 * MIB, f"page writes lagged by {sampler.peak / MIB:.1f} MiB"
    assert peak_rss - idle < 64 * MIB, f"RSS grew by {(peak_rss - idle) / MIB:.0f} MiB"
    proc.wait_queue("fast", messages=200, timeout=30)
    wait_until(lambda: memory(proc)["page_write_bytes"] == 0, timeout=10,
               what="every page write done")


@pytest.mark.parametrize("in_transaction", [False, True], ids=["plain", "transactional"])
def test_a_consumer_whose_large_send_into_its_full_address_comes_last_still_gets_its_acks_read(
    start_broker, stomp_client, in_transaction
):
    """Found by a second breaker: a consumer holding a delivery whose own large SEND into its
    full BLOCK address arrived once the input share was passed was not read (its frame would
    wait for room), and the ACKs behind that frame, which would have made the room, never came.
    A connection holding deliveries or a transaction, or a SEND in a transaction (it meets
    the policy only at COMMIT), is never held back for room."""
    proc = _full_block_address(start_broker, stomp_client, "q")
    first, late = RawStomp(proc.stomp_port, timeout=60), RawStomp(proc.stomp_port, timeout=60)
    for client in (first, late):
        client.connect("1.2")
    _send_in_background(first, encode_frame("SEND", {"destination": "/queue/q"}, b"1" * MIB))
    wait_until(lambda: proc.queue("q")["messages"] == 11, timeout=10,
               what="the 1 MiB message in (q was below its limit): q is over it now")
    _send_in_background(late, encode_frame("SEND", {"destination": "/queue/q"}, b"l" * (3 * MIB)))
    wait_until(lambda: memory(proc)["connection_buffer_bytes"] > 2 * MIB, timeout=10,
               what="the input share passed")
    worker = RawStomp(proc.stomp_port, timeout=30)
    worker.connect("1.2")
    worker.send_frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual",
                                    "activemq.prefetchSize": "1"})
    messages = [frame for frame in [worker.read_frame(timeout=10)] if frame.command == "MESSAGE"]
    assert messages, "no delivery to the worker"
    tx = {"transaction": "t"} if in_transaction else {}
    big = encode_frame("SEND", {"destination": "/queue/q", **tx}, b"w" * (900 * 1024))
    _send_in_background(worker, (encode_frame("BEGIN", tx) if tx else b"") + big)
    for n in range(5):  # each ACK frees room and is answered though the SEND waits
        time.sleep(0.2)  # behind the large frame in the socket
        worker.send_frame("ACK", {"id": messages[-1].headers["ack"], "receipt": f"a{n}"})
        frames = worker.read_until_receipt(f"a{n}", timeout=20)
        assert frames[-1].command == "RECEIPT", frames[-1]
        messages += [frame for frame in frames if frame.command == "MESSAGE"]
        if len(messages) <= n + 1:
            frame = worker.read_frame(timeout=20)
            assert frame is not None and frame.command == "MESSAGE", frame
            messages.append(frame)

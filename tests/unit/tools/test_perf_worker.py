"""pagemq perf's client, worker and whole runs against a tiny fake STOMP broker.

The fake runs on its own event loop in a thread, on 127.0.0.1 with an ephemeral port, so
the same instance serves in-process runs (PhaseRun) and spawned worker processes (main).
It answers CONNECT, SEND (with RECEIPT), SUBSCRIBE (prefetch-limited delivery), ACK in the
1.1/1.2 dialects, and DISCONNECT, and records what it saw for the assertions.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from pagemq.protocol.errors import ProtocolError
from pagemq.protocol.stomp.frames import Frame, encode_frame
from pagemq.protocol.stomp.parser import FrameParser
from pagemq.tools.perf import main
from pagemq.tools.perf_client import ClientOptions, PerfError, open_link
from pagemq.tools.perf_runner import PhasePlan, WorkerPool
from pagemq.tools.perf_worker import STOP, PhaseRun, WorkerPlan, board_size, consumed_slot, produced_slot


@dataclass
class _Subscription:
    session: _Session
    sub_id: str
    ack: str
    prefetch: int
    unacked: list[str] = field(default_factory=list)  # ack ids in delivery order


class _Session(asyncio.Protocol):
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.parser = FrameParser()
        self.version = "1.2"
        self.transport: asyncio.Transport | None = None
        self.subscription: _Subscription | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.subscription is not None:
            self.broker.drop(self.subscription)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.parser.feed(data)
        except ProtocolError:
            self.broker.bad_frames += 1
            return
        for frame in frames:
            self.broker.on_frame(self, frame)

    def send(self, command: str, headers: list[tuple[str, str]], body: bytes = b"") -> None:
        if self.transport is not None:
            self.transport.write(encode_frame(command, headers, body, version=self.version))


class FakeBroker:
    """A single-queue-per-destination STOMP broker, just enough for the perf client."""

    def __init__(self, *, version: str = "1.2", hold_receipts: bool = False,
                 reject_connect: str | None = None) -> None:
        self.version = version
        self.hold_receipts = hold_receipts
        self.reject_connect = reject_connect
        self.seen: Counter[str] = Counter()
        self.frames: list[Frame] = []  # every SEND, SUBSCRIBE and ACK, in arrival order
        self.connects: list[dict[str, str]] = []
        self.queues: dict[str, deque[tuple[dict[str, str], bytes]]] = {}
        self.subscriptions: list[_Subscription] = []
        self.held: list[tuple[_Session, str]] = []
        self.bad_frames = 0
        self.acked: set[str] = set()
        self._next_id = 0
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    # -- lifetime --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._server = self.call(self._listen())
        self.port = self._server.sockets[0].getsockname()[1]

    async def _listen(self) -> asyncio.Server:
        return await self.loop.create_server(lambda: _Session(self), "127.0.0.1", 0)

    def call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for subscription in list(self.subscriptions):
                if subscription.session.transport is not None:
                    subscription.session.transport.close()
            await asyncio.sleep(0.05)

        self.call(shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    def release_receipts(self) -> None:
        async def release() -> None:
            held, self.held = self.held, []
            for session, receipt in held:
                session.send("RECEIPT", [("receipt-id", receipt)])

        self.call(release())

    def enqueue(self, destination: str, count: int, size: int = 16) -> None:
        """Messages as if a producer had sent them (with a perf-ts header)."""
        async def put() -> None:
            queue = self.queues.setdefault(destination, deque())
            for _ in range(count):
                queue.append(({"perf-ts": str(time.time_ns())}, b"x" * size))
            self._dispatch(destination)

        self.call(put())

    # -- protocol --------------------------------------------------------------------------

    def on_frame(self, session: _Session, frame: Frame) -> None:
        self.seen[frame.command] += 1
        handler = getattr(self, f"_on_{frame.command.lower()}", None)
        if handler is not None:
            handler(session, frame)

    def _on_connect(self, session: _Session, frame: Frame) -> None:
        self.connects.append(frame.headers)
        if self.reject_connect is not None:
            session.send("ERROR", [("message", self.reject_connect)])
            assert session.transport is not None
            session.transport.close()
            return
        session.send("CONNECTED", [("version", self.version), ("heart-beat", "0,0")])
        session.version = session.parser.version = self.version

    def _on_send(self, session: _Session, frame: Frame) -> None:
        self.frames.append(frame)
        destination = frame.headers["destination"]
        self.queues.setdefault(destination, deque()).append((frame.headers, frame.body))
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            if self.hold_receipts:
                self.held.append((session, receipt))
            else:
                session.send("RECEIPT", [("receipt-id", receipt)])
        self._dispatch(destination)

    def _on_subscribe(self, session: _Session, frame: Frame) -> None:
        self.frames.append(frame)
        headers = frame.headers
        subscription = _Subscription(session, headers["id"], headers.get("ack", "auto"),
                                     int(headers.get("prefetch-count", "1000")))
        session.subscription = subscription
        self.subscriptions.append(subscription)
        self._dispatch(headers["destination"])

    def _on_ack(self, session: _Session, frame: Frame) -> None:
        self.frames.append(frame)
        subscription = session.subscription
        assert subscription is not None
        ack_id = frame.headers.get("id") or frame.headers.get("message-id", "")
        self.acked.add(ack_id)
        if subscription.ack == "client":  # cumulative: everything delivered up to it
            index = subscription.unacked.index(ack_id)
            del subscription.unacked[: index + 1]
        else:
            subscription.unacked.remove(ack_id)
        self._dispatch("/queue/perf")

    def _on_disconnect(self, session: _Session, frame: Frame) -> None:
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            session.send("RECEIPT", [("receipt-id", receipt)])
        assert session.transport is not None
        session.transport.close()

    def drop(self, subscription: _Subscription) -> None:
        self.subscriptions.remove(subscription)

    def _dispatch(self, destination: str) -> None:
        queue = self.queues.get(destination)
        while queue:
            ready = [s for s in self.subscriptions
                     if s.ack == "auto" or len(s.unacked) < s.prefetch]
            if not ready:
                return
            subscription = min(ready, key=lambda s: len(s.unacked))
            headers, body = queue.popleft()
            self._next_id += 1
            message_id = f"ID:fake:{self._next_id}"  # colons: ACKs must escape them in 1.1/1.2
            out = [("message-id", message_id), ("destination", destination),
                   ("subscription", subscription.sub_id)]
            if self.version == "1.2":
                out.append(("ack", f"ack:{self._next_id}"))
            out.extend((k, v) for k, v in headers.items()
                       if k not in ("destination", "receipt", "content-length"))
            if subscription.ack != "auto":
                subscription.unacked.append(out[3][1] if self.version == "1.2" else message_id)
            subscription.session.send("MESSAGE", out, body)

    def commands(self, command: str) -> list[Frame]:
        return [frame for frame in self.frames if frame.command == command]


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker()
    fake.start()
    yield fake
    fake.stop()


def _options(broker: FakeBroker, **overrides: object) -> ClientOptions:
    values: dict[str, object] = {"port": broker.port, "size": 100, "connect_timeout": 5.0,
                                 "close_timeout": 2.0, **overrides}
    return ClientOptions(**values)  # type: ignore[arg-type]


def _run_phase(options: ClientOptions, plan: WorkerPlan, *, stop_when_consumed: int | None = None,
               stop_after: float | None = None):  # type: ignore[no-untyped-def]
    """One worker's phase in this process; the test plays the parent raising the stop flag."""
    board = [0] * board_size(1)

    async def play() -> object:
        run = PhaseRun(options, plan, board, 0)
        await run.connect()
        task = asyncio.ensure_future(run.run())
        started = time.monotonic()
        while not task.done():
            await asyncio.sleep(0.005)
            if stop_when_consumed is not None and board[consumed_slot(0)] >= stop_when_consumed:
                board[STOP] = 1
            if stop_after is not None and time.monotonic() - started >= stop_after:
                board[STOP] = 1
        return task.result()

    return asyncio.run(play()), board


# -- the client, one worker in this process ---------------------------------------------------


def test_producers_send_their_quotas_with_receipts_timestamps_and_the_fixed_body(broker: FakeBroker) -> None:
    before = time.time_ns()
    result, board = _run_phase(_options(broker), WorkerPlan("produce", (300, 200)))
    assert result.producers.messages == 500
    assert result.producers.connections == 2
    assert result.producers.body_bytes == 500 * 100
    assert result.producers.latency.count == 500
    assert board[produced_slot(0)] == 500
    sends = broker.commands("SEND")
    assert len(sends) == 500
    for frame in sends:
        assert frame.headers["destination"] == "/queue/perf"
        assert frame.headers["persistent"] == "true"
        assert before <= int(frame.headers["perf-ts"]) <= time.time_ns()
        assert len(frame.body) == 100
    assert sorted(int(f.headers["receipt"]) for f in sends) == sorted([*range(300), *range(200)])
    assert broker.seen["DISCONNECT"] == 2


def test_producer_keeps_at_most_the_receipt_window_unreceipted() -> None:
    broker = FakeBroker(hold_receipts=True)
    broker.start()
    try:
        options = _options(broker, receipt_window=50)

        async def play() -> int:
            run = PhaseRun(options, WorkerPlan("produce", (200,)), [0] * board_size(1), 0)
            await run.connect()
            task = asyncio.ensure_future(run.run())
            await asyncio.sleep(0.3)
            in_flight = broker.seen["SEND"]
            for _ in range(10):
                broker.release_receipts()
                await asyncio.sleep(0.1)
            result = await asyncio.wait_for(task, 5)
            assert result.producers.messages == 200
            return in_flight

        assert asyncio.run(play()) == 50
    finally:
        broker.stop()


def test_without_receipts_sends_carry_no_receipt_header_and_count_after_disconnect(
        broker: FakeBroker) -> None:
    result, _ = _run_phase(_options(broker, receipt_window=0, persistent=False),
                           WorkerPlan("produce", (250,)))
    assert result.producers.messages == 250
    assert result.producers.latency.count == 0
    sends = broker.commands("SEND")
    assert len(sends) == 250
    assert all("receipt" not in f.headers and "persistent" not in f.headers for f in sends)


def test_extra_headers_go_on_send_and_subscribe(broker: FakeBroker) -> None:
    options = _options(broker, headers=(("x-queue-type", "quorum"),))
    _run_phase(options, WorkerPlan("both", (10,), 1), stop_when_consumed=10)
    assert broker.commands("SEND")[0].headers["x-queue-type"] == "quorum"
    assert broker.commands("SUBSCRIBE")[0].headers["x-queue-type"] == "quorum"


def test_subscribe_asks_for_the_prefetch_in_activemq_and_rabbitmq_spelling(broker: FakeBroker) -> None:
    broker.enqueue("/queue/perf", 5)
    _run_phase(_options(broker, prefetch=7), WorkerPlan("consume", (), 1), stop_when_consumed=5)
    (subscribe,) = broker.commands("SUBSCRIBE")
    assert subscribe.headers["activemq.prefetchSize"] == "7"
    assert subscribe.headers["prefetch-count"] == "7"
    assert subscribe.headers["ack"] == "client-individual"


def test_client_individual_acks_every_message_by_its_ack_header(broker: FakeBroker) -> None:
    broker.enqueue("/queue/perf", 300)
    result, _ = _run_phase(_options(broker, prefetch=20), WorkerPlan("consume", (), 2),
                           stop_when_consumed=300)
    assert result.consumers.messages == 300
    assert result.consumers.latency.count == 300
    acks = broker.commands("ACK")
    assert len(acks) == 300
    assert {f.headers["id"] for f in acks} == {f"ack:{n}" for n in range(1, 301)}


def test_stomp_1_1_acks_name_message_id_and_subscription_with_escaped_colons() -> None:
    broker = FakeBroker(version="1.1")
    broker.start()
    try:
        broker.enqueue("/queue/perf", 40)
        result, _ = _run_phase(_options(broker, prefetch=10), WorkerPlan("consume", (), 1),
                               stop_when_consumed=40)
        assert result.consumers.messages == 40
        acks = broker.commands("ACK")
        assert {f.headers["message-id"] for f in acks} == {f"ID:fake:{n}" for n in range(1, 41)}
        assert all(f.headers["subscription"] == "0" for f in acks)
        assert broker.bad_frames == 0
    finally:
        broker.stop()


def test_client_mode_acks_cumulatively_every_k_and_the_rest_at_the_end(broker: FakeBroker) -> None:
    broker.enqueue("/queue/perf", 95)
    result, _ = _run_phase(_options(broker, ack="client", prefetch=20, ack_every=10),
                           WorkerPlan("consume", (), 1), stop_when_consumed=95)
    assert result.consumers.messages == 95
    acks = broker.commands("ACK")
    assert [f.headers["id"] for f in acks] == [f"ack:{n}" for n in (*range(10, 100, 10), 95)]


def test_auto_ack_sends_no_acks(broker: FakeBroker) -> None:
    broker.enqueue("/queue/perf", 50)
    result, _ = _run_phase(_options(broker, ack="auto"), WorkerPlan("consume", (), 1),
                           stop_when_consumed=50)
    assert result.consumers.messages == 50
    assert broker.seen["ACK"] == 0


def test_both_at_once_measures_end_to_end_latency_from_the_send_timestamp(broker: FakeBroker) -> None:
    result, board = _run_phase(_options(broker), WorkerPlan("both", (500, 500), 2),
                               stop_when_consumed=1000)
    assert result.producers.messages == result.consumers.messages == 1000
    assert board[consumed_slot(0)] == 1000
    p99 = result.consumers.latency.percentile_ms(99)
    assert p99 is not None and 0 <= p99 < 5000


def test_duration_mode_producers_stop_on_the_flag_and_keep_their_receipted_count(
        broker: FakeBroker) -> None:
    result, _ = _run_phase(_options(broker), WorkerPlan("produce", (None,)), stop_after=0.3)
    assert result.producers.messages > 0
    assert result.producers.messages == broker.seen["SEND"]


def test_error_frame_on_connect_is_a_perf_error_with_the_broker_message() -> None:
    broker = FakeBroker(reject_connect="Virtual host access denied")
    broker.start()
    try:
        with pytest.raises(PerfError, match="Virtual host access denied"):
            asyncio.run(open_link(_options(broker)))
    finally:
        broker.stop()


def test_connect_sends_versions_host_credentials_and_no_heartbeats(broker: FakeBroker) -> None:
    async def connect() -> str:
        link = await open_link(_options(broker, login="guest", passcode="secret", vhost="/"))
        await link.disconnect(2)
        return link.version

    assert asyncio.run(connect()) == "1.2"
    (headers,) = broker.connects
    assert headers["accept-version"] == "1.0,1.1,1.2"
    assert (headers["host"], headers["login"], headers["passcode"]) == ("/", "guest", "secret")
    assert headers["heart-beat"] == "0,0"


def test_connection_refused_is_a_perf_error_naming_the_address() -> None:
    broker = FakeBroker()
    broker.start()
    port = broker.port
    broker.stop()
    with pytest.raises(PerfError, match=f"127.0.0.1:{port}"):
        asyncio.run(open_link(ClientOptions(port=port, connect_timeout=2)))


# -- whole runs: spawned worker processes -----------------------------------------------------


def _main_json(capsys: pytest.CaptureFixture[str], broker: FakeBroker, *args: str) -> tuple[int, dict]:
    code = main(["--url", f"stomp://127.0.0.1:{broker.port}", "--json", "--size", "64", *args])
    out = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(out[-1])


def test_sequential_run_fills_then_drains_across_processes(
        broker: FakeBroker, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _main_json(capsys, broker, "--phase", "sequential", "--producers", "3",
                              "--consumers", "2", "--processes", "2", "--count", "3000")
    assert code == 0, report
    assert report["complete"] is True
    produce, consume = report["results"]
    assert (produce["phase"], produce["role"], produce["messages"]) == ("produce", "producers", 3000)
    assert (consume["phase"], consume["role"], consume["messages"]) == ("consume", "consumers", 3000)
    assert produce["connections"] == 3 and consume["connections"] == 2
    assert produce["latency_ms"]["p50"] <= produce["latency_ms"]["p99"] <= produce["latency_ms"]["max"]
    assert consume["msgs_per_s"] > 0 and consume["mb_per_s"] > 0
    assert broker.seen["ACK"] == 3000
    assert produce["broker_peak_rss_mib"] is None  # no --broker-pid


def test_text_report_has_one_row_per_role(broker: FakeBroker, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--url", f"stomp://127.0.0.1:{broker.port}", "--phase", "both", "--count", "500",
                 "--processes", "1", "--broker-pid", str(os.getpid())])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0].startswith("pagemq perf: stomp://127.0.0.1:")
    assert lines[1].split()[:4] == ["phase", "role", "conns", "messages"]
    assert [line.split()[:4] for line in lines[2:4]] == [["both", "producers", "1", "500"],
                                                         ["both", "consumers", "1", "500"]]
    assert lines[4].startswith("broker peak RSS (process tree): both ")


def test_a_stalled_run_ends_after_the_idle_timeout_as_incomplete(
        capsys: pytest.CaptureFixture[str]) -> None:
    broker = FakeBroker(hold_receipts=True)
    broker.start()
    try:
        started = time.monotonic()
        code, report = _main_json(capsys, broker, "--phase", "produce", "--count", "100",
                                  "--processes", "1", "--idle-timeout", "0.5s")
        assert time.monotonic() - started < 20
    finally:
        broker.stop()
    assert code == 1
    assert report["complete"] is False
    assert report["results"][0]["complete"] is False


def test_nothing_listening_exits_1_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    broker = FakeBroker()
    broker.start()
    broker.stop()
    code, report = _main_json(capsys, broker, "--count", "10", "--processes", "1")
    assert code == 1
    assert "cannot connect" in report["error"]
    assert report["results"] == []


def test_a_worker_process_that_dies_ends_the_phase_with_a_perf_error() -> None:
    broker = FakeBroker(hold_receipts=True)  # the phase cannot finish on its own
    broker.start()
    try:
        with WorkerPool(_options(broker), 1) as pool:
            killer = threading.Timer(1.0, pool.processes[0].kill)
            killer.start()
            try:
                with pytest.raises(PerfError, match="worker process 0 exited"):
                    pool.run_phase(PhasePlan("produce", producer_quotas=(100,)))
            finally:
                killer.cancel()
    finally:
        broker.stop()

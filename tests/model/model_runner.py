"""Runs one program against a real `pagemq serve` process and checks it against the model.

One broker per program (restarted in place by the program's restart/kill operations), each
start forked from a fork server that has pagemq imported (forkserver.py: a start takes a few
hundredths of a second instead of 0.6 s; PAGEMQ_MODEL_FORKSERVER=0 execs `pagemq`). Every
wait is for something specific (a RECEIPT, a MESSAGE the model says must come, an HTTP count)
and bounded; running out of time is itself a finding (a stall, a missing receipt).

The runner reads frames only at well-defined points ("ingest"), so the model sees each
connection's frames in order and never a delivery before the RECEIPT that created it.
After the operations, every queue is drained by a fresh consumer and must yield exactly what
the model expects; then the broker is restarted (or killed) once more and every queue must be
empty: receipted acknowledgements stick.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import socket
import subprocess
import time
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from brokerproc import HOST, PAGEMQ, BrokerProcess, StompClient, encode_frame, free_port, run_cli
from forkserver import ForkServer
from model_program import STREAM_QUEUE, Program
from model_reference import DELIVERABLE, PRESENT, Model, QueueModel, Status, Sub, Violation

from pagemq.protocol.stomp.batch import encode_batch

RECEIPT_WAIT = 10.0  # one RECEIPT (fsync included) on a shared, loaded machine
SETTLE_WAIT = 5.0  # deliveries the model says are due
HTTP_WAIT = 3.0  # management counts catching up with a close or an ACK
DRAIN_SLOT = 99  # the model's slot for the drain consumer of an anycast queue

_fork_server: ForkServer | None = None


def fork_server() -> ForkServer | None:
    """The process-wide fork server that starts `pagemq` (forkserver.py), made on first use;
    None with PAGEMQ_MODEL_FORKSERVER=0 (then every start execs `pagemq`)."""
    global _fork_server
    if os.environ.get("PAGEMQ_MODEL_FORKSERVER", "1") == "0":
        return None
    if _fork_server is None:
        _fork_server = ForkServer(PAGEMQ)
        atexit.register(_fork_server.close)
    return _fork_server


class PortRange:
    """Ports for brokers from a range of our own (PAGEMQ_MODEL_PORTS=LO-HI), taken in turn,
    skipping any that something else listens on right now."""

    def __init__(self, spec: str) -> None:
        low, high = (int(part) for part in spec.split("-"))
        self.spec = spec
        self.size = high - low + 1
        self._ports = itertools.cycle(range(low, high + 1))

    def take(self) -> int:
        for _ in range(self.size):
            port = next(self._ports)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds
                try:
                    sock.bind((HOST, port))
                except OSError:
                    continue
            return port
        raise RuntimeError(f"no free port in PAGEMQ_MODEL_PORTS={os.environ.get('PAGEMQ_MODEL_PORTS')}")


_port_range: PortRange | None = None


def broker_ports() -> tuple[int, int]:
    """(stomp, http) for a new broker: from PAGEMQ_MODEL_PORTS, else two the kernel picks."""
    global _port_range
    spec = os.environ.get("PAGEMQ_MODEL_PORTS")
    if spec and (_port_range is None or _port_range.spec != spec):
        _port_range = PortRange(spec)
    take = _port_range.take if spec and _port_range is not None else free_port
    stomp = take()
    http = take()
    while http == stomp:
        http = take()
    return stomp, http


def pagemq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`pagemq ARGS` to completion, through the fork server when there is one."""
    server = fork_server()
    if server is None:
        return run_cli(*args)
    return server.run([PAGEMQ, *args], Path.cwd(), timeout=30.0)


class Client:
    """One slot's STOMP connection and how far the model has read its frames."""

    def __init__(self, slot: int, port: int, client_id: str, *, batch_sends: bool = False) -> None:
        self.slot = slot
        self.stomp = StompClient(port, client_id=client_id, timeout=RECEIPT_WAIT).connect()
        self.read = 0  # MESSAGE frames handed to the model
        self.errors_read = 0
        self.sub_ids = (f"s{slot}-{n}" for n in itertools.count(1))
        self.tx: str | None = None
        # A program's transactional SENDs may go as batch SENDs (docs/stomp.md): held here
        # until the connection's next frame, or a SEND to another destination, then sent as
        # one frame. The same messages in the same transaction, so the model is unchanged.
        self.batch_sends = batch_sends
        self._batch: list[tuple[str, str, dict[str, str], str]] = []  # (dest, tx, headers, body)

    @property
    def conn(self) -> Any:
        """The connection, every frame of which goes after the batch held (if any)."""
        if self._batch:
            self._flush_batch()
        return self.stomp.conn

    def send_in_transaction(self, dest: str, transaction: str, headers: dict[str, str], body: str) -> None:
        if not self.batch_sends:
            self.stomp.conn.send(dest, body, headers=headers)
            return
        if self._batch and (self._batch[0][0], self._batch[0][1]) != (dest, transaction):
            self._flush_batch()
        self._batch.append((dest, transaction, headers, body))

    def _flush_batch(self) -> None:
        held, self._batch = self._batch, []
        dest, transaction = held[0][0], held[0][1]
        messages = [([(k, v) for k, v in headers.items() if k != "transaction"], body.encode())
                    for _dest, _tx, headers, body in held]
        with contextlib.suppress(OSError):  # a connection gone: its transaction is gone too
            self.stomp.conn.transport.send(encode_batch(dest, transaction, messages))


class Runner:
    def __init__(self, program: Program, workdir: Path) -> None:
        self.program = program
        server = fork_server()
        self.broker = BrokerProcess(workdir, program.config.toml(), ports=broker_ports(),
                                    launcher=server.popen if server is not None else None)
        self.model = Model(program.config.max_read_page_messages,
                           budget=program.config.global_max_size not in (-1, "-1"))
        self.clients: dict[int, Client] = {}
        self.log: list[str] = []
        self._receipts = (f"r{n}" for n in itertools.count(1))
        self._tx_names = (f"tx{n}" for n in itertools.count(1))
        self.op_index = -1
        # Persistent SENDs whose RECEIPT came: their duplicate id (the mid) is durable, so a
        # resend with the same id must be dropped, whatever happened since (op_resend).
        self.resendable: set[str] = set()
        # The streaming reader's committed offset (op_stream): where its next range starts.
        self.stream_offset = 0

    # -- entry point ----------------------------------------------------------------------

    def run(self) -> None:
        """Run the program; raises Violation when the broker breaks an invariant."""
        try:
            self._start()
            for index, op in enumerate(self.program.ops):
                self.op_index = index
                self.log.append(f"#{index} {op.describe()}")
                getattr(self, f"op_{op.kind}")(**op.args)
            self.op_index = len(self.program.ops)
            self.log.append("final: check, drain, stop, expect empty")
            self.finish()
        except Violation:
            raise
        except (AssertionError, TimeoutError, RuntimeError, OSError) as exc:
            raise Violation("harness", f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.close()

    def close(self) -> None:
        for client in self.clients.values():
            client.stomp.drop()
        self.clients.clear()
        self.broker.kill()

    # -- broker life ----------------------------------------------------------------------

    def _start(self) -> None:
        for attempt in range(3):
            try:
                self.broker.start()
                return
            except RuntimeError as exc:
                # Another process took a port while the broker was down (nothing of the
                # broker's own can hold it: the last run has exited): the program goes on on
                # new ports; every connection is made afresh after a start anyway.
                if "address already in use" in str(exc).lower() and attempt < 2:
                    self.broker.stomp_port, self.broker.http_port = broker_ports()
                    self.log.append(f"   (a port was taken meanwhile: restarted on ports "
                                    f"{self.broker.stomp_port} and {self.broker.http_port})")
                    continue
                raise Violation("start", f"the broker did not come back: {exc}") from exc

    def _stopped(self, killed: bool) -> None:
        for client in self.clients.values():
            client.stomp.drop()
        self.clients.clear()
        self.model.broker_stopped(killed=killed)
        self._start()

    def op_restart(self) -> None:
        self._stop()
        self._stopped(killed=False)

    def _stop(self) -> None:
        """SIGTERM: the broker must exit 0 (in bounded time)."""
        self.ingest()
        for sub in list(self.model.subs.values()):
            if sub.ack == "auto":
                self.quiesce(sub)
        try:
            self.broker.stop()
        except AssertionError as exc:
            raise Violation("shutdown", str(exc)) from exc

    def data_check(self) -> None:
        """`pagemq data check` on the data of a cleanly stopped broker: every journal and page
        file sound (a killed one may leave a torn tail that start-up cuts, so not after kill)."""
        result = pagemq_cli("data", "check", "--data-dir", str(self.broker.data_dir))
        if result.returncode != 0:
            raise Violation("data-check", f"pagemq data check exited {result.returncode} after a "
                            f"clean stop: {(result.stdout + result.stderr)[-1500:]}")

    def op_kill(self) -> None:
        self.ingest()
        self.broker.kill()
        self._stopped(killed=True)

    def op_kill_midway(self, slot: int, dest: str, mid: str, colors: list[str], acks: bool,
                       delay_ms: int = 0, graceful: bool = False) -> None:
        """Receipted SENDs (and ACKs) written, then kill -9 (or SIGTERM) `delay_ms` later:
        what was receipted before the broker went must survive, the rest may or may not."""
        self.ingest()
        client = self.client(slot)
        pending_acks: list[tuple[Client, Sub, list[Any], str]] = []
        if acks:
            for other, sub in self._subs_with_clients():
                taken = self.model.take(sub, 0.999) if sub.ack == "client" else None
                if taken is None and sub.held:
                    taken = self.model.take(sub, 0.0)
                if taken is not None:
                    receipt = next(self._receipts)
                    other.conn.ack(taken[1], receipt=receipt)
                    pending_acks.append((other, sub, taken[0], receipt))
        sends = []
        for n, color in enumerate(colors):
            message = self.model.new_message(f"{mid}-{n}", slot, dest, color)
            sends.append((message, self._send_frame(client, message, receipt=True)))
        if delay_ms:
            time.sleep(delay_ms / 1000)
        if graceful:
            try:
                self.broker.stop()
            except AssertionError as exc:
                raise Violation("shutdown", str(exc)) from exc
        else:
            self.broker.kill()
        for other in self.clients.values():
            other.stomp.listener.wait_quietly(lambda o=other: o.stomp.listener.disconnected, RECEIPT_WAIT)
        got = set(client.stomp.listener.receipts)
        for message, receipt in sends:
            self.model.route(message, receipted=receipt in got, slot=slot)
        acked = [r for other, _, _, r in pending_acks if r in other.stomp.listener.receipts]
        for other, _sub, copies, receipt in pending_acks:
            self.model.acked(copies, receipted=receipt in acked, slot=other.slot,
                             how="ACKed just before the broker went")
        self.log.append(f"   receipted before the broker went: {[m.mid for m, r in sends if r in got]} "
                        f"acks {acked}")
        self._stopped(killed=not graceful)

    # -- connections ----------------------------------------------------------------------

    def client(self, slot: int) -> Client:
        client = self.clients.get(slot)
        if client is None:
            client = self.clients[slot] = Client(slot, self.broker.stomp_port, f"c{slot}",
                                                 batch_sends=self.program.seed % 2 == 1)
        return client

    def _subs_with_clients(self) -> list[tuple[Client, Sub]]:
        return [(self.clients[slot], sub) for slot, sub in self.model.subs.items() if slot in self.clients]

    def ingest(self, slots: Iterable[int] | None = None) -> None:
        """Hand every MESSAGE received so far to the model, connection by connection."""
        for slot in list(self.clients) if slots is None else slots:
            client = self.clients.get(slot)
            if client is None:
                continue
            listener = client.stomp.listener
            if len(listener.errors) > client.errors_read:
                error = listener.errors[client.errors_read]
                raise Violation("error", f"slot {slot} got ERROR {error.headers.get('message')!r}: "
                                f"{error.body!r}")
            messages = listener.messages
            while client.read < len(messages):
                frame = messages[client.read]
                client.read += 1
                self._delivered(slot, frame)

    def _delivered(self, slot: int, frame: Any) -> None:
        headers = frame.headers
        sub = self.model.subs.get(slot)
        if sub is None or headers.get("subscription") != sub.sub_id:
            raise Violation("phantom", f"slot {slot} got {headers.get('mid')} for subscription "
                            f"{headers.get('subscription')}, which is not open")
        self.model.delivered(sub, headers.get("mid", "?"), headers.get("ack", ""),
                             headers.get("redelivered") == "true")
        self.log.append(f"   -> {sub.sub_id} {headers.get('mid')}"
                        f"{' (redelivered)' if headers.get('redelivered') == 'true' else ''}")

    def receipt(self, client: Client, receipt: str | list[str], what: str,
                then: Callable[[], object] | None = None) -> None:
        """Wait for a RECEIPT; then every earlier frame of this connection was carried out.
        `then` tells the model what the receipted frame did, before any MESSAGE received
        meanwhile is read (a consumer on the same connection may get a message before the
        RECEIPT of the SEND that stored it)."""
        listener = client.stomp.listener
        receipts = receipt if isinstance(receipt, list) else [receipt]
        ok = listener.wait_quietly(
            lambda: receipts[-1] in listener.receipts or bool(listener.errors) or listener.disconnected,
            RECEIPT_WAIT,
        )
        missing = [r for r in receipts if r not in listener.receipts]
        if not ok or missing:
            self.ingest([client.slot])
            state = "closed" if listener.disconnected else "open"
            raise Violation("receipt", f"no RECEIPT {missing} for {what} on slot {client.slot} "
                            f"within {RECEIPT_WAIT}s (connection {state})")
        if then is not None:
            then()
        self.ingest([client.slot])
        self.model.sync(client.slot)

    def wait_consumers(self) -> None:
        """After a subscription closes, the broker lets go of it before anything else happens
        (else a send could still be dispatched to a consumer that is gone)."""
        for queue in self.model.queues_with_names():
            name = queue.name
            assert name is not None
            expected = len(queue.subs)
            deadline = time.monotonic() + HTTP_WAIT
            while True:
                status, body = self.broker.http_get(f"/api/queues/{name}")
                got = body.get("consumers") if status == 200 else None
                # An anycast queue whose only messages may not exist may not exist either.
                if got == expected or (status == 404 and expected == 0 and not queue.count_range()[0]):
                    break
                if time.monotonic() > deadline:
                    raise Violation("count", f"queue {name}: {got} consumers {HTTP_WAIT}s after a "
                                    f"close, expected {expected} (HTTP {status} {body})")
                time.sleep(0.02)

    # -- sending --------------------------------------------------------------------------

    def _send_frame(self, client: Client, message: Any, receipt: bool,
                    transaction: str | None = None, *, dup_id: bool = True) -> str | None:
        receipt_id, headers, body = self._send_parts(message, receipt, transaction, dup_id)
        client.conn.send(message.dest, body, headers=headers)
        return receipt_id

    def _send_parts(self, message: Any, receipt: bool, transaction: str | None = None,
                    dup_id: bool = True) -> tuple[str | None, dict[str, str], str]:
        """(receipt id, headers, body) of a SEND. Every SEND carries Artemis' duplicate id
        (the mid is unique in a program), so every program also exercises the remembered
        ids: their records, recovery and cleanup; but a burst may go without (`dup_id`):
        sends with an id are stored one by one, those without are appended to a paging
        address as one group when they come in one read."""
        headers = {"mid": message.mid, "color": message.color, "from": str(message.slot)}
        if dup_id:
            headers["_AMQ_DUPL_ID"] = message.mid
        if message.persistent:
            headers["persistent"] = "true"
        receipt_id = next(self._receipts) if receipt else None
        if receipt_id is not None:
            headers["receipt"] = receipt_id
        if transaction is not None:
            headers["transaction"] = transaction
        return receipt_id, headers, (message.mid + "|").ljust(self.program.body_size, "x")

    def op_send(self, slot: int, dest: str, mid: str, color: str, no_receipt: bool = False,
                non_persistent: bool = False) -> None:
        client = self.client(slot)
        message = self.model.new_message(mid, slot, dest, color, persistent=not non_persistent)
        receipt = self._send_frame(client, message, receipt=not no_receipt)
        if receipt is None:
            self.model.route(message, receipted=False, slot=slot)
            return
        def receipted() -> None:
            self.model.route(message, receipted=True)
            if message.persistent:
                self.resendable.add(mid)

        self.receipt(client, receipt, f"SEND {mid}", receipted)

    def op_resend(self, slot: int, dest: str, mid: str, color: str) -> None:
        """A producer retries a SEND that was receipted (persistent): same duplicate id, so the
        broker must drop it (and still receipt it); a stored copy shows as a message
        delivered twice or a count too high. A no-op unless the original was receipted."""
        if mid not in self.resendable:
            return
        client = self.client(slot)
        retry = types.SimpleNamespace(mid=mid, color=color, slot=slot, dest=dest, persistent=True)
        receipt = self._send_frame(client, retry, receipt=True)
        self.receipt(client, receipt, f"resent SEND {mid}", lambda: None)

    def op_burst(self, slot: int, dest: str, mid: str, colors: list[str], dup_ids: bool = True,
                 one_write: bool = False) -> None:
        """Pipelined receipted SENDs: all written (frame by frame, or in one socket write,
        which the broker reads at once and pages as one group), then all receipts awaited."""
        client = self.client(slot)
        sends = []
        frames = []
        for n, color in enumerate(colors):
            message = self.model.new_message(f"{mid}-{n}", slot, dest, color)
            if one_write:
                receipt_id, headers, body = self._send_parts(message, True, dup_id=dup_ids)
                frames.append(encode_frame("SEND", {"destination": dest, **headers}, body))
            else:
                receipt_id = self._send_frame(client, message, receipt=True, dup_id=dup_ids)
            sends.append((message, receipt_id))
        if frames:
            client.conn.transport.send(b"".join(frames))
        def route_all() -> None:
            for message, _ in sends:
                self.model.route(message, receipted=True)
                if dup_ids:
                    self.resendable.add(message.mid)

        self.receipt(client, [r for _, r in sends if r is not None], f"SENDs {mid}-*", route_all)

    # -- subscriptions --------------------------------------------------------------------

    def op_subscribe(self, slot: int, dest: str, ack: str, prefetch: int, selector: str | None,
                     durable: str | None) -> None:
        if slot in self.model.subs:
            return
        client = self.client(slot)
        sub_id = next(client.sub_ids)
        receipt = next(self._receipts)
        headers = {"activemq.prefetchSize": str(prefetch), "receipt": receipt}
        if selector is not None:
            headers["selector"] = selector
        if durable is not None and dest.startswith("/topic/"):
            headers["durable-subscription-name"] = f"{dest.removeprefix('/topic/')}-{durable}"
        else:
            durable = None
        # The model knows the subscription before any of its MESSAGE frames is read.
        client.conn.subscribe(dest, sub_id, ack=ack, headers=headers)
        listener = client.stomp.listener
        listener.wait_quietly(lambda: receipt in listener.receipts or bool(listener.errors), RECEIPT_WAIT)
        self.model.subscribe(slot, sub_id, dest, ack, prefetch, selector, durable)
        self.receipt(client, receipt, f"SUBSCRIBE {dest}")

    def op_unsubscribe(self, slot: int) -> None:
        sub = self.model.subs.get(slot)
        if sub is None:
            return
        client = self.clients[slot]
        if sub.ack == "auto":
            self.quiesce(sub)
        receipt = next(self._receipts)
        client.conn.unsubscribe(sub.sub_id, headers={"receipt": receipt})
        self.receipt(client, receipt, f"UNSUBSCRIBE {sub.sub_id}")
        self.model.close_sub(sub, "unsubscribed", lost_possible=False)
        self.wait_consumers()

    def op_destroy_durable(self, slot: int, dest: str, durable: str) -> None:
        client = self.client(slot)
        name = self.model.durable_name(slot, dest, durable)
        sub = self.model.subs.get(slot)
        receipt = next(self._receipts)
        headers = {"durable-subscription-name": f"{dest.removeprefix('/topic/')}-{durable}",
                   "receipt": receipt}
        if sub is not None and sub.queue.name == name:
            if sub.ack == "auto":
                self.quiesce(sub)
            headers["id"] = sub.sub_id
        else:
            sub = None
        client.conn.send_frame("UNSUBSCRIBE", headers)
        self.receipt(client, receipt, f"UNSUBSCRIBE durable {name}")
        if sub is not None:
            self.model.close_sub(sub, "unsubscribed", lost_possible=False)
        self.model.destroy_durable(name)
        self.wait_consumers()

    def op_purge(self, dest: str) -> None:
        """An operator purges an anycast queue over HTTP (docs/http-api.md), once every frame
        sent so far is carried out."""
        name = dest.removeprefix("/queue/")
        self.sync_all()
        request = urllib.request.Request(
            f"http://{HOST}:{self.broker.http_port}/api/queues/{name}/purge", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=RECEIPT_WAIT) as response:
                purged = json.loads(response.read())["purged"]
        except urllib.error.HTTPError as exc:
            with exc:
                if exc.code == 404:
                    return  # no such queue yet: nothing to purge
                raise Violation("purge", f"POST purge of {name}: {exc.code} {exc.read()!r}") from None
        queue = self.model.queues.get(name)
        if queue is not None:
            self.model.purged(queue, f"purged by an operator (with {purged} others)")

    # -- a streaming reader (the Spark source's endpoints) ----------------------------------

    def op_stream(self, commit: bool = True, most: int | None = None, size: int | None = None) -> None:
        """The queue only a streaming reader reads (`STREAM_QUEUE`; docs/spark.md): once every
        frame sent so far is carried out, the next range after the reader's offset (at most
        `most` messages, read in slices of about `size` when given) is read, then committed
        as Spark does. What it serves must be messages still in the queue, once each, in
        each producer's order; without `most`, every message the queue must hold; a commit
        acknowledges exactly what was served, and they are gone. Not committed, the range is
        read again by the next read (after a restart too)."""
        import pyarrow as pa

        name = STREAM_QUEUE.removeprefix("/queue/")
        self.sync_all()
        queue = self.model.queues.get(name)
        if queue is None:
            return  # nothing sent to it yet
        query = f"after={self.stream_offset}"
        if most is not None:
            query += f"&max={most}" + (f"&size={size}" if size is not None else "")
        status, figures = self.broker.http_get(f"/api/streams/{name}/offsets?{query}")
        if status == 404:
            return  # not made yet (its first SEND was not carried out)
        if status != 200:
            raise Violation("stream", f"GET offsets?{query}: {status} {figures}")
        end = int(figures["end"])
        mids: list[str] = []
        for low, high, page in figures.get("splits") or [[self.stream_offset, end, 0]]:
            url = (f"http://{HOST}:{self.broker.http_port}/api/streams/{name}/read"
                   f"?after={low}&upto={high}&from_page={page}")
            try:
                with urllib.request.urlopen(url, timeout=RECEIPT_WAIT) as response:
                    table = pa.ipc.open_stream(response.read()).read_all()
            except urllib.error.HTTPError as exc:
                with exc:
                    raise Violation("stream", f"GET read ({low}, {high}]: {exc.code} {exc.read()!r}"
                                    ) from None
            mids += [bytes(body).split(b"|", 1)[0].decode() for body in table.column("body").to_pylist()]
        self._check_served(queue, mids, whole=most is None)
        self.log.append(f"   stream read ({self.stream_offset}, {end}]: {len(mids)} messages")
        if not commit:
            return
        request = urllib.request.Request(
            f"http://{HOST}:{self.broker.http_port}/api/streams/{name}/commit",
            data=json.dumps({"offset": end}).encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=RECEIPT_WAIT) as response:
                done = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                raise Violation("stream", f"POST commit {end}: {exc.code} {exc.read()!r}") from None
        if done["acknowledged"] != len(mids) or done["kept"]:
            raise Violation("stream", f"commit to {end} acknowledged {done['acknowledged']} and kept "
                                      f"{done['kept']}; {len(mids)} were served: {mids}")
        for mid in mids:
            copy = queue.copies[mid]
            copy.status = Status.GONE
            copy.note(f"acknowledged by a stream commit to {end}")
        self.stream_offset = end

    def _check_served(self, queue: QueueModel, mids: list[str], *, whole: bool) -> None:
        if len(set(mids)) != len(mids):
            raise Violation("stream", f"a range read served a message twice: {mids}")
        last_seq: dict[int, int] = {}
        for mid in mids:
            copy = queue.copies.get(mid)
            if copy is None or copy.status not in DELIVERABLE:
                raise Violation("stream", f"a range read served {mid}, which the queue must not hold: "
                                          f"{copy.history if copy is not None else 'never routed there'}")
            message = copy.message
            if message.seq < last_seq.get(message.slot, -1):
                raise Violation("stream", f"a range read served {mid} after a later message of the same "
                                          f"producer: {mids}")
            last_seq[message.slot] = message.seq
        if whole:
            missing = sorted(mid for mid, copy in queue.copies.items()
                             if copy.status in PRESENT and mid not in set(mids))
            if missing:
                raise Violation("stream", f"a read to the latest offset left out {missing}: "
                                          f"{[queue.copies[m].history for m in missing[:3]]}")

    def op_disconnect(self, slot: int) -> None:
        client = self.clients.get(slot)
        if client is None:
            return
        sub = self.model.subs.get(slot)
        if sub is not None and sub.ack == "auto":
            self.quiesce(sub)
        try:
            client.stomp.disconnect(RECEIPT_WAIT)
        except AssertionError as exc:
            raise Violation("receipt", f"DISCONNECT of slot {slot}: {exc}") from exc
        # The broker may roll an open transaction back as it reads DISCONNECT, and redeliver
        # what it had ACKed to this very connection before the RECEIPT.
        self.model.rollback(slot, "DISCONNECT")
        self.ingest([slot])
        self.model.sync(slot)
        del self.clients[slot]
        self.model.connection_closed(slot, "disconnected")
        self.wait_consumers()

    def op_drop(self, slot: int) -> None:
        """The socket closes without DISCONNECT: what the subscription held comes back."""
        client = self.clients.get(slot)
        if client is None:
            return
        sub = self.model.subs.get(slot)
        if sub is not None and sub.ack == "auto":
            self.quiesce(sub)
        self.ingest([slot])
        client.stomp.drop()
        del self.clients[slot]
        self.model.connection_closed(slot, "connection dropped")
        self.wait_consumers()

    # -- acknowledgements -----------------------------------------------------------------

    def _held(self, slot: int) -> Sub | None:
        if slot not in self.clients:
            return None
        self.ingest([slot])
        sub = self.model.subs.get(slot)
        return sub if sub is not None and sub.ack != "auto" and sub.held else None

    def op_ack(self, slot: int, pick: float, receipt: bool) -> None:
        sub = self._held(slot)
        if sub is None:
            return
        client = self.clients[slot]
        taken = self.model.take(sub, pick)
        assert taken is not None
        copies, ack_id = taken
        self.log.append(f"   ACK {[c.message.mid for c in copies]}")
        if not receipt:
            client.conn.ack(ack_id)
            self.model.acked(copies, receipted=False, slot=slot, how=f"ACKed by {sub.sub_id}")
            return
        receipt_id = next(self._receipts)
        client.conn.ack(ack_id, receipt=receipt_id)
        self.receipt(client, receipt_id, f"ACK {ack_id}", lambda: self.model.acked(
            copies, receipted=True, slot=slot, how=f"ACKed by {sub.sub_id}"))

    def op_nack(self, slot: int, pick: float, receipt: bool) -> None:
        sub = self._held(slot)
        if sub is None:
            return
        client = self.clients[slot]
        taken = self.model.take(sub, pick)
        assert taken is not None
        copies, ack_id = taken
        self.log.append(f"   NACK {[c.message.mid for c in copies]}")
        self.model.nacked(copies)
        receipt_id = next(self._receipts) if receipt else None
        client.conn.nack(ack_id, receipt=receipt_id)
        if receipt_id is not None:
            self.receipt(client, receipt_id, f"NACK {ack_id}")

    # -- transactions ---------------------------------------------------------------------

    def op_begin(self, slot: int) -> None:
        client = self.client(slot)
        if client.tx is not None:
            return
        client.tx = next(self._tx_names)
        receipt = next(self._receipts)
        client.conn.begin(client.tx, headers={"receipt": receipt})
        self.model.begin(slot, client.tx)
        self.receipt(client, receipt, f"BEGIN {client.tx}")

    def _tx(self, slot: int) -> Client | None:
        client = self.clients.get(slot)
        return client if client is not None and client.tx is not None else None

    def op_tx_send(self, slot: int, dest: str, mid: str, color: str) -> None:
        client = self._tx(slot)
        if client is None:
            return
        message = self.model.new_message(mid, slot, dest, color)
        _receipt, headers, body = self._send_parts(message, False, client.tx)
        client.send_in_transaction(message.dest, client.tx, headers, body)
        self.model.txs[slot].sends.append(message)

    def op_tx_ack(self, slot: int, pick: float, nack: bool = False) -> None:
        client = self._tx(slot)
        sub = self._held(slot)
        if client is None or sub is None:
            return
        taken = self.model.take(sub, pick)
        assert taken is not None
        copies, ack_id = taken
        self.log.append(f"   {'NACK' if nack else 'ACK'} in {client.tx}: {[c.message.mid for c in copies]}")
        (client.conn.nack if nack else client.conn.ack)(ack_id, transaction=client.tx)
        self.model.tx_ack(self.model.txs[slot], sub, copies, nack=nack)

    def op_commit(self, slot: int, no_receipt: bool = False) -> None:
        client = self._tx(slot)
        if client is None:
            return
        name, client.tx = client.tx, None
        if no_receipt:
            client.conn.commit(name)
            self.model.commit(slot, receipted=False)
            return
        receipt = next(self._receipts)
        client.conn.commit(name, headers={"receipt": receipt})
        self.receipt(client, receipt, f"COMMIT {name}",
                     lambda: self.model.commit(slot, receipted=True))

    def op_abort(self, slot: int) -> None:
        client = self._tx(slot)
        if client is None:
            return
        name, client.tx = client.tx, None
        receipt = next(self._receipts)
        client.conn.abort(name, headers={"receipt": receipt})
        self.receipt(client, receipt, f"ABORT {name}", lambda: self.model.rollback(slot, "aborted"))

    # -- quiet points ---------------------------------------------------------------------

    def _wait_for_model(self, stalls: Callable[[], list[Any]], what: str) -> None:
        """Wait until nothing is due; a stall is SETTLE_WAIT without any progress (a slow,
        busy machine still delivering is not a stall)."""
        deadline = time.monotonic() + SETTLE_WAIT
        received = -1
        while True:
            self.ingest()
            found = stalls()
            if not found:
                return
            now_received = sum(sub.received for sub in self.model.subs.values())
            if now_received != received:
                received = now_received
                deadline = time.monotonic() + SETTLE_WAIT
            if time.monotonic() > deadline:
                lines = [f"{copy.message.mid} on {copy.queue.key} for {sub.describe()} "
                         f"(history: {'; '.join(copy.history)})" for copy, sub in found[:6]]
                counts = self._http_counts({copy.queue for copy, _ in found})
                raise Violation("stall", f"{what}: {len(found)} message(s) due to a consumer with "
                                f"credit, nothing delivered for {SETTLE_WAIT}s: " + " | ".join(lines)
                                + f" | broker: {counts}")
            time.sleep(0.005)

    def _http_counts(self, queues: Iterable[QueueModel]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for queue in queues:
            if queue.name is not None:
                status, body = self.broker.http_get(f"/api/queues/{queue.name}")
                out[queue.name] = {k: body.get(k) for k in (
                    "messages", "messages_in_memory", "messages_paged", "messages_delivering",
                    "consumers")} if status == 200 else status
        return out

    def quiesce(self, sub: Sub) -> None:
        """Before an auto-ack subscription goes: let everything due to it arrive, so the model
        need not assume it swallowed messages unseen."""
        self._wait_for_model(lambda: self.model.stalls([sub.queue], only=sub),
                             f"before closing auto-ack {sub.describe()}")

    def op_settle(self) -> None:
        self._wait_for_model(self.model.stalls, "settle")

    def sync_all(self) -> None:
        """A receipted no-op on every connection: every frame sent so far is carried out."""
        for client in list(self.clients.values()):
            receipt = next(self._receipts)
            client.conn.begin("sync", headers={})
            client.conn.abort("sync", headers={"receipt": receipt})
            self.receipt(client, receipt, "sync (BEGIN/ABORT)")

    def op_check(self) -> None:
        """A quiet point: due deliveries in, every frame carried out; then the HTTP counts
        must be what the model says (a range where it is unsure)."""
        self.op_settle()
        self.sync_all()
        self.op_settle()
        self.check_counts()

    def check_counts(self) -> None:
        deadline = time.monotonic() + HTTP_WAIT
        while True:
            self.ingest()
            problems = self._count_problems()
            if not problems:
                return
            if time.monotonic() > deadline:
                raise Violation("count", "; ".join(problems))
            time.sleep(0.02)

    def _count_problems(self) -> list[str]:
        problems = []
        for queue in self.model.queues_with_names():
            low, high = queue.count_range()
            status, body = self.broker.http_get(f"/api/queues/{queue.name}")
            if status != 200:
                if low or queue.subs:
                    problems.append(f"queue {queue.name}: HTTP {status}, the model holds {low}-{high}")
                continue
            got = body.get("messages")
            if not low <= got <= high:
                problems.append(f"queue {queue.name} counts {got} messages, the model says "
                                f"{low}..{high} ({self._listing(queue)}); broker: {body}")
            if body.get("consumers") != len(queue.subs):
                problems.append(f"queue {queue.name} has {body.get('consumers')} consumers, "
                                f"expected {len(queue.subs)}")
        if self.program.config.max_size_bytes in (0, "0"):
            problems += self._page_limit_problems()
        for dead in self.model.dead_queues:
            if dead.name is not None and dead.name not in self.model.durables:
                status, body = self.broker.http_get(f"/api/queues/{dead.name}")
                if status != 404:
                    problems.append(f"queue {dead.name} was removed but the broker has it: {body}")
        return problems

    def _page_limit_problems(self) -> list[str]:
        """With every message paged (max-size-bytes 0), what page limits count
        (`limits.paging.used_messages`) is at least each message some queue of the address
        must still hold; on an anycast address, whose records each go to one queue, at most
        each message its queue may still hold (a topic's page of differently routed records
        counts whole, so it has no such bound)."""
        by_address: dict[str, list[QueueModel]] = {}
        for queue in self.model.queues.values():
            by_address.setdefault(queue.address, []).append(queue)
        problems = []
        for dest, queues in by_address.items():
            copies = [(mid, copy) for queue in queues for mid, copy in queue.copies.items()]
            must = {mid for mid, copy in copies if copy.status in PRESENT and not copy.ack_in_flight}
            may = {mid for mid, copy in copies
                   if copy.status in DELIVERABLE or copy.holder is not None or copy.ack_in_flight}
            status, body = self.broker.http_get(f"/api/addresses/{dest.split('/')[-1]}")
            if status != 200:
                if must:
                    problems.append(f"address {dest}: HTTP {status}, the model holds {len(must)}")
                continue
            used = body["limits"]["paging"]["used_messages"]
            if used < len(must):
                problems.append(f"address {dest}: page limits count {used} messages, fewer than "
                                f"the {len(must)} its queues must still hold: {sorted(must)}")
            if dest.startswith("/queue/") and used > len(may):
                problems.append(f"address {dest}: page limits count {used} messages, more than "
                                f"the {len(may)} its queue may still hold: {sorted(may)}")
        return problems

    def _wait_page_limits_free(self, addresses: set[str]) -> None:
        """Every queue drained: page limits count nothing on their addresses."""
        deadline = time.monotonic() + HTTP_WAIT
        while True:
            left = {}
            for dest in sorted(addresses):
                status, body = self.broker.http_get(f"/api/addresses/{dest.split('/')[-1]}")
                if status == 200 and body["limits"]["paging"]["used_messages"]:
                    left[dest] = body["limits"]["paging"]
            if not left:
                return
            if time.monotonic() > deadline:
                raise Violation("count", f"page limits still count messages after every queue was "
                                         f"drained: {left}")
            time.sleep(0.02)

    @staticmethod
    def _listing(queue: QueueModel) -> str:
        groups: dict[str, list[str]] = {}
        for mid, copy in queue.copies.items():
            if copy.status is not Status.GONE:
                groups.setdefault(copy.status.value, []).append(mid)
        return ", ".join(f"{k}: {' '.join(v)}" for k, v in groups.items()) or "nothing"

    # -- the end --------------------------------------------------------------------------

    def finish(self) -> None:
        self.op_check()
        for slot in list(self.clients):
            self.op_disconnect(slot)
        drained = []
        for queue in list(self.model.queues_with_names()):
            self.drain(queue)
            drained.append(queue)
        self._wait_page_limits_free({queue.address for queue in drained})
        if self.program.final == "kill":
            self.op_kill()
        else:
            self._stop()
            self.data_check()
            self._stopped(killed=False)
        problems = []
        for queue in drained:
            assert queue.name is not None
            status, body = self.broker.http_get(f"/api/queues/{queue.name}")
            if status == 200 and body.get("messages"):
                problems.append(f"queue {queue.name} counts {body['messages']} message(s) after it was "
                                f"drained with receipted ACKs and the broker was {self.program.final}ed: "
                                f"{body}")
            elif status != 200 and queue.kind == "durable":
                problems.append(f"durable subscription {queue.name} is gone after a "
                                f"{self.program.final}: HTTP {status}")
        if problems:
            raise Violation("resurrected", "; ".join(problems))
        self.check_no_pages()
        traces = self.broker.tracebacks()
        if traces:
            raise Violation("traceback", f"the broker logged {len(traces)} traceback(s):\n"
                            + self.broker.log_tail(60))

    def check_no_pages(self) -> None:
        """Every message is acknowledged: no page file may remain (they go as soon as every
        queue of their address is done with them, docs/configuration.md)."""
        addresses = {q.address for q in self.model.queues.values()}
        addresses |= {m.dest for m in self.model.messages.values()}
        for dest in sorted(addresses):
            name = dest.split("/")[-1]
            deadline = time.monotonic() + HTTP_WAIT
            while True:
                status, body = self.broker.http_get(f"/api/addresses/{name}")
                if status != 200 or not body.get("page_files"):
                    break
                if time.monotonic() > deadline:
                    raise Violation("leak", f"address {name} keeps {body['page_files']} page file(s) "
                                    f"with every queue drained: {body}")
                time.sleep(0.05)

    def drain(self, queue: QueueModel) -> None:
        """A fresh consumer takes everything the queue holds, acknowledging with receipts as
        it goes (read limits are then never in the way): it must get every message the model
        says is there, nothing it says is not, within a bounded time; after it the broker
        must count the queue empty."""
        assert queue.name is not None
        must, may = self.model.expected(queue)
        self.log.append(f"drain {queue.name}: expect {sorted(must)} maybe {sorted(may)}")
        if queue.kind == "durable":
            slot = int(queue.name.split(".", 1)[0][1:])
            durable = queue.name.split("-")[-1]
        else:
            slot, durable = DRAIN_SLOT, None
        client = self.client(slot)
        sub_id = next(client.sub_ids)
        receipt = next(self._receipts)
        headers = {"activemq.prefetchSize": "1000", "receipt": receipt}
        if queue.filter is not None:
            headers["selector"] = queue.filter
        if durable is not None:
            headers["durable-subscription-name"] = f"{queue.address.removeprefix('/topic/')}-{durable}"
        client.conn.subscribe(queue.address, sub_id, ack="client", headers=headers)
        sub = self.model.subscribe(slot, sub_id, queue.address, "client", 1000, queue.filter, durable)
        assert sub.queue is queue, f"drain of {queue.key} landed on {sub.queue.key}"
        self.receipt(client, receipt, f"SUBSCRIBE {queue.address} (drain)")
        self._take_everything(client, sub)
        receipt = next(self._receipts)
        client.conn.unsubscribe(sub_id, headers={"receipt": receipt})
        self.receipt(client, receipt, "UNSUBSCRIBE (drain)")
        self.model.close_sub(sub, "drained", lost_possible=False)
        with contextlib.suppress(AssertionError):
            client.stomp.disconnect(RECEIPT_WAIT)
        del self.clients[slot]
        self.model.connection_closed(slot, "drain done")
        deadline = time.monotonic() + HTTP_WAIT
        while True:
            status, body = self.broker.http_get(f"/api/queues/{queue.name}")
            if status == 200 and body.get("messages") == 0:
                return
            if time.monotonic() > deadline:
                raise Violation("stall", f"queue {queue.name} still counts {body.get('messages')} "
                                f"message(s) after a consumer took everything it was given: {body}")
            time.sleep(0.02)

    def _take_everything(self, client: Client, sub: Sub) -> None:
        """The drain consumer ACKs (with receipts) whatever comes until every message the model
        says is there came and the broker counts the queue empty."""
        queue, slot = sub.queue, client.slot
        last_news = progress = time.monotonic()
        while True:
            before = sub.received
            self.ingest([slot])
            if sub.received != before:
                last_news = progress = time.monotonic()
            if sub.held:
                copies, ack_id = self.model.take(sub, 0.999) or ([], "")
                receipt = next(self._receipts)
                client.conn.ack(ack_id, receipt=receipt)
                self.receipt(client, receipt, f"ACK {ack_id} (drain)", lambda c=copies: self.model.acked(
                    c, receipted=True, slot=slot, how="drained"))
                progress = time.monotonic()
                continue
            missing = [mid for mid, c in queue.copies.items() if c.status in PRESENT]
            now = time.monotonic()
            if not missing:
                # Nothing more can come once the broker counts the queue empty: a delivery is
                # counted until its ACK is receipted, and so is every message it still has.
                status, body = self.broker.http_get(f"/api/queues/{queue.name}")
                if status == 200 and body.get("messages") == 0:
                    return
                if now - progress > HTTP_WAIT:
                    raise Violation("stall", f"queue {queue.name} still counts {body.get('messages')} "
                                    f"message(s) {HTTP_WAIT}s after a consumer took everything it "
                                    f"was given: {body}")
            elif now - last_news > SETTLE_WAIT:
                counts = self._http_counts([queue])
                seen = counts.get(queue.name)
                kind = "lost" if isinstance(seen, dict) and seen.get("messages") == 0 else "stall"
                raise Violation(kind, f"draining {queue.name}: {len(missing)} message(s) never came, "
                                f"nothing for {SETTLE_WAIT}s: {missing[:20]} (the broker counts {counts}); "
                                + "; ".join(f"{m}: {' / '.join(queue.copies[m].history)}"
                                            for m in missing[:5]))
            time.sleep(0.005)

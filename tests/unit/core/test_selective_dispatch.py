"""Selective dispatch costs what changed, not what is pending (`Queue._offer_pending`).

In-process, no sockets: a broker with a store that keeps nothing, consumers whose sink
records deliveries, and selectors that count their evaluations. The behaviour is checked
against the full walk it replaced (every pending ref offered to every consumer with credit
at every dispatch) on random programs: same deliveries, in the same order, to the same
consumers.
"""

from __future__ import annotations

import random
import time
from collections import deque

import pytest

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode, Consumer, MessageRef
from pagemq.core.queue import PRIORITIES, Queue
from pagemq.core.settings import AddressSettingsRepository


class Recorder:
    """A delivery sink: (consumer key, body) in delivery order."""

    def __init__(self) -> None:
        self.log: list[tuple[object, bytes]] = []

    def deliver(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        self.log.append((consumer.key, ref.message.body))


class Counting:
    """Wraps a compiled selector and counts its evaluations."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls = 0

    def matches_headers(self, view: object) -> bool:
        self.calls += 1
        return self.inner.matches_headers(view)  # type: ignore[attr-defined, no-any-return]


def setup() -> tuple[Broker, Queue, Recorder]:
    broker = Broker(AddressSettingsRepository())
    address = broker.ensure_address("q", "anycast")
    queue = broker.ensure_queue(address, "q", "anycast")
    return broker, queue, Recorder()


def send(broker: Broker, color: str, body: str, priority: int = 4) -> None:
    broker.send("q", "anycast", {"color": color}, body.encode(), priority=priority)


def counted(broker: Broker, queue: Queue, sink: Recorder, selector: str, **options: object) -> Counting:
    consumer = broker.subscribe(queue, sink, key=selector, selector=selector, **options)  # type: ignore[arg-type]
    counting = Counting(consumer.selector)
    consumer.selector = counting  # type: ignore[assignment]
    return counting


def behind_blue(count: int, **options: object) -> tuple[Broker, Queue, Recorder, Counting]:
    """`count` blue messages pending, then a consumer of red ones, which looks at all of
    them once as it subscribes (before its selector's evaluations are counted)."""
    broker, queue, sink = setup()
    for n in range(count):
        send(broker, "blue", f"b{n}")
    return broker, queue, sink, counted(broker, queue, sink, "color = 'red'", **options)


def test_a_send_evaluates_an_idle_selector_once_however_much_is_pending() -> None:
    broker, queue, sink, red = behind_blue(10_000)
    started = time.perf_counter()
    for n in range(1_000):
        send(broker, "blue", f"late-b{n}")
    elapsed = time.perf_counter() - started
    assert red.calls == 1_000  # one per SEND, on the new message only
    send(broker, "red", "r")
    assert sink.log == [("color = 'red'", b"r")]
    assert queue.pending == 11_000
    assert elapsed < 2.0  # was ~10,000 evaluations per SEND: minutes


def test_a_consumer_without_credit_is_not_looked_at_and_resumes_where_it_stopped() -> None:
    broker, queue, sink, red = behind_blue(10_000, ack_mode=AckMode.CLIENT, prefetch=1)
    consumer = queue.consumers[0]
    send(broker, "red", "r1")
    assert [body for _key, body in sink.log] == [b"r1"]
    red.calls = 0
    for n in range(500):
        send(broker, "blue", f"late-b{n}")
    send(broker, "red", "r2")
    send(broker, "blue", "after-r2")
    assert red.calls == 0  # no credit: not looked at
    broker.acknowledge(queue, consumer.take_through(1))
    assert [body for _key, body in sink.log] == [b"r1", b"r2"]
    assert red.calls == 501  # the refs it had not seen, up to r2: not the 10,000 before them
    red.calls = 0
    broker.acknowledge(queue, consumer.take_through(2))
    assert red.calls == 1  # the one ref after r2


def test_a_returned_ref_is_offered_again_at_the_head() -> None:
    broker, queue, sink, reds = behind_blue(1_000, ack_mode=AckMode.INDIVIDUAL, prefetch=1)
    consumer = queue.consumers[0]
    send(broker, "red", "r1")
    send(broker, "red", "r2")
    reds.calls = 0
    broker.nack(queue, [consumer.take(1)])
    assert [body for _key, body in sink.log] == [b"r1", b"r1"]  # the head first, not r2
    assert reds.calls == 1


# -- the full walk it replaced, as the reference -------------------------------------------


class FullWalkQueue(Queue):
    """Every dispatch offers every pending ref to every consumer with credit."""

    def _offer_pending(self) -> int:
        moved = 0
        kept: list[deque[MessageRef]] = [deque() for _ in range(PRIORITIES)]
        for level in range(PRIORITIES - 1, -1, -1):
            refs = self._levels[level]
            while refs:
                ref = refs.popleft()
                consumer = self._first_ready_accepting(ref)
                if consumer is None:
                    kept[level].append(ref)
                    continue
                self._pending -= 1
                consumer.deliver(ref)
                moved += 1
        self._levels = kept
        self._top = max((i for i in range(PRIORITIES) if kept[i]), default=-1)
        return moved

    def _first_ready_accepting(self, ref: MessageRef) -> Consumer | None:
        count = len(self.consumers)
        for step in range(count):
            index = (self._next_consumer + step) % count
            consumer = self.consumers[index]
            if consumer.has_credit() and consumer.accepts(ref.message):
                self._next_consumer = index + 1
                return consumer
        return None


SELECTORS = [None, "color = 'red'", "color IN ('red', 'green')", "color <> 'blue'", "color = 'green'"]
COLORS = ["red", "green", "blue", "blue", "blue"]


def program(seed: int) -> list[tuple[object, ...]]:
    """Random sends (colors, priorities), subscribes, acks, nacks and closes."""
    rng = random.Random(seed)
    steps: list[tuple[object, ...]] = []
    for n in range(600):
        roll = rng.random()
        if roll < 0.55:
            steps.append(("send", rng.choice(COLORS), f"m{n}", rng.choice([4, 4, 4, 1, 7, 9])))
        elif roll < 0.62:
            steps.append(("subscribe", rng.choice(SELECTORS), rng.choice([1, 2, 5, 50])))
        elif roll < 0.85:
            steps.append(("ack", rng.random()))
        elif roll < 0.95:
            steps.append(("nack", rng.random()))
        else:
            steps.append(("close", rng.random()))
    return steps


def run(steps: list[tuple[object, ...]], queue_class: type[Queue]) -> list[tuple[object, bytes]]:
    broker, queue, sink = setup()
    queue.__class__ = queue_class
    consumers: list[Consumer] = []
    for number, step in enumerate(steps):
        kind = step[0]
        if kind == "send":
            send(broker, str(step[1]), str(step[2]), int(step[3]))  # type: ignore[call-overload]
        elif kind == "subscribe":
            consumers.append(broker.subscribe(queue, sink, key=number, selector=step[1],  # type: ignore[arg-type]
                                              ack_mode=AckMode.INDIVIDUAL, prefetch=step[2]))  # type: ignore[arg-type]
        elif consumers:
            consumer = consumers[int(step[1] * len(consumers))]  # type: ignore[operator]
            if kind == "close":
                consumers.remove(consumer)
                broker.close_consumer(queue, consumer)
            elif consumer.in_flight:
                tag = sorted(consumer.in_flight)[int(step[1] * len(consumer.in_flight))]  # type: ignore[operator]
                if kind == "ack":
                    broker.acknowledge(queue, [consumer.take(tag)])
                else:
                    broker.nack(queue, [consumer.take(tag)])
    sink.log.append(("left", b",".join(ref.message.body for ref in queue)))
    return sink.log


@pytest.mark.parametrize("seed", range(40))
def test_deliveries_are_those_of_the_full_walk(seed: int) -> None:
    steps = program(seed)
    assert run(steps, Queue) == run(steps, FullWalkQueue)

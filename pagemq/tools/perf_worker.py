"""One `pagemq perf` worker: several STOMP connections on one event loop, in its own process.

A single Python process tops out well below what a broker can take, so the parent spreads
connections over worker processes. Each worker speaks to the parent over a Pipe (phase
plan -> "ready" -> "go" -> result) and over a shared board of integers: slot 0 is the stop
flag the parent raises (duration over, count reached, run stalled), and every worker
publishes its running produced/consumed totals in its own two slots, which is how the
parent knows when the consumers as a whole have seen `--count` messages. Only the owner
writes a slot, so the board needs no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Protocol

from pagemq.tools.perf_client import ClientOptions, Consumer, PerfError, Producer, StompLink, open_link
from pagemq.tools.perf_stats import RoleStats

__all__ = [
    "STOP",
    "Board",
    "PhaseRun",
    "WorkerPlan",
    "WorkerResult",
    "board_size",
    "consumed_slot",
    "loop_factory",
    "produced_slot",
    "worker_main",
]

STOP = 0
TICK_SECONDS = 0.005


def produced_slot(worker: int) -> int:
    return 1 + 2 * worker


def consumed_slot(worker: int) -> int:
    return 2 + 2 * worker


def board_size(workers: int) -> int:
    return 1 + 2 * workers


class Board(Protocol):
    """Shared integers: a `multiprocessing.RawArray('q')` across processes, a list in tests."""

    def __getitem__(self, index: int, /) -> int: ...

    def __setitem__(self, index: int, value: int, /) -> None: ...


@dataclass(frozen=True)
class WorkerPlan:
    """One worker's share of a phase: a quota per producer (None: until stopped), consumers."""

    phase: str
    producer_quotas: tuple[int | None, ...] = ()
    consumers: int = 0

    @property
    def connections(self) -> int:
        return len(self.producer_quotas) + self.consumers


@dataclass
class WorkerResult:
    producers: RoleStats = field(default_factory=RoleStats)
    consumers: RoleStats = field(default_factory=RoleStats)


class PhaseRun:
    """Connect (all or nothing), then run the producers and consumers until done or stopped."""

    def __init__(self, options: ClientOptions, plan: WorkerPlan, board: Board, worker: int) -> None:
        self.options = options
        self.plan = plan
        self.board = board
        self.worker = worker
        self.produced = 0
        self.consumed = 0
        self.links: list[StompLink] = []

    async def connect(self) -> None:
        attempts = [asyncio.ensure_future(open_link(self.options)) for _ in range(self.plan.connections)]
        done = await asyncio.gather(*attempts, return_exceptions=True)
        self.links = [link for link in done if isinstance(link, StompLink)]
        for outcome in done:
            if isinstance(outcome, BaseException):
                self.close()
                raise outcome

    def close(self) -> None:
        for link in self.links:
            link.close()

    def _count_produced(self, count: int) -> None:
        self.produced += count

    def _count_consumed(self, count: int) -> None:
        self.consumed += count

    def _publish(self) -> None:
        self.board[produced_slot(self.worker)] = self.produced
        self.board[consumed_slot(self.worker)] = self.consumed

    async def _watch(self, stop: asyncio.Event) -> None:
        """Publish progress and pick up the parent's stop flag every few milliseconds."""
        while True:
            self._publish()
            if self.board[STOP] and not stop.is_set():
                stop.set()
            await asyncio.sleep(TICK_SECONDS)

    async def run(self) -> WorkerResult:
        stop = asyncio.Event()
        quotas = self.plan.producer_quotas
        producer_links = self.links[: len(quotas)]
        consumer_links = self.links[len(quotas) :]
        consumers = [Consumer(link, self.options, stop, self._count_consumed) for link in consumer_links]
        for consumer in consumers:
            consumer.subscribe()
        producers = [
            Producer(link, self.options, quota, stop, self._count_produced)
            for link, quota in zip(producer_links, quotas, strict=True)
        ]
        watcher = asyncio.ensure_future(self._watch(stop))
        try:
            produced = await asyncio.gather(*(producer.run() for producer in producers))
            consumed = await asyncio.gather(*(consumer.run() for consumer in consumers))
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self._publish()
            self.close()
        result = WorkerResult()
        for stats in produced:
            result.producers.merge(stats)
        for stats in consumed:
            result.consumers.merge(stats)
        return result


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when installed: it roughly halves the client's cost per frame."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _serve_phase(options: ClientOptions, plan: WorkerPlan, board: Board, worker: int,
                       channel: Connection) -> None:
    run = PhaseRun(options, plan, board, worker)
    try:
        await run.connect()
    except PerfError as exc:
        channel.send(("error", str(exc)))
        return
    channel.send(("ready", None))
    command, _ = await asyncio.get_running_loop().run_in_executor(None, channel.recv)
    if command != "go":
        run.close()
        return
    channel.send(("result", await run.run()))


def worker_main(worker: int, options: ClientOptions, board: Board, channel: Connection) -> None:
    """Process entry point: run phases as the parent sends them, until "exit"."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        while True:
            try:
                command, plan = channel.recv()
            except (EOFError, KeyboardInterrupt):
                return
            if command != "phase":
                return
            try:
                runner.run(_serve_phase(options, plan, board, worker, channel))
            except KeyboardInterrupt:
                return

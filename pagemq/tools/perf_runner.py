"""The parent side of `pagemq perf`: worker processes, phase control, merged results.

The parent never touches a socket. It splits each phase's connections over the workers,
waits until every connection is up (so connection set-up is not timed), says "go" to all
at one instant, then watches the shared board every 10 ms to decide when the phase is
over: the consumers as a whole reached the target count, the duration elapsed, or nothing
moved for `idle_timeout` (a stalled run ends and is reported incomplete instead of hanging).
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any

from pagemq.tools.perf_client import ClientOptions, PerfError
from pagemq.tools.perf_rss import RssSampler
from pagemq.tools.perf_stats import RoleSummary, summarize
from pagemq.tools.perf_worker import (
    STOP,
    WorkerPlan,
    WorkerResult,
    board_size,
    consumed_slot,
    produced_slot,
    worker_main,
)

__all__ = ["PhasePlan", "PhaseReport", "WorkerPool", "split_count", "split_plan"]

POLL_SECONDS = 0.01
RSS_EVERY = 10  # polls: the broker's memory is sampled every 0.1 s


@dataclass(frozen=True)
class PhasePlan:
    """One phase: its connections, and what ends it (quotas, a consumer target or a duration)."""

    name: str
    producer_quotas: tuple[int | None, ...] = ()
    consumers: int = 0
    consume_target: int | None = None
    duration: float | None = None
    idle_timeout: float = 30.0


@dataclass(frozen=True)
class PhaseReport:
    name: str
    producers: RoleSummary | None
    consumers: RoleSummary | None
    stalled: bool
    broker_peak_rss: int | None = None  # bytes, with --broker-pid

    @property
    def complete(self) -> bool:
        return all(role.complete for role in (self.producers, self.consumers) if role is not None)


def split_count(total: int, parts: int) -> list[int]:
    """`total` as `parts` near-equal integers (the first ones take the remainder)."""
    share, extra = divmod(total, parts)
    return [share + (1 if index < extra else 0) for index in range(parts)]


def split_plan(plan: PhasePlan, workers: int) -> list[WorkerPlan | None]:
    """Deal producers and consumers round-robin, so each phase is balanced on its own."""
    quotas: list[list[int | None]] = [[] for _ in range(workers)]
    for index, quota in enumerate(plan.producer_quotas):
        quotas[index % workers].append(quota)
    consumers = [0] * workers
    for index in range(plan.consumers):
        consumers[index % workers] += 1
    return [
        WorkerPlan(plan.name, tuple(quotas[w]), consumers[w]) if quotas[w] or consumers[w] else None
        for w in range(workers)
    ]


class WorkerPool:
    """`processes` spawned workers that run the phases they are given, one at a time."""

    def __init__(self, options: ClientOptions, processes: int, broker_pid: int | None = None) -> None:
        self.options = options
        self.size = processes
        self.rss = RssSampler(broker_pid)
        context = multiprocessing.get_context("spawn")
        self.board: Any = context.RawArray("q", board_size(processes))
        self.channels: list[Connection] = []
        self._their_ends: list[Connection] = []
        self.processes: list[Any] = []
        for worker in range(processes):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=worker_main, args=(worker, options, self.board, theirs),
                name=f"pagemq-perf-{worker}", daemon=True,
            )
            self.channels.append(ours)
            self._their_ends.append(theirs)
            self.processes.append(process)

    def __enter__(self) -> WorkerPool:
        for process, theirs in zip(self.processes, self._their_ends, strict=True):
            process.start()
            theirs.close()  # only the child holds it now: its death reads as EOF here
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for channel in self.channels:
            try:
                channel.send(("exit", None))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 5
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join(1)
        for channel in self.channels:
            channel.close()

    def _reset_board(self) -> None:
        for index in range(board_size(self.size)):
            self.board[index] = 0

    def _totals(self) -> tuple[int, int]:
        produced = sum(self.board[produced_slot(w)] for w in range(self.size))
        consumed = sum(self.board[consumed_slot(w)] for w in range(self.size))
        return produced, consumed

    def _receive(self, workers: list[int], timeout: float) -> dict[int, tuple[str, Any]]:
        """One message from each of `workers`, or a PerfError naming who did not answer."""
        replies: dict[int, tuple[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while len(replies) < len(workers):
            self._check_alive(w for w in workers if w not in replies)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PerfError("workers did not connect in time")
            for channel in wait([self.channels[w] for w in workers if w not in replies],
                                min(remaining, 0.2)):
                assert isinstance(channel, Connection)
                worker = self.channels.index(channel)
                replies[worker] = self._recv(worker)
        return replies

    def _recv(self, worker: int) -> tuple[str, Any]:
        try:
            message: tuple[str, Any] = self.channels[worker].recv()
        except (EOFError, OSError):
            self.processes[worker].join(1)
            raise PerfError(
                f"worker process {worker} exited with code {self.processes[worker].exitcode}"
            ) from None
        return message

    def _check_alive(self, workers: Any) -> None:
        for worker in workers:
            code = self.processes[worker].exitcode
            if code is not None:
                raise PerfError(f"worker process {worker} exited with code {code}")

    def run_phase(self, plan: PhasePlan) -> PhaseReport:
        """Connect, start everyone at once, watch until done, merge the workers' results."""
        shares = split_plan(plan, self.size)
        active = [w for w, share in enumerate(shares) if share is not None]
        self._reset_board()
        for worker in active:
            self.channels[worker].send(("phase", shares[worker]))
        replies = self._receive(active, self.options.connect_timeout * 2 + 10)
        errors = sorted({str(body) for kind, body in replies.values() if kind == "error"})
        if errors:
            for worker, (kind, _) in replies.items():
                if kind == "ready":
                    self.channels[worker].send(("abort", None))
            raise PerfError("; ".join(errors))
        self.rss.reset()
        self.rss.sample()
        start_ns = time.time_ns()
        for worker in active:
            self.channels[worker].send(("go", None))
        results, stalled = self._watch(plan, active)
        self.rss.sample()
        return self._report(plan, start_ns, results, stalled)

    def _watch(self, plan: PhasePlan, active: list[int]) -> tuple[list[WorkerResult], bool]:
        results: dict[int, WorkerResult] = {}
        started = time.monotonic()
        last_totals = (-1, -1)
        last_change = started
        stalled = False
        polls = 0
        while len(results) < len(active):
            polls += 1
            if polls % RSS_EVERY == 0:
                self.rss.sample()
            waiting = [w for w in active if w not in results]
            for channel in wait([self.channels[w] for w in waiting], POLL_SECONDS):
                assert isinstance(channel, Connection)
                worker = self.channels.index(channel)
                _, results[worker] = self._recv(worker)
            self._check_alive(w for w in active if w not in results)
            if self.board[STOP]:
                continue
            now = time.monotonic()
            totals = self._totals()
            if totals != last_totals:
                last_totals, last_change = totals, now
            if _finished(plan, totals[1], now - started):
                self.board[STOP] = 1
            elif now - last_change >= plan.idle_timeout:
                stalled = True
                self.board[STOP] = 1
        return [results[w] for w in active], stalled

    def _report(self, plan: PhasePlan, start_ns: int, results: list[WorkerResult],
                stalled: bool) -> PhaseReport:
        producers = consumers = None
        if plan.producer_quotas:
            quota_total = None if None in plan.producer_quotas else sum(q or 0 for q in plan.producer_quotas)
            producers = summarize(plan.name, "producers", (r.producers for r in results), start_ns,
                                  complete=not stalled)
            if quota_total is not None and producers.messages < quota_total:
                producers = _incomplete(producers)
        if plan.consumers:
            consumers = summarize(plan.name, "consumers", (r.consumers for r in results), start_ns,
                                  complete=not stalled)
            if plan.consume_target is not None and consumers.messages < plan.consume_target:
                consumers = _incomplete(consumers)
        return PhaseReport(plan.name, producers, consumers, stalled, self.rss.peak)


def _finished(plan: PhasePlan, consumed: int, elapsed: float) -> bool:
    """The consumers reached the target, or the time is up (producers with quotas end alone)."""
    if plan.consume_target is not None and consumed >= plan.consume_target:
        return True
    return plan.duration is not None and elapsed >= plan.duration


def _incomplete(summary: RoleSummary) -> RoleSummary:
    return replace(summary, complete=False)

"""What the event loop runs while it stalls: `pagemq serve` with a stack sampler and GC timer.

    .venv/bin/python benchmarks/stall_probe.py --report stalls.txt -- serve --data-dir D ...

Everything after `--` is `pagemq`'s command line. The broker runs as usual (uvloop and
all); in addition:

- a watchdog thread looks every `--sample-ms` (2 ms) at when the loop last ran the loop-lag
  sampler's 10 ms timer (`server/loop_lag.py`). Once that is more than 20 ms overdue the
  loop is stalled, and every look takes the loop thread's Python stack
  (`sys._current_frames`) and its CPU time (`time.pthread_getcpuclockid`). When the loop
  runs again, a stall of `--stall-ms` (50) or more is kept with its samples;
- `gc.callbacks` times every collection (generation, duration, objects collected);
- the callbacks that carry out STOMP frames (`StompServerProtocol.data_received`,
  `StompSession._run_deferred`) are wrapped: each one's loop-thread CPU time, and for those
  of `--stall-ms` / 4 or more the frames it carried out, by kind.

At SIGTERM/SIGINT (as `pagemq serve` stops) the report is written: each stall (wall time,
loop-thread CPU, GCs inside it, the callback it was in: the outermost broker frame of its
samples, and the innermost), then per outermost callback and per innermost pagemq
function, how many samples of stalls fell there ("?": the loop thread was in C code, inside
uvloop: waiting for the GIL, or for a CPU on a loaded machine). asyncio's debug mode says which handle was
slow too, but costs far more and does not run under uvloop; sampling 500 times a second
costs the loop the GIL hand-overs to one thread that mostly sleeps.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

INTERVAL = 0.010  # the loop-lag sampler's
OVERDUE = 0.020  # past the 10 ms timer's due time by this much: stalled


@dataclass
class Stall:
    started: float  # monotonic, when the timer was due
    wall: float = 0.0
    cpu: float = 0.0
    samples: list[tuple[str, ...]] = field(default_factory=list)
    gcs: list[tuple[int, float, int]] = field(default_factory=list)  # generation, seconds, collected


class Probe:
    def __init__(self, report: Path, sample: float, stall: float) -> None:
        self.report = report
        self.sample = sample
        self.stall = stall
        self.beat = time.monotonic()
        self.loop_thread: int | None = None
        self.stalls: list[Stall] = []
        self.gcs: list[tuple[float, int, float, int]] = []  # at, generation, seconds, collected
        self._gc_started = 0.0
        self._current: Stall | None = None
        self._cpu0 = 0.0
        self._lock = threading.Lock()
        self.callbacks: Counter[str] = Counter()
        self.slow: list[tuple[str, float, dict[str, int]]] = []  # callback, CPU seconds, frames by kind

    # -- loop side: the loop-lag sampler's tick is the heartbeat
    def install(self) -> None:
        from pagemq.server import loop_lag

        probe = self
        original_start, original_schedule = loop_lag.LoopLag.start, loop_lag.LoopLag._schedule

        def start(lag: loop_lag.LoopLag, loop: object) -> None:
            probe.loop_thread = threading.get_ident()
            threading.Thread(target=probe.watch, name="stall-probe", daemon=True).start()
            original_start(lag, loop)  # type: ignore[arg-type]

        def schedule(lag: loop_lag.LoopLag) -> None:
            original_schedule(lag)
            probe.beat = lag._due  # the loop's clock is time.monotonic

        self._count_frames()
        loop_lag.LoopLag.start = start  # type: ignore[method-assign]
        loop_lag.LoopLag._schedule = schedule  # type: ignore[method-assign]
        gc.callbacks.append(self._gc)
        atexit.register(self.write)

    def _count_frames(self) -> None:
        """Per callback that carries out frames (a socket read, a deferred share): its loop-
        thread CPU and the frames it ran by kind; those of `--stall-ms` / 4 or more are kept."""
        from pagemq.server import stomp_server, stomp_session

        probe = self
        kinds: Counter[str] = Counter()
        handle = stomp_session.StompSession._handle

        def counted(session: stomp_session.StompSession, event: object) -> None:
            kinds[type(event).__name__] += 1
            handle(session, event)

        def timed(function):  # type: ignore[no-untyped-def]
            def run(*args):  # type: ignore[no-untyped-def]
                kinds.clear()
                cpu = time.thread_time()
                try:
                    return function(*args)
                finally:
                    spent = time.thread_time() - cpu
                    probe.callbacks[function.__name__] += 1
                    if spent >= probe.stall / 4:
                        probe.slow.append((function.__name__, spent, dict(kinds)))
            return run

        stomp_session.StompSession._handle = counted  # type: ignore[method-assign]
        stomp_session.StompSession._run_deferred = timed(  # type: ignore[method-assign]
            stomp_session.StompSession._run_deferred)
        stomp_server.StompServerProtocol.data_received = timed(  # type: ignore[method-assign]
            stomp_server.StompServerProtocol.data_received)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        seconds = time.perf_counter() - self._gc_started
        entry = (time.monotonic(), info["generation"], seconds, info["collected"])
        self.gcs.append(entry)
        current = self._current
        if current is not None:
            current.gcs.append(entry[1:])

    # -- watchdog thread
    def watch(self) -> None:
        assert self.loop_thread is not None
        clock = time.pthread_getcpuclockid(self.loop_thread)
        while True:
            time.sleep(self.sample)
            now = time.monotonic()
            beat = self.beat
            current = self._current
            if now - beat > OVERDUE:
                if current is None or current.started != beat:
                    if current is not None:
                        self._close(current, clock)
                    current = self._current = Stall(beat)
                    self._cpu0 = time.clock_gettime(clock)
                frame = sys._current_frames().get(self.loop_thread)
                if frame is not None:
                    current.samples.append(_stack(frame))
            elif current is not None:
                self._close(current, clock)
                self._current = None

    def _close(self, stall: Stall, clock: int) -> None:
        # the timer ran (late) one interval before the due time it then set
        ended = self.beat - INTERVAL if self.beat != stall.started else time.monotonic()
        stall.wall = ended - stall.started
        stall.cpu = time.clock_gettime(clock) - self._cpu0 + OVERDUE  # the first 20 ms unseen: assumed busy
        if stall.wall >= self.stall:
            with self._lock:
                self.stalls.append(stall)

    # -- the report
    def write(self) -> None:
        with self._lock:
            stalls = list(self.stalls)
        lines = [f"{len(stalls)} stalls >= {self.stall * 1000:.0f} ms "
                 f"({sum(1 for s in stalls if s.cpu >= self.stall)} with >= {self.stall * 1000:.0f} ms "
                 f"of loop-thread CPU)"]
        slow_gcs = [g for g in self.gcs if g[2] >= 0.010]
        lines.append(f"{len(self.gcs)} collections (start-up's full one included), {len(slow_gcs)} of "
                     "10 ms or more (wall time): "
                     + ", ".join(f"gen{g} {s * 1000:.0f} ms ({c} freed)" for _, g, s, c in slow_gcs[:30]))
        lines.append(f"frame callbacks {dict(self.callbacks)}; {len(self.slow)} used "
                     f">= {self.stall * 250:.1f} ms CPU:")
        by_cpu = sorted(self.slow, key=lambda entry: -entry[1])
        lines += [f"  {name} {cpu * 1000:.1f} ms {kinds}" for name, cpu, kinds in by_cpu[:40]]
        outer: Counter[str] = Counter()
        inner: Counter[str] = Counter()
        for stall in stalls:
            for sample in stall.samples:
                outer[_outermost(sample)] += 1
                inner[_innermost(sample)] += 1
        lines.append("\nsamples per callback (outermost broker frame):")
        lines += [f"  {n:5} {name}" for name, n in outer.most_common(25)]
        lines.append("\nsamples per innermost pagemq frame:")
        lines += [f"  {n:5} {name}" for name, n in inner.most_common(40)]
        lines.append("\neach stall: wall ms, loop CPU ms, GCs, callbacks (samples)")
        for stall in stalls:
            calls = Counter(_outermost(s) for s in stall.samples)
            gcs = " ".join(f"gen{g}:{s * 1000:.0f}ms" for g, s, _ in stall.gcs)
            lines.append(f"  {stall.wall * 1000:6.0f} {stall.cpu * 1000:6.0f} [{gcs}] "
                         + "; ".join(f"{k} ({v})" for k, v in calls.most_common(3)))
            if stall.samples:
                mid = stall.samples[len(stall.samples) // 2]
                lines += [f"        {f}" for f in mid[-14:]]
        self.report.write_text("\n".join(lines) + "\n")


class Tracer:
    """Every callback the loop runs, timed; at each loop-lag tick that was a stall, what ran
    since the tick before (by callback name: count, loop-thread CPU, the longest one), and
    how much of the stall no traced callback accounts for (uvloop itself, untraced protocol
    callbacks, waiting for a CPU)."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.records: list[tuple[str, float]] = []  # since the last tick: name, CPU seconds
        self.reports: list[str] = []
        self._tick_cpu = 0.0

    def wrap(self, callback, name=None):  # type: ignore[no-untyped-def]
        records = self.records
        if name is None:
            name = _callback_name(callback)

        def traced(*args):  # type: ignore[no-untyped-def]
            cpu = time.thread_time()
            try:
                return callback(*args)
            finally:
                records.append((name, time.thread_time() - cpu))
        return traced

    def install(self) -> None:
        import uvloop

        from pagemq.server import loop_lag, stomp_server

        tracer = self

        class TracingLoop(uvloop.Loop):  # type: ignore[misc]
            def call_soon(self, callback, *args, context=None):  # type: ignore[no-untyped-def]
                return super().call_soon(tracer.wrap(callback), *args, context=context)

            def call_soon_threadsafe(self, callback, *args, context=None):  # type: ignore[no-untyped-def]
                return super().call_soon_threadsafe(tracer.wrap(callback), *args, context=context)

            def call_at(self, when, callback, *args, context=None):  # type: ignore[no-untyped-def]
                return super().call_at(when, tracer.wrap(callback), *args, context=context)

            def call_later(self, delay, callback, *args, context=None):  # type: ignore[no-untyped-def]
                return super().call_later(delay, tracer.wrap(callback), *args, context=context)

        original_run = uvloop.run

        def run(main, **kwargs):  # type: ignore[no-untyped-def]
            kwargs["loop_factory"] = TracingLoop
            return original_run(main, **kwargs)

        uvloop.run = run
        received = stomp_server.StompServerProtocol.data_received
        stomp_server.StompServerProtocol.data_received = (  # type: ignore[method-assign]
            lambda protocol, data: tracer.wrap(received, "data_received")(protocol, data))
        original_tick = loop_lag.LoopLag._tick

        def tick(lag: loop_lag.LoopLag) -> None:
            late = lag._loop.time() - lag._due  # type: ignore[union-attr]
            cpu = time.thread_time()
            records = tracer.records
            if late >= tracer.probe.stall:
                tracer.note(late, cpu - tracer._tick_cpu, records)
            records.clear()
            original_tick(lag)
            tracer._tick_cpu = time.thread_time()

        loop_lag.LoopLag._tick = tick  # type: ignore[method-assign]
        atexit.register(self.write)

    def note(self, late: float, cpu: float, records: list[tuple[str, float]]) -> None:
        by_name: dict[str, list[float]] = {}
        for name, spent in records:
            entry = by_name.setdefault(name, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += spent
            entry[2] = max(entry[2], spent)
        traced = sum(e[1] for e in by_name.values())
        top = sorted(by_name.items(), key=lambda item: -item[1][1])[:8]
        self.reports.append(
            f"late {late * 1000:.0f} ms, loop CPU {cpu * 1000:.0f} ms, traced {traced * 1000:.0f} ms in "
            f"{len(records)} callbacks: "
            + "; ".join(f"{name} x{n} {total * 1000:.1f} ms (max {most * 1000:.1f})"
                        for name, (n, total, most) in top))

    def write(self) -> None:
        path = self.probe.report.with_suffix(".trace.txt")
        path.write_text(f"{len(self.reports)} stalls\n" + "\n".join(self.reports) + "\n")


def _callback_name(callback: object) -> str:
    function = getattr(callback, "__func__", callback)
    name = getattr(function, "__qualname__", None) or type(callback).__name__
    owner = getattr(callback, "__self__", None)
    if name.endswith("__step") or name.endswith("__wakeup"):  # a task: its coroutine
        coro = getattr(owner, "get_coro", lambda: None)()
        name += f"[{getattr(coro, '__qualname__', '?')}]"
    elif name == "partial":
        name = "partial:" + _callback_name(getattr(callback, "func", None))
    return name


def _stack(frame: FrameType | None) -> tuple[str, ...]:
    """The stack, outermost first, as file:function:line."""
    out: list[str] = []
    while frame is not None:
        code = frame.f_code
        name = code.co_filename.rsplit("/pagemq/", 1)[-1] if "/pagemq/" in code.co_filename else \
            code.co_filename.rsplit("/", 1)[-1]
        out.append(f"{name}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return tuple(reversed(out))


def _outermost(sample: tuple[str, ...]) -> str:
    """The callback the loop ran: the first frame past the loop's runner (and asyncio's own
    modules, whose `Handle._run` calls it when uvloop is not installed)."""
    start = 0
    for index, entry in enumerate(sample):
        if entry.startswith(("runners.py:", "base_events.py:", "events.py:", "selector_events.py:",
                             "stall_probe.py:run:")):
            start = index + 1
    return sample[start].rsplit(":", 1)[0] if start < len(sample) else "?"


def _innermost(sample: tuple[str, ...]) -> str:
    for entry in reversed(sample):
        if entry.startswith(("core/", "server/", "storage/", "protocol/", "integrations/", "security/")):
            return entry.rsplit(":", 1)[0]
    return sample[-1].rsplit(":", 1)[0] if sample else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--sample-ms", type=float, default=2.0)
    parser.add_argument("--stall-ms", type=float, default=50.0)
    parser.add_argument("--trace", action="store_true",
                        help="also time every callback the loop runs (a uvloop.Loop subclass "
                        "wrapping call_soon/call_at, and the protocols' data_received): per stall, "
                        "the callbacks of its loop iterations by name, CPU and count")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    probe = Probe(args.report, args.sample_ms / 1000, args.stall_ms / 1000)
    probe.install()
    if args.trace:
        Tracer(probe).install()
    from pagemq.cli import main as pagemq_main

    return pagemq_main(rest)


if __name__ == "__main__":
    sys.exit(main())

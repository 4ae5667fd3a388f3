"""The Spark issue's streaming figure on this machine (PySpark `local[2]`).

    .venv/bin/python benchmarks/spark_stream_bench.py [--messages 200000] [--size 1024]
        [--per-trigger 50000] [--partition-size 25000] [--profile FILE] [--json]

What it does:
1. starts `pagemq serve` (every message paged, 10 MiB pages: `spark_batch_bench.Broker`) and
   fills one anycast queue with `--messages` persistent messages of `--size` bytes;
2. endpoint: the broker's side alone, over plain HTTP from this process, for the first
   `--per-trigger` messages: `offsets` (the end of the range: a scan of record ids), `splits`
   (the range cut into partitions: another scan), `read` of the whole range as Arrow IPC
   (page reads, decode, Arrow encoding), then again with `pages=raw` (as the source reads:
   whole page spans shipped, decoded here), each with the broker's CPU per message, nothing
   committed;
3. stream: `spark.readStream.format("pagemq")` with `maxMessagesPerTrigger = --per-trigger`
   into `foreachBatch` (each micro-batch counted), until the queue is empty; msg/s is
   messages / the time from start() to the empty queue (every range read and acknowledged),
   and the steady rate: the rows of the batches after the first over their trigger times
   (the first batch also pays for starting Spark's Python workers);
   offsets-behind-latest (the broker's `stream_readers` lag) is sampled every 0.5 s, with the
   CPU of the broker, Spark's JVM and its Python workers (per message after the first
   batch: what a steady batch costs each), and Spark's per-batch durations (latestOffset:
   includes acknowledging the previous batch; addBatch: the reads) are summed.
`--warm-up N`: before step 3, the same kind of query streams N messages of another queue
(`Trigger.AvailableNow`) in the same SparkSession, so the timed query starts in a warm JVM
(classes loaded, code generated and JIT-compiled, Python workers up), as a query of a
long-running Spark application does; 0 (the default) times a query of a fresh session.
`--profile FILE`: runs the broker under `py-spy record` (when installed) during the stream and
writes its flame graph to FILE (`.svg`; any other suffix: collapsed stacks, one per line,
for `sort`/`grep`): where the broker's time goes.

Target (the issue's, for 1M messages): >= 100,000 msg/s. Keep `--messages` small on a shared
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_batch_bench import (
    _NOT_SPARK,
    HOST,
    SOURCE,
    Broker,
    add_driver_memory,
    broker_cpu,
    fill,
    spark_cpu,
    spark_session,
)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as response:
        return bytes(response.read())


def endpoint_figures(broker: Broker, base: str, per_trigger: int, partition_size: int) -> dict[str, float]:
    """Seconds each broker call takes for the first range (nothing is committed), and the
    broker's CPU per message of its reads, as Arrow (the broker decodes every page record)
    and with `pages=raw` (whole page spans shipped as they are, decoded here, in this one
    process: its rate is this reader's, the broker's CPU is the figure)."""
    import pyarrow as pa

    from pagemq.spark.range_parts import read_parts

    figures: dict[str, float] = {}
    started = time.monotonic()
    offsets = json.loads(get(f"{base}/offsets?after=0&max={per_trigger}"))
    figures["offsets_s"] = time.monotonic() - started
    started = time.monotonic()
    splits = json.loads(get(f"{base}/splits?after=0&upto={offsets['end']}&size={partition_size}"))
    figures["splits_s"] = time.monotonic() - started
    for pages, prefix in (("arrow", "read"), ("raw", "raw_read")):
        started, cpu = time.monotonic(), broker_cpu(broker)
        rows = 0
        for low, high, page in splits["splits"]:
            with urllib.request.urlopen(f"{base}/read?after={low}&upto={high}&from_page={page}&pages={pages}",
                                        timeout=600) as response:
                if pages == "raw":
                    rows += sum(batch.num_rows for batch in read_parts(response, True))
                else:
                    rows += pa.ipc.open_stream(response).read_all().num_rows
        figures[f"{prefix}_s"] = time.monotonic() - started
        figures[f"{prefix}_rows"] = rows
        figures[f"{prefix}_msg_per_s"] = round(rows / figures[f"{prefix}_s"])
        figures[f"{prefix}_broker_us_per_msg"] = round((broker_cpu(broker) - cpu) / max(1, rows) * 1e6, 2)
    return figures


class LagSampler(threading.Thread):
    """Samples the stream reader's offsets-behind-latest every half second, and the CPU
    seconds so far of the broker and of Spark (its JVM, its Python workers)."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(daemon=True)
        self.broker = broker
        self.samples: list[tuple[float, int]] = []
        self.cpu: list[tuple[float, float, float]] = []  # (broker, jvm, python) at each sample
        self.started = time.monotonic()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.sample()
        self.sample()  # the end: with two batches, the only sample after the second one

    def sample(self) -> None:
        readers = self.broker.queue(SOURCE).get("stream_readers") or []
        if readers:
            spark = spark_cpu()
            self.cpu.append((broker_cpu(self.broker), spark["jvm"], spark["python"]))
            self.samples.append((round(time.monotonic() - self.started, 1),
                                 int(readers[0]["offsets_behind_latest"])))

    def steady_cpu(self) -> dict[str, float] | None:
        """CPU µs per message of each process after the first batch was acknowledged (from
        the first sample below the whole backlog to the last one): what the steady batches
        cost, Spark's start-up aside."""
        first = next((i for i, (_t, lag) in enumerate(self.samples) if lag < self.samples[0][1]), None)
        if first is None or self.samples[first][1] == self.samples[-1][1]:
            return None
        served = self.samples[first][1] - self.samples[-1][1]
        return {name: round((self.cpu[-1][n] - self.cpu[first][n]) / served * 1e6, 2)
                for n, name in enumerate(("broker", "jvm", "python"))}


def batch_figures(progress: list[dict[str, Any]]) -> tuple[dict[str, int], list[tuple[int, int]], int | None]:
    """Spark's durations summed per phase, (rows, ms) per batch with rows, and the rate of
    the batches after the first (which also pays for starting Spark's Python workers)."""
    durations: dict[str, int] = {}
    for item in progress:
        for key, value in item.get("durationMs", {}).items():
            durations[key] = durations.get(key, 0) + int(value)
    batches = [(int(item["numInputRows"]), int(item.get("durationMs", {}).get("triggerExecution", 0)))
               for item in progress if item["numInputRows"]]
    later = batches[1:]
    seconds = sum(ms for _rows, ms in later) / 1000
    steady = round(sum(rows for rows, _ms in later) / seconds) if later and seconds else None
    return durations, batches, steady


def warm_up(spark: Any, broker: Broker, messages: int, size: int, workdir: Path) -> None:
    """Stream `messages` of another queue through the same kind of query, to its end, in
    two partitions (so both of `local[2]`'s Python workers are up, as in a running
    application)."""
    from pagemq.spark.stomp_sender import StompSender

    with StompSender(HOST, broker.stomp_port, window=1000) as sender:
        for n in range(messages):
            sender.send(f"/queue/{WARM_UP}", [("persistent", "true"), ("n", str(n))], b"x" * size)
        sender.flush()
    started = time.monotonic()
    query = (spark.readStream.format("pagemq").option("url", f"http://{HOST}:{broker.http_port}")
             .option("queue", WARM_UP).option("partitionSize", str(max(1, messages // 2))).load()
             .writeStream.foreachBatch(lambda frame, _batch: frame.count())
             .option("checkpointLocation", str(workdir)).trigger(availableNow=True).start())
    query.awaitTermination()
    print(f"warm-up: {messages} messages of another queue streamed in {time.monotonic() - started:.1f}s")


WARM_UP = "warm-up"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--per-trigger", type=int, default=50_000)
    parser.add_argument("--partition-size", type=int, default=25_000)
    parser.add_argument("--warm-up", type=int, default=0,
                        help="messages of another queue streamed first, in the same session")
    parser.add_argument("--profile", type=Path)
    add_driver_memory(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pagemq.spark import register

    workdir = Path(tempfile.mkdtemp(prefix="spark-stream-bench-"))
    broker = Broker(workdir, "10MiB")
    _NOT_SPARK.add(broker.proc.pid)  # (its CPU is counted on its own)
    profiler = None
    try:
        fill_rate = fill(broker, args.messages, args.size)
        base = f"http://{HOST}:{broker.http_port}/api/streams/{SOURCE}"
        endpoint = endpoint_figures(broker, base, args.per_trigger, args.partition_size)
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if args.profile is not None and Path(spy).exists():
            command = [spy, "record", "-p", str(broker.proc.pid), "-o", str(args.profile),
                       "--rate", "50", "--format", "flamegraph" if args.profile.suffix == ".svg" else "raw"]
            profiler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spark = spark_session(args.driver_memory)
        register(spark)
        if args.warm_up:
            warm_up(spark, broker, args.warm_up, args.size, workdir / "warm-up")
        counted: list[int] = []
        stream = (spark.readStream.format("pagemq").option("url", f"http://{HOST}:{broker.http_port}")
                  .option("queue", SOURCE).option("maxMessagesPerTrigger", str(args.per_trigger))
                  .option("partitionSize", str(args.partition_size)).load())
        sampler = LagSampler(broker)
        started = time.monotonic()
        query = (stream.writeStream.foreachBatch(lambda frame, _batch: counted.append(frame.count()))
                 .option("checkpointLocation", str(workdir / "checkpoint")).start())
        sampler.start()
        while broker.queue(SOURCE).get("messages", 1) > 0:
            if not query.isActive:
                raise RuntimeError(f"the query stopped: {query.exception()}")
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        sampler.stopped.set()
        sampler.join(10)
        progress = query.recentProgress
        query.stop()
        spark.stop()
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    durations, batches, steady = batch_figures(progress)
    figures: dict[str, Any] = {
        "messages": args.messages, "size": args.size, "per_trigger": args.per_trigger,
        "warm_up": args.warm_up, "driver_memory": args.driver_memory,
        "fill_msg_per_s": round(fill_rate), "stream_msg_per_s": round(args.messages / elapsed),
        "stream_s": round(elapsed, 2), "batches": len([c for c in counted if c]), "counted": sum(counted),
        "endpoint": {k: round(v, 3) if isinstance(v, float) else v for k, v in endpoint.items()},
        "spark_duration_ms": durations,
        "batch_ms": batches, "steady_msg_per_s": steady, "offsets_behind_latest": sampler.samples,
        "steady_cpu_us_per_msg": sampler.steady_cpu(),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        report(figures)


def report(figures: dict[str, Any]) -> None:
    endpoint = figures["endpoint"]
    print(f"{figures['messages']} paged messages of {figures['size']} B "
          f"(fill {figures['fill_msg_per_s']:,} msg/s)"
          f"{'' if figures['warm_up'] else '; a fresh SparkSession (no --warm-up)'}"
          f", driver memory {figures['driver_memory']}")
    print(f"broker alone, first {figures['per_trigger']} messages: offsets {endpoint['offsets_s']:.2f}s, "
          f"splits {endpoint['splits_s']:.2f}s, read {endpoint['read_s']:.2f}s "
          f"({endpoint['read_msg_per_s']:,} msg/s over HTTP + Arrow, broker "
          f"{endpoint['read_broker_us_per_msg']} µs CPU/msg); pages=raw: {endpoint['raw_read_s']:.2f}s "
          f"({endpoint['raw_read_msg_per_s']:,} msg/s, decoded by this one reader; broker "
          f"{endpoint['raw_read_broker_us_per_msg']} µs CPU/msg)")
    print(f"stream into foreachBatch: {figures['stream_msg_per_s']:,} msg/s ({figures['stream_s']:.1f}s, "
          f"{figures['batches']} batches, {figures['counted']} rows counted)  (target >= 100,000)")
    print(f"Spark's time per phase (ms, summed over batches): {figures['spark_duration_ms']}")
    print(f"per batch (rows, ms): {figures['batch_ms']}; "
          f"after the first: {figures['steady_msg_per_s']} msg/s")
    print(f"CPU µs per message after the first batch: {figures['steady_cpu_us_per_msg']}")
    print(f"offsets behind latest (s, messages): {figures['offsets_behind_latest']}")


if __name__ == "__main__":
    main()

"""The Spark issue's batch and sink figures on this machine (PySpark `local[2]`).

    .venv/bin/python benchmarks/spark_batch_bench.py [--messages 100000] [--size 1024]
        [--page-size 10MiB] [--rounds 3] [--sink-option KEY=VALUE ...] [--json]

What it does:
1. starts `pagemq serve` on free loopback ports with every message paged (`max-size-bytes 0`,
   `page-size-bytes` as given) and fills one anycast queue with `--messages` persistent
   messages of `--size` bytes (the sink's own STOMP sender, receipts pipelined);
2. scan: `spark.read.format("pagemq")` over the page files, materialised with Spark's `noop`
   sink (every row read, converted and dropped), `--rounds` times after one warm-up round;
   rows/s is messages / the median time; then the same with `includeHeaders=false`;
3. the same rows written once as Parquet, then `spark.read.parquet` over them, measured the
   same way: the reference a columnar file format sets on the same machine and session;
4. floor: a Python data source with as many partitions and rows, of the same schema and
   body size, yielding Arrow batches of 8,192 rows it built once per Python worker (so the
   rounds measure no building at all): what Spark's Python Data Source API costs by itself
   on this machine, with and without a `headers` map; the scan can only approach it;
5. sink: those Parquet rows' `body` column written to another queue with
   `df.write.format("pagemq")` (persistent, one connection per task, `_AMQ_DUPL_ID`
   stamped), rows/s over the whole save(), with the default transactions into a queue that
   pages every message (`--rounds` saves, each into a queue of its own: the median, and
   every rate beside it), the same into a queue of the default address settings (held in
   memory and journaled: `held.*`), the first again with `batchSends=false` (each row its
   own SEND frame in the transactions, as to another broker, instead of one batch SEND per
   transaction), and with `transactionSize=0` (one receipted SEND per row, paged); each
   queue's count is checked. `--sink-option` sets a sink option for the
   first two (e.g. `transactionSize=200` to compare with the default).

Beside each rate: CPU µs per row of Spark's JVM and of its Python workers (this process's
descendants, from /proc), and for the sink the broker's CPU µs per message, so what costs
what can be told apart on a loaded machine, where rates alone swing.

The issue's targets, printed for comparison: scan >= 500,000 rows/s, sink >= 30,000 rows/s.
Keep `--messages` small on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from pagemq.spark.schema import ARROW_SCHEMA, READ_SCHEMA
from pagemq.spark.stomp_sender import StompSender

HOST = "127.0.0.1"
PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
SOURCE, TARGET = "spark-bench-in", "spark-bench-out"
HELD = "held.spark-bench-out"  # a sink target under the default address settings (see Broker)


def _proc_stats() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, CPU seconds: its own and its reaped children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                raw = file.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        # its own CPU and that of the children it reaped (Python workers that exited)
        stats[int(entry)] = (int(fields[1]), name, sum(int(f) for f in fields[11:15]) / tick)
    return stats


_NOT_SPARK: set[int] = set()  # the broker's pid: a child of this process, not Spark's


def spark_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's descendants but the broker: Spark's JVM, its
    Python workers."""
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _name, _cpu) in stats.items():
        children.setdefault(parent, []).append(pid)
    totals = {"jvm": 0.0, "python": 0.0}
    todo = [pid for pid in children.get(os.getpid(), []) if pid not in _NOT_SPARK]
    while todo:
        pid = todo.pop()
        _parent, name, cpu = stats[pid]
        totals["jvm" if name == "java" else "python"] += cpu
        todo += children.get(pid, [])
    return totals


def broker_cpu(broker: Broker) -> float:
    return _proc_stats().get(broker.proc.pid, (0, "", 0.0))[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Broker:
    """A `pagemq serve` process on free ports, paging everything into `page_size` pages but
    the addresses `held.*`, which keep the default settings (held in memory and journaled
    up to `global-max-size`, as a sink's target with consumers draining it would be)."""

    def __init__(self, workdir: Path, page_size: str) -> None:
        self.workdir, self.data_dir = workdir, workdir / "data"
        self.stomp_port, self.http_port = free_port(), free_port()
        config = workdir / "pagemq.toml"
        config.write_text(f'[address-settings."#"]\nmax-size-bytes = 0\npage-size-bytes = "{page_size}"\n'
                          '[address-settings."held.#"]\nmax-size-bytes = -1\n')
        self.proc = subprocess.Popen(
            [PAGEMQ, "serve", "--data-dir", str(self.data_dir), "--config", str(config),
             "--stomp", f"{HOST}:{self.stomp_port}", "--http", f"{HOST}:{self.http_port}"],
            cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(workdir / "broker.log", "wb"))  # noqa: SIM115 (closed with the process)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.queue(SOURCE)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"broker not ready: {(workdir / 'broker.log').read_text()[-2000:]}")

    def queue(self, name: str) -> dict[str, Any]:
        url = f"http://{HOST}:{self.http_port}/api/queues/{name}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return {}
            raise

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def fill(broker: Broker, messages: int, size: int) -> float:
    body = b"x" * size
    started = time.monotonic()
    with StompSender(HOST, broker.stomp_port, window=1000) as sender:
        for n in range(messages):
            sender.send(f"/queue/{SOURCE}", [("persistent", "true"), ("n", str(n))], body)
        sender.flush()
    return messages / (time.monotonic() - started)


def floor_source(files: int, rows_per_file: int, size: int) -> Any:
    """A data source class yielding prebuilt batches of the pagemq schema (see step 4)."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    def build(n: int, headers: bool) -> pa.RecordBatch:
        header_type = ARROW_SCHEMA.field("headers").type
        columns = [
            pa.array([str(i) for i in range(n)], pa.string()), pa.array([SOURCE] * n, pa.string()),
            pa.array([SOURCE] * n, pa.string()), pa.array(range(n), pa.int64()),
            pa.array(range(n), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array([4] * n, pa.int32()), pa.array([True] * n, pa.bool_()),
            pa.MapArray.from_arrays(pa.array(range(0, 2 * n + 1, 2), pa.int32()),
                                    pa.array(["persistent", "n"] * n), pa.array(["true", "12345"] * n)
                                    ).cast(header_type) if headers else pa.nulls(n, header_type),
            pa.array([b"x" * size] * n, pa.binary()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)

    class FloorReader(DataSourceReader):
        def __init__(self, headers: bool) -> None:
            self.headers = headers

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(n) for n in range(files)]

        def read(self, partition: InputPartition) -> Any:
            # built once per Python worker (kept in sys, which outlives the unpickled task)
            cache = sys.__dict__.setdefault("_pagemq_bench_floor", {})
            key = (min(rows_per_file, 8192), self.headers)
            if key not in cache:
                cache[key] = build(*key)
            batch, left = cache[key], rows_per_file
            while left > 0:
                yield batch if left >= batch.num_rows else batch.slice(0, left)
                left -= batch.num_rows

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pagemq-bench-floor"

        def schema(self) -> str:
            return READ_SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader(self.options.get("headers", "true") == "true")

    return FloorSource


def timed(action: Any, rounds: int, rows: int) -> tuple[float, dict[str, float]]:
    """Median seconds of `rounds` runs after a warm-up, and Spark's CPU µs per row over them."""
    action()  # warm-up: Python workers started, modules imported
    times = []
    before = spark_cpu()
    for _ in range(rounds):
        started = time.monotonic()
        action()
        times.append(time.monotonic() - started)
    after = spark_cpu()
    per_row = {k: round((after[k] - before[k]) * 1e6 / (rounds * rows), 2) for k in after}
    return statistics.median(times), per_row


def sink(broker: Broker, frame: Any, target: str, rows: int, **options: str
         ) -> tuple[float, dict[str, float]]:
    """rows/s of one save() into `target`, and CPU µs per row (Spark's, the broker's)."""
    before, broker_before, started = spark_cpu(), broker_cpu(broker), time.monotonic()
    writer = frame.write.format("pagemq").option("url", f"stomp://{HOST}:{broker.stomp_port}")
    writer.option("address", target).options(**options).mode("append").save()
    elapsed = time.monotonic() - started
    after, broker_after = spark_cpu(), broker_cpu(broker)
    stored = broker.queue(target).get("messages")
    if stored != rows:
        raise RuntimeError(f"sink stored {stored} of {rows} rows in {target}")
    cpu = {k: round((after[k] - before[k]) * 1e6 / rows, 2) for k in after}
    cpu["broker"] = round((broker_after - broker_before) * 1e6 / rows, 2)
    return rows / elapsed, cpu


def sinks(broker: Broker, bodies: Any, n: int, options: dict[str, str], rounds: int
          ) -> tuple[dict[str, tuple[float, dict[str, float]]], list[float]]:
    """The sink's lines: paged (the issue's figure: the median of `rounds` saves, each into
    a queue of its own; the rates of all of them too), held, paged with a SEND frame per row,
    one by one."""
    runs = sorted((sink(broker, bodies, f"{TARGET}-{r}", n, **options) for r in range(max(rounds, 1))),
                  key=lambda run: run[0])
    return {
        "sink": runs[len(runs) // 2],
        "sink_held": sink(broker, bodies, HELD, n, **options),
        "sink_frames": sink(broker, bodies, TARGET + "-frames", n, **{**options, "batchSends": "false"}),
        "sink_one_by_one": sink(broker, bodies, TARGET + "-1by1", n, transactionSize="0"),
    }, [rate for rate, _cpu in runs]


def add_driver_memory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--driver-memory", default="4g",
                        help="the JVM heap of Spark's driver, which in local mode runs the tasks too "
                             "(spark.driver.memory; Spark's default is 1g, under which a micro-batch of "
                             "500,000 rows of 1 KiB spends much of its time collecting garbage)")


def spark_session(driver_memory: str, jvm_reader: bool = True) -> Any:
    """The benchmarks' SparkSession: `local[2]`, no UI, a driver heap of `driver_memory`,
    pagemq's JVM reader of page files on the class path when built (`make jar`) and asked for."""
    from pyspark.sql import SparkSession

    from pagemq.spark import JAR

    jars = JAR if jvm_reader and os.path.exists(JAR) else ""
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", driver_memory)
             .config("spark.sql.shuffle.partitions", "2").config("spark.jars", jars).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--page-size", default="10MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a sink option for the transactional sink runs")
    add_driver_memory(parser)
    parser.add_argument("--python-reader", action="store_true",
                        help="leave pagemq's JVM reader off Spark's class path: page files read in Python")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sink_options = dict(option.split("=", 1) for option in args.sink_option)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pagemq.spark import jvm_reader_loaded, register

    workdir = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    broker = Broker(workdir, args.page_size)
    _NOT_SPARK.add(broker.proc.pid)
    n = args.messages
    try:
        fill_rate = fill(broker, n, args.size)
        spark = spark_session(args.driver_memory, jvm_reader=not args.python_reader)
        register(spark)
        reader = "jvm" if jvm_reader_loaded(spark) else "python"
        pages = (spark.read.format("pagemq").option("path", str(broker.data_dir))
                 .option("address", SOURCE).load())
        files = pages.rdd.getNumPartitions()

        def noop(frame: Any) -> Any:
            return lambda: frame.write.format("noop").mode("overwrite").save()

        results: dict[str, tuple[float, dict[str, float]]] = {}
        scan, cpu = timed(noop(pages), args.rounds, n)
        results["scan"] = (n / scan, cpu)
        bare = pages.sparkSession.read.format("pagemq").option("path", str(broker.data_dir)).option(
            "address", SOURCE).option("includeHeaders", "false").load()
        scan, cpu = timed(noop(bare), args.rounds, n)
        results["scan_no_headers"] = (n / scan, cpu)
        scan, cpu = timed(noop(pages.select("seq", "body")), args.rounds, n)
        results["scan_seq_body"] = (n / scan, cpu)

        parquet_dir = workdir / "parquet"
        pages.write.parquet(str(parquet_dir))
        parquet = spark.read.parquet(str(parquet_dir))
        took, cpu = timed(noop(parquet), args.rounds, n)
        results["parquet"] = (n / took, cpu)

        spark.dataSource.register(floor_source(files, -(-n // files), args.size))
        for headers in ("true", "false"):
            floor = spark.read.format("pagemq-bench-floor").option("headers", headers).load()
            took, cpu = timed(noop(floor), args.rounds, n)
            results["floor" if headers == "true" else "floor_no_headers"] = (n / took, cpu)

        bodies = parquet.select("body").repartition(2).cache()
        bodies.count()
        sink(broker, bodies.limit(2000), TARGET + "-warm-up", 2000)  # the write path's JIT, workers
        lines, sink_runs = sinks(broker, bodies, n, sink_options, args.rounds)
        results.update(lines)
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    figures: dict[str, Any] = {"messages": n, "size": args.size, "page_files": files, "reader": reader,
                               "fill_msg_per_s": round(fill_rate), "load_average": os.getloadavg()[0],
                               "sink_runs_rows_per_s": [round(rate) for rate in sink_runs]}
    for name, (rate, cpu) in results.items():
        figures[f"{name}_rows_per_s"] = round(rate)
        figures[f"{name}_cpu_us_per_row"] = cpu
    if args.json:
        print(json.dumps(figures))
        return
    report(figures, results, sink_runs, args.driver_memory)


def report(figures: dict[str, Any], results: dict[str, tuple[float, dict[str, float]]],
           sink_runs: list[float], driver_memory: str) -> None:
    """The figures as lines, each with its target and the CPU it took per row."""
    n, size, files = figures["messages"], figures["size"], figures["page_files"]
    fill_rate = figures["fill_msg_per_s"]
    labels = {
        "scan": "scan  spark.read.format('pagemq')       (target >= 500,000)",
        "scan_no_headers": "      the same, includeHeaders=false",
        "scan_seq_body": "      select('seq', 'body') (the JVM reader prunes)",
        "parquet": "      spark.read.parquet (same rows)",
        "floor": "      Python data source floor (prebuilt)",
        "floor_no_headers": "      the floor, headers column null",
        "sink": "sink  df.write.format('pagemq')        (target >= 30,000)",
        "sink_held": "      the same, target held in memory (default settings)",
        "sink_frames": "      the first, batchSends=false (a SEND frame per row)",
        "sink_one_by_one": "      the same, transactionSize=0",
    }
    print(f"{n} messages of {size} B in {files} page files (fill {fill_rate:,.0f} msg/s), "
          f"load average {figures['load_average']:.1f}, driver memory {driver_memory}, "
          f"page files read by the {figures['reader']} reader")
    for name, label in labels.items():
        rate, cpu = results[name]
        spent = ", ".join(f"{who} {us:.1f}" for who, us in cpu.items())
        runs = (f"   (median of {len(sink_runs)}: " + ", ".join(f"{r:,.0f}" for r in sink_runs) + ")"
                if name == "sink" and len(sink_runs) > 1 else "")
        print(f"{label}: {rate:>10,.0f} rows/s   CPU us/row: {spent}{runs}")


if __name__ == "__main__":
    main()

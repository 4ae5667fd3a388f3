"""The ceiling of Spark's Python Data Source streaming path on this machine: what the pagemq
streaming source can at best approach (PySpark `local[2]`).

    .venv/bin/python benchmarks/spark_stream_ceiling.py [--messages 1000000] [--size 1024]
        [--per-trigger 100000] [--partitions 2] [--rows-per-batch 8192]
        [--conf KEY=VALUE ...] [--json]

A trivial streaming reader (no broker, no I/O): offsets are row counts, each partition
yields Arrow record batches of the read schema (`ARROW_SCHEMA`, 1 KiB binary bodies, the
other columns filled as a broker would) that it built once, `--rows-per-batch` rows each;
the query counts each micro-batch in `foreachBatch`, as `spark_stream_bench.py` does.
msg/s: messages / the time from start() until every row was counted; also the rate of the
batches after the first (the first pays for starting Spark's Python workers).

`--conf` sets Spark settings (e.g. `spark.sql.execution.arrow.maxRecordsPerBatch=50000`,
`spark.python.worker.reuse=false`): benchmarks/README.md has what moved the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from pagemq.spark.schema import ARROW_SCHEMA, READ_SCHEMA


def prebuilt(rows: int, size: int, headers: bool) -> pa.RecordBatch:
    """One record batch of `rows` rows of the read schema, bodies of `size` bytes."""
    body = b"x" * size
    header_type = ARROW_SCHEMA.field("headers").type
    if headers:
        offsets = pa.array(range(0, 2 * rows + 1, 2), pa.int32())
        keys = pa.array(["content-type", "app"] * rows, pa.string())
        values = pa.array(["text/plain", "bench"] * rows, pa.string())
        header_column = pa.MapArray.from_arrays(offsets, keys, values).cast(header_type)
    else:
        header_column = pa.nulls(rows, header_type)
    columns = [
        pa.array([str(n) for n in range(rows)], pa.string()),
        pa.array(["orders"] * rows, pa.string()),
        pa.array(["orders"] * rows, pa.string()),
        pa.array(range(rows), pa.int64()),
        pa.array([1_700_000_000_000_000] * rows, pa.timestamp("us", tz="UTC")),
        pa.array([4] * rows, pa.int32()),
        pa.array([True] * rows, pa.bool_()),
        header_column,
        pa.array([body] * rows, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def make_source(total: int, per_trigger: int, size: int, partitions: int, rows_per_batch: int,
                headers: bool) -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Slice(InputPartition):
        def __init__(self, low: int, high: int) -> None:
            super().__init__((low, high))
            self.low, self.high = low, high

    class Reader(DataSourceStreamReader):
        def __init__(self) -> None:
            self._batch: pa.RecordBatch | None = None

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            from pyspark.sql.streaming.datasource import ReadMaxRows

            most = limit.max_rows if isinstance(limit, ReadMaxRows) else total
            return {"n": min(total, start["n"] + most)}

        def getDefaultReadLimit(self) -> Any:
            from pyspark.sql.streaming.datasource import ReadMaxRows

            return ReadMaxRows(per_trigger)

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
            low, high = start["n"], end["n"]
            step = max(1, -(-(high - low) // partitions))
            return [Slice(at, min(high, at + step)) for at in range(low, high, step)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            assert isinstance(partition, Slice)
            if self._batch is None:
                self._batch = prebuilt(rows_per_batch, size, headers)
            left = partition.high - partition.low
            while left > 0:
                take = min(left, rows_per_batch)
                yield self._batch if take == rows_per_batch else self._batch.slice(0, take)
                left -= take

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pagemq_ceiling"

        def schema(self) -> str:
            return READ_SCHEMA

        def simpleStreamReader(self, schema: Any) -> Any:
            raise NotImplementedError

        def streamReader(self, schema: Any) -> Reader:
            return Reader()

    return Ceiling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--per-trigger", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows-per-batch", type=int, default=8192)
    parser.add_argument("--no-headers", action="store_true")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import tempfile

    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2"))
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(make_source(args.messages, args.per_trigger, args.size, args.partitions,
                                          args.rows_per_batch, not args.no_headers))
    counted: list[int] = []
    stream = spark.readStream.format("pagemq_ceiling").load()
    checkpoint = tempfile.mkdtemp(prefix="spark-ceiling-")
    started = time.monotonic()
    query = (stream.writeStream.foreachBatch(lambda frame, _batch: counted.append(frame.count()))
             .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
    while sum(counted) < args.messages:
        if not query.isActive:
            raise RuntimeError(f"the query stopped: {query.exception()}")
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    progress = query.recentProgress
    query.stop()
    spark.stop()
    batches = [(int(p["numInputRows"]), int(p["durationMs"].get("triggerExecution", 0)))
               for p in progress if p["numInputRows"]]
    later = batches[1:]
    seconds = sum(ms for _r, ms in later) / 1000
    figures = {"messages": args.messages, "per_trigger": args.per_trigger, "partitions": args.partitions,
               "rows_per_batch": args.rows_per_batch, "conf": args.conf,
               "msg_per_s": round(args.messages / elapsed), "seconds": round(elapsed, 2),
               "steady_msg_per_s": round(sum(r for r, _ in later) / seconds) if later and seconds else None,
               "batch_ms": batches}
    print(json.dumps(figures) if args.json else figures)


if __name__ == "__main__":
    main()

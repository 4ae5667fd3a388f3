"""An order pipeline on an embedded pagemq broker and Spark Structured Streaming, one command:

    python examples/orders_pipeline.py [--orders 3000] [--workdir DIR]

1. starts a pagemq broker inside this process (`BrokerServer` on its own event-loop thread,
   free loopback ports, a data directory under the work directory);
2. starts a streaming query reading the durable subscription `example.per-minute` of the
   multicast address `orders` (made by the query as it starts), which aggregates the orders
   per minute of their event time (count and revenue) and, per micro-batch
   (`foreachBatch`), appends the updated minutes to Parquet and sends them as JSON
   messages to the anycast address `orders-per-minute` with the pagemq sink;
3. sends the orders over STOMP to `/topic/orders` (JSON bodies, event times spread over a
   few minutes), waits until the subscription is drained and the last batch is written,
   then prints the per-minute table (from Parquet) and what reached `orders-per-minute`.

Needs `pip install 'pagemq[spark]'` and Java 17. examples/README.md says more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pagemq.server.app import BrokerServer
from pagemq.server.config import load_config
from pagemq.spark.stomp_sender import StompSender

HOST = "127.0.0.1"
SUBSCRIPTION_QUEUE = "example.per-minute"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class EmbeddedBroker:
    """A broker on an event loop of its own, in a thread of this process."""

    def __init__(self, data_dir: Path) -> None:
        self.stomp_port, self.http_port = free_port(), free_port()
        config = load_config(None, data_dir=str(data_dir), stomp=f"{HOST}:{self.stomp_port}",
                             http=f"{HOST}:{self.http_port}")
        self.server = BrokerServer(config)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self.server.start())
            except BaseException as exc:  # reported to the starting thread
                failed.append(exc)
                return
            finally:
                started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="pagemq-embedded", daemon=True)
        self.thread.start()
        started.wait()
        if failed:
            raise failed[0]

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    def queue(self, name: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"{self.http_url}/api/queues/{name}", timeout=10) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError:
            return {}

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)


def send_orders(broker: EmbeddedBroker, count: int) -> None:
    """`count` orders over STOMP, ten per second of event time, starting at a whole minute."""
    rng = random.Random(15)
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    with StompSender(HOST, broker.stomp_port) as sender:
        for n in range(count):
            order = {"order_id": n, "customer": f"c{rng.randrange(100)}",
                     "amount": round(rng.uniform(5, 200), 2),
                     "ts": (start + timedelta(seconds=n / 10)).isoformat()}
            sender.send("/topic/orders", [("persistent", "true"), ("content-type", "application/json")],
                        json.dumps(order).encode())
        sender.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pagemq-orders-"))
    workdir.mkdir(parents=True, exist_ok=True)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from pagemq.spark import JAR, register

    broker = EmbeddedBroker(workdir / "data")
    print(f"broker: stomp://{HOST}:{broker.stomp_port}, {broker.http_url}; work directory {workdir}")
    spark = (SparkSession.builder.master("local[2]").appName("pagemq-orders")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             # pagemq's JVM reader of page files, when built (`make jar`): faster batch reads
             .config("spark.jars", JAR if os.path.exists(JAR) else "")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        orders = (spark.readStream.format("pagemq").option("url", broker.http_url)
                  .option("address", "orders").option("clientId", "example")
                  .option("subscription", "per-minute")
                  .option("includeHeaders", "false").load())
        order = F.from_json(F.col("body").cast("string"),
                            "order_id long, customer string, amount double, ts timestamp").alias("o")
        per_minute = (orders.select(order).select("o.*").withWatermark("ts", "1 minute")
                      .groupBy(F.window("ts", "1 minute").alias("window"))
                      .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("revenue")))
        parquet_dir = workdir / "per_minute.parquet"
        stomp_url = f"stomp://{HOST}:{broker.stomp_port}"

        def publish(batch: Any, batch_id: int) -> None:
            rows = (batch.select(F.col("window.start").alias("minute"), "orders", "revenue")
                    .withColumn("batch_id", F.lit(batch_id)))
            rows.write.mode("append").parquet(str(parquet_dir))
            # a re-run batch stamps the same _AMQ_DUPL_ID (jobId + partition + row)
            (rows.select(F.to_json(F.struct("minute", "orders", "revenue")).alias("body"))
             .write.format("pagemq").option("url", stomp_url).option("address", "orders-per-minute")
             .option("jobId", f"orders-per-minute-{batch_id}").mode("append").save())

        query = (per_minute.writeStream.outputMode("update").foreachBatch(publish)
                 .option("checkpointLocation", str(workdir / "checkpoint"))
                 .trigger(processingTime="1 second").start())
        deadline = time.monotonic() + 120
        while not broker.queue(SUBSCRIPTION_QUEUE):  # the query makes its subscription as it starts
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"the query did not start: {query.exception()}")
            time.sleep(0.2)
        send_orders(broker, args.orders)
        print(f"sent {args.orders} orders to /topic/orders")
        # Empty means every order was read *and* its batch finished: a batch is acknowledged
        # only once Spark has committed it (docs/spark.md, "Guarantees").
        while broker.queue(SUBSCRIPTION_QUEUE).get("messages", 1) > 0:
            if time.monotonic() > deadline + 300 or query.exception() is not None:
                raise RuntimeError(f"the query did not finish: {query.exception()}")
            time.sleep(0.5)
        query.stop()

        latest = (spark.read.parquet(str(parquet_dir))
                  .withColumn("last", F.max("batch_id").over(Window.partitionBy("minute")))
                  .where("batch_id = last").drop("last", "batch_id").orderBy("minute"))
        print("orders per minute (Parquet, latest update of each minute):")
        latest.show(truncate=False)
        total = latest.agg(F.sum("orders")).first()[0]
        print(f"orders counted: {total} of {args.orders}")
        results = broker.queue("orders-per-minute")
        print(f"updates sent to the address orders-per-minute: {results.get('messages', 0)} messages")
    finally:
        spark.stop()
        broker.stop()


if __name__ == "__main__":
    main()

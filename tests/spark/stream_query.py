"""A streaming query in a process of its own, for the tests that kill the driver:

    python stream_query.py URL QUEUE OUT CHECKPOINT [MAX_PER_TRIGGER]

Streams QUEUE (pagemq source) into Parquet files under OUT with the checkpoint CHECKPOINT,
prints `batch N` to stdout as each micro-batch completes, and runs until killed.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    url, queue, out, checkpoint = sys.argv[1:5]
    per_trigger = sys.argv[5] if len(sys.argv) > 5 else "1000"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pagemq.spark import register

    spark = (SparkSession.builder.master("local[2,2]").appName("pagemq-stream-query")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    frame = (spark.readStream.format("pagemq").option("url", url).option("queue", queue)
             .option("maxMessagesPerTrigger", per_trigger).option("partitionSize", "400").load())
    query = (frame.select("message_id", "seq", "body").writeStream.format("parquet")
             .option("path", out).option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    seen = -1
    while True:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != seen:
            seen = progress["batchId"]
            print(f"batch {seen} rows {progress['numInputRows']}", flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    main()

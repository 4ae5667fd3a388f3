"""pagemq's JVM reader of page files (jvm/, docs/spark.md "The JVM reader") against the
Python reader it stands in for: the same rows, byte for byte, from the same files.

The session of conftest.py has the jar on `spark.jars` when `make jar` could build it (a
JDK's javac); without it these tests skip, naming why, and every other Spark test runs the
Python reader. Damage, torn tails, format-1 pages and selectors are handed to the Python
reader: the damage tests of test_spark_batch_read.py run through that hand-over.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from brokerproc import BrokerProcess, unique
from test_paging_helpers import body, durable, numbered, send_all

from pagemq.spark import JAR, jvm_reader_loaded
from pagemq.spark.bounds import Bounds
from pagemq.spark.page_scan import ScanOptions, plan_scan, read_file

BROKER_CONFIG = {
    "address-settings": {"#": {"page-size-bytes": "64KiB", "max-size-bytes": 0}},
}
SIZE = 300

pytestmark = pytest.mark.skipif(not os.path.exists(JAR), reason=f"no {JAR}: `make jar` needs a JDK's javac")

COLUMNS = ("message_id", "address", "queue", "seq", "ts", "priority", "persistent", "headers", "body")


def spark_rows(spark: Any, proc: BrokerProcess, address: str, **options: str) -> list[tuple[Any, ...]]:
    df = (spark.read.format("pagemq").option("path", str(proc.data_dir)).option("address", address)
          .options(**options).load())
    df = df.selectExpr("message_id", "address", "queue", "seq", "unix_micros(timestamp) AS ts", "priority",
                       "persistent", "headers", "body")
    return [(*row[:7], None if row.headers is None else sorted(row.headers.items()), bytes(row.body))
            for row in df.collect()]


def python_rows(proc: BrokerProcess, address: str, **options: str) -> list[tuple[Any, ...]]:
    scan = ScanOptions.parse({"path": str(proc.data_dir), "address": address, **options})
    rows: list[tuple[Any, ...]] = []
    for task in plan_scan(scan, Bounds()).tasks:
        for batch in read_file(task):
            columns = batch.to_pydict()
            for i in range(batch.num_rows):
                headers = columns["headers"][i]
                ts = columns["timestamp"][i]
                rows.append((columns["message_id"][i], columns["address"][i], columns["queue"][i],
                             columns["seq"][i], None if ts is None else _micros(ts), columns["priority"][i],
                             columns["persistent"][i], None if headers is None else sorted(headers),
                             columns["body"][i]))
    return rows


def _micros(ts: Any) -> int:
    import datetime

    return (ts - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(microseconds=1)


def plan_of(spark: Any, proc: BrokerProcess, address: str, **options: str) -> str:
    df = (spark.read.format("pagemq").option("path", str(proc.data_dir)).option("address", address)
          .options(**options).load())
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_page_files_are_read_in_the_jvm_when_pagemqs_jar_is_on_the_class_path(spark, broker, stomp_client):
    address = unique("jvm-plain")
    send_all(stomp_client(broker), f"/queue/{address}", numbered("m", 50), size=SIZE)
    assert jvm_reader_loaded(spark)
    assert "JVM reader" in plan_of(spark, broker, address)
    # a selector is evaluated by the Python reader
    assert "JVM reader" not in plan_of(spark, broker, address, selector="color = 'red'")


def test_the_jvm_reader_returns_the_rows_the_python_reader_does(spark, broker, stomp_client):
    """Every kind of record: MESSAGE frames routed to one queue and to two (durable topic
    subscriptions, one of them added halfway), BATCH frames (a COMMIT paging to one address),
    TX_BATCH frames (a COMMIT paging to two), non-persistent messages, headers in UTF-8
    beyond ASCII, empty bodies, many page files."""
    topic, other = unique("jvm-topic"), unique("jvm-other")
    durable(stomp_client, broker, f"c1-{topic}", topic, "first").drop()
    client = stomp_client(broker)
    send_all(client, f"/topic/{topic}", numbered("one-queue", 300), size=SIZE,
             headers={"city": "Zürich", "note": "→ ✓ 日本"})
    durable(stomp_client, broker, f"c2-{topic}", topic, "second").drop()
    send_all(client, f"/topic/{topic}", numbered("two-queues", 300), size=SIZE, persistent=False)
    client.begin("b1")
    for name in numbered("batch", 40):
        client.conn.send(f"/topic/{topic}", body(name, SIZE), headers={"transaction": "b1", "priority": 7})
    client.commit("b1")
    client.begin("t2")
    for name in numbered("tx", 40):
        client.conn.send(f"/topic/{topic}", body(name, SIZE), headers={"transaction": "t2"})
        client.conn.send(f"/queue/{other}", body(name, SIZE), headers={"transaction": "t2"})
    client.commit("t2")
    client.conn.send(f"/topic/{topic}", "", headers={"persistent": "true"})
    send_all(client, f"/topic/{topic}", ["last"], size=SIZE)  # its receipt: the empty one is paged too

    expected = python_rows(broker, topic)
    assert len(expected) == 300 + 300 + 40 + 40 + 2 and expected[-2][-1] == b""
    got = spark_rows(spark, broker, topic)
    assert got == expected
    assert {row[2] for row in got} == {expected[0][2], expected[-1][2]} and "," in expected[-1][2]
    assert spark_rows(spark, broker, topic, includeHeaders="false") == python_rows(
        broker, topic, includeHeaders="false")
    assert spark_rows(spark, broker, other) == python_rows(broker, other)


def test_operators_that_hold_the_jvm_readers_rows_keep_each_one(spark, broker, stomp_client):
    """The JVM reader reuses one row buffer, as Spark's own readers do: every operator that
    holds rows (a sort, a cache, a window, a join's build side) must see each row as read."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    address = unique("jvm-held")
    labels = send_all(stomp_client(broker), f"/queue/{address}", numbered("h", 3000), size=SIZE)
    df = (spark.read.format("pagemq").option("path", str(broker.data_dir)).option("address", address).load()
          .withColumn("label", F.split(F.col("body").cast("string"), r"\|").getItem(0)))
    assert [row.label for row in df.orderBy(F.desc("seq")).collect()] == labels[::-1]
    cached = df.cache()
    assert cached.count() == len(labels)
    assert [row.label for row in cached.orderBy("seq").collect()] == labels
    cached.unpersist()
    ranked = df.withColumn("n", F.row_number().over(Window.orderBy("seq"))).filter("n % 1000 = 1")
    assert [row.label for row in ranked.orderBy("seq").collect()] == labels[::1000]
    joined = df.select("seq", "label").join(df.select("seq", F.col("message_id").alias("id")), "seq")
    assert sorted(row.label for row in joined.collect()) == sorted(labels)
    assert joined.select("id").distinct().count() == len(labels)


def test_a_query_reading_some_columns_gets_them_from_the_jvm_reader_and_from_a_damaged_files_python_reader(
        spark, broker, stomp_client, tmp_path):
    """The JVM reader writes only the columns a query reads (a Python source cannot prune);
    a file handed to the Python reader (here: damaged, failOnDataLoss=false) is cut to the
    same columns. Rows are the same as the full read's, projected."""
    import shutil

    from pagemq.storage.paging.page_format import FILE_HEADER, FRAME_HEADER

    address = unique("jvm-pruned")
    client = stomp_client(broker)
    send_all(client, f"/queue/{address}", numbered("p", 600), size=SIZE, headers={"k": "v"})
    send_all(client, f"/queue/{address}", numbered("q", 5), size=SIZE, persistent=False)
    # a non-persistent paged send's RECEIPT may come before its page write: a persistent one
    # after them is fsynced with (so after) them
    send_all(client, f"/queue/{address}", ["last"], size=SIZE)
    copy = tmp_path / "data"
    shutil.copytree(broker.data_dir, copy, ignore=shutil.ignore_patterns("server.lock"))
    page = sorted(next(p.parent for p in (copy / "paging").glob("*/address.txt")
                       if p.read_text() == address).glob("*.page"))[0]
    data = bytearray(page.read_bytes())
    data[FILE_HEADER.size + FRAME_HEADER.size + 40] ^= 0xFF  # the first record: damaged
    page.write_bytes(bytes(data))

    def read(**options: str) -> Any:
        return (spark.read.format("pagemq").option("path", str(copy)).option("address", address)
                .option("failOnDataLoss", "false").options(**options).load())

    full = read().collect()
    assert len(full) == 605
    for columns in (["seq", "body"], ["headers", "message_id"], ["queue", "persistent", "priority"],
                    ["timestamp"], ["body", "address", "seq"]):
        pruned = read().select(*columns)
        assert sorted(scanned(pruned)) == sorted(columns)  # pruned: the scan returns only these
        assert [tuple(row) for row in pruned.collect()] == [tuple(row[c] for c in columns) for row in full]
    assert read().count() == 605
    assert read().filter("persistent = false").count() == 5
    assert [row.seq for row in read(includeHeaders="false").select("seq", "headers").collect()] == [
        row.seq for row in full]


def scanned(df: Any) -> list[str]:
    """The columns the query's scan returns, from its plan."""
    import re

    plan = str(df._jdf.queryExecution().executedPlan().toString())
    found = re.search(r"BatchScan \S+\[([^\]]*)\]", plan)
    assert found is not None, plan
    return [name.split("#")[0] for name in found.group(1).split(", ")]


_UNREGISTERED = """
import os, sys
from pyspark.sql import SparkSession
from pagemq.spark import JAR
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.jars", JAR).getOrCreate())
spark.sparkContext.setLogLevel("OFF")
calls = {
    "read": lambda: spark.read.format("pagemq").option("path", sys.argv[1]).option("address", "a").load(),
    "readStream": lambda: spark.readStream.format("pagemq").option("url", "http://127.0.0.1:1")
                          .option("queue", "a").load(),
    "write": lambda: spark.range(1).selectExpr("CAST(CAST(id AS string) AS binary) AS body").write
                     .format("pagemq").option("url", "stomp://127.0.0.1:1").option("address", "a")
                     .mode("append").save(),
}
for name, call in calls.items():
    try:
        call()
        print(name, "no error")
    except Exception as exc:
        print(name, " ".join(str(exc).splitlines()[:2])[:400])
"""


def test_a_session_with_the_jar_that_never_called_register_is_told_to(tmp_path):
    """The jar's provider delegates to a Python source only `register` makes: without it,
    each of read, readStream and write fails saying to call it, not naming an internal source."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _UNREGISTERED, str(tmp_path)], capture_output=True,
                          text=True, timeout=180, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0] in (
        "read", "readStream", "write"))
    assert set(lines) == {"read", "readStream", "write"}, done.stdout + done.stderr[-3000:]
    for name, error in lines.items():
        assert "call pagemq.spark.register(spark)" in error, (name, error)

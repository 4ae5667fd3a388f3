"""`df.write.format("pagemq")` and `writeStream`: rows sent to a real broker over STOMP,
then consumed over STOMP and compared."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, StompClient, free_port, unique

BROKER_CONFIG = {
    "address-settings": {
        # BLOCK stops reading a producer's socket once 8 KiB are held: receipts stop coming
        "blocked.#": {"max-size-bytes": "8KiB", "address-full-policy": "BLOCK"},
    },
}
DUPL_ID = re.compile(r"^spark:(?P<job>[^:]+):(?P<batch>\d+):(?P<partition>\d+):(?P<row>\d+)$")


def url(proc: BrokerProcess) -> str:
    return f"stomp://127.0.0.1:{proc.stomp_port}"


def drain(client: StompClient, destination: str, count: int, *, settle: float = 0.5) -> list[Any]:
    """Subscribe (auto ack) and take `count` messages; check no more come."""
    client.subscribe(destination, headers={"activemq.prefetchSize": 100_000})
    frames = client.wait_for(count, timeout=30)
    client.listener.assert_no_more(count, within=settle)
    return frames


def ids_by_partition(frames: list[Any]) -> dict[int, list[int]]:
    rows: dict[int, list[int]] = defaultdict(list)
    for frame in frames:
        match = DUPL_ID.match(frame.headers["_AMQ_DUPL_ID"])
        assert match, frame.headers
        rows[int(match["partition"])].append(int(match["row"]))
    return rows


# "true": a transaction's rows go as one batch SEND (pagemq's extension, the default);
# "false": as one SEND frame each, as to any STOMP broker.
@pytest.mark.parametrize("batch_sends", ["true", "false"])
def test_rows_become_persistent_messages_with_their_headers_and_one_duplicate_id_each(
        spark, broker, stomp_client, batch_sends):
    address = unique("results")
    df = spark.createDataFrame([(f"row-{n}", {"n": str(n), "kind": "te:st\\"}) for n in range(2000)],
                               "body string, headers map<string,string>").repartition(2)
    (df.write.format("pagemq").option("url", url(broker)).option("address", address)
     .option("batchSends", batch_sends).mode("append").save())

    frames = drain(stomp_client(broker), f"/queue/{address}", 2000)
    assert sorted(frame.body for frame in frames) == sorted(f"row-{n}" for n in range(2000))
    for frame in frames:
        assert frame.headers["n"] == frame.body.removeprefix("row-") and frame.headers["kind"] == "te:st\\"
        assert frame.headers["persistent"] == "true"
    assert len({frame.headers["_AMQ_DUPL_ID"] for frame in frames}) == 2000
    assert len({DUPL_ID.match(frame.headers["_AMQ_DUPL_ID"])["job"] for frame in frames}) == 1
    rows = ids_by_partition(frames)
    assert set(rows) == {0, 1}
    assert all(sorted(numbers) == list(range(len(numbers))) for numbers in rows.values())


def test_binary_bodies_to_any_destination_and_non_persistent_on_request(spark, broker, stomp_client):
    topic = f"/topic/{unique('news')}"
    client = stomp_client(broker, auto_decode=False)
    client.subscribe(topic)
    bodies = [bytes([n % 256]) * (n % 7) + b"\x00end" for n in range(50)]
    df = spark.createDataFrame([(body,) for body in bodies], "body binary")
    (df.write.format("pagemq").option("url", url(broker)).option("destination", topic)
     .option("persistent", "false").mode("append").save())

    frames = client.wait_for(50, timeout=30)
    assert sorted(frame.body for frame in frames) == sorted(bodies)
    assert all("persistent" not in frame.headers for frame in frames)


@pytest.mark.parametrize("batch_sends", ["true", "false"])
def test_a_task_failing_midway_is_retried_and_stores_every_row_once(spark, broker, stomp_client, batch_sends):
    """Partition 0's first attempt dies after its writer sent some rows; the retry (the
    session allows one) sends every row again, each with the id it had the first time, and
    the broker's duplicate detection drops the rows the failed attempt had stored."""
    address = unique("retried")

    def fail_once(numbers: Any) -> Any:
        from pyspark import TaskContext

        context = TaskContext.get()
        for n, number in enumerate(numbers):
            if context.partitionId() == 0 and context.attemptNumber() == 0 and n == 150:
                time.sleep(1.5)  # the writer sends (and is receipted) what reached it so far
                raise RuntimeError("task killed midway (test)")
            yield (f"{number}|{'x' * 1000}",)  # 1 KiB rows: the worker's 64 KiB buffer flushes

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        rows = spark.sparkContext.parallelize(range(400), 2).mapPartitions(fail_once)
        df = spark.createDataFrame(rows, "body string")
        (df.write.format("pagemq").option("url", url(broker)).option("address", address)
         .option("batchSends", batch_sends).mode("append").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    client = stomp_client(broker)
    client.subscribe(f"/queue/{address}", headers={"activemq.prefetchSize": 100_000})
    client.wait_for(400, timeout=30)
    time.sleep(0.5)
    frames = list(client.messages)
    ids: dict[str, set[str]] = defaultdict(set)
    for frame in frames:
        ids[frame.body.split("|")[0]].add(frame.headers["_AMQ_DUPL_ID"])
    assert sorted(ids, key=int) == [str(n) for n in range(400)]
    assert all(len(stamped) == 1 for stamped in ids.values()), "a retried row got another id"
    assert len(frames) == 400, "a row the failed attempt stored was stored again by the retry"


def test_an_error_frame_fails_the_write_loudly(spark, broker):
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="broker ERROR"):  # a SEND to a queue of an address
        (df.write.format("pagemq").option("url", url(broker)).option("destination", "/queue/orders::x")
         .mode("append").save())


def test_receipts_that_do_not_come_fail_the_write(spark, broker):
    df = spark.createDataFrame([("x" * 1024,) for _ in range(64)], "body string").coalesce(1)
    started = time.monotonic()
    with pytest.raises(Exception, match=r"within 1s|for 1s"):
        (df.write.format("pagemq").option("url", url(broker)).option("address", f"blocked.{unique('q')}")
         .option("receiptTimeout", "1").option("receiptWindow", "8").mode("append").save())
    assert time.monotonic() - started < 30


def test_an_unreachable_broker_fails_the_write(spark):
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match=r"pagemq option 'url': cannot connect to stomp://127\.0\.0\.1"):
        (df.write.format("pagemq").option("url", f"stomp://127.0.0.1:{free_port()}").option("address", "q")
         .mode("append").save())


@pytest.mark.parametrize(("options", "columns", "problem"), [
    ({"address": "q"}, "body string", "pagemq option 'url'"),
    ({"url": "http://127.0.0.1:1", "address": "q"}, "body string", "pagemq option 'url'"),
    ({"url": "URL"}, "body string", "pagemq option 'address'"),
    ({"url": "URL", "address": "q", "destination": "/queue/q"}, "body string", "pagemq option 'destination'"),
    ({"url": "URL", "address": "q", "receiptWindow": "0"}, "body string", "pagemq option 'receiptWindow'"),
    ({"url": "URL", "address": "q", "receiptTimeout": "inf"}, "body string",
     "pagemq option 'receiptTimeout'"),
    ({"url": "URL", "address": "q", "receiptTimeout": "1e10"}, "body string",
     "pagemq option 'receiptTimeout'"),
    ({"url": "URL", "destination": "/bogus/x"}, "body string", "pagemq option 'destination'"),
    ({"url": "URL", "destination": "/queue/"}, "body string", "pagemq option 'destination'"),
    ({"url": "URL", "address": "q", "persistant": "false"}, "body string",
     "pagemq option 'persistant': not an option of the pagemq sink (did you mean 'persistent'?)"),
    ({"url": "URL", "address": "q"}, "value string", "'body' column"),
    ({"url": "URL", "address": "q"}, "BODY string", "rename 'BODY' to 'body'"),
    ({"url": "URL", "address": "q"}, "body string, Headers map<string,string>",
     "rename 'Headers' to 'headers'"),
    ({"url": "URL", "address": "q"}, "body string, headers map<string,int>", "'headers' column"),
])
def test_bad_sink_options_fail_the_save_naming_them(spark, broker, options, columns, problem):
    values = {key: value.replace("URL", url(broker)) for key, value in options.items()}
    df = spark.createDataFrame([], columns)
    with pytest.raises(Exception, match=re.escape(problem)):
        df.write.format("pagemq").options(**values).mode("append").save()


def test_save_mode_overwrite_is_refused_as_messages_can_only_be_appended(spark, broker):
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="save mode overwrite is not supported"):
        df.write.format("pagemq").option("url", url(broker)).option("address", "q").mode("overwrite").save()


def test_write_stream_stamps_the_query_and_batch_ids(spark, broker, stomp_client, tmp_path: Path):
    address = unique("streamed")
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def run_once(name: str, bodies: list[str]) -> str:
        (source / name).write_text("".join(json.dumps({"body": body}) + "\n" for body in bodies))
        query = (spark.readStream.schema("body string").json(str(source))
                 .writeStream.format("pagemq").option("url", url(broker)).option("address", address)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(60)
        assert query.exception() is None
        return str(query.id)

    first_query = run_once("a.json", ["a0", "a1", "a2"])
    again = run_once("b.json", ["b0", "b1"])  # restarted from the checkpoint: the same query
    assert again == first_query

    frames = drain(stomp_client(broker), f"/queue/{address}", 5)
    stamps = {frame.body: DUPL_ID.match(frame.headers["_AMQ_DUPL_ID"]) for frame in frames}
    assert set(stamps) == {"a0", "a1", "a2", "b0", "b1"}
    assert {match["job"] for match in stamps.values()} == {first_query}
    assert {stamps[body]["batch"] for body in ("a0", "a1", "a2")} == {"0"}
    assert {stamps[body]["batch"] for body in ("b0", "b1")} == {"1"}


def test_a_row_too_large_for_a_batch_send_goes_as_a_plain_send_when_that_fits(start_broker, stomp_client):
    """A batch adds a few bytes to its rows: a row that fits `max-frame-size` only as a SEND of
    its own is sent so, not refused (the sink's task code, called directly: no Spark job)."""
    import pyarrow as pa

    from pagemq.spark.sink import SinkOptions, send_partition

    proc = start_broker({"stomp": {"max-frame-size": "64KiB"}})
    big = b"b" * (64 * 1024 - 130)  # a SEND frame of it is just under 64 KiB, a batch of it over
    rows = pa.RecordBatch.from_pydict({"body": pa.array([b"small", big, b"small too"])})
    options = SinkOptions("127.0.0.1", proc.stomp_port, "/queue/big", None, None, persistent=True, window=100,
                          timeout=10, job_id=None, has_headers=False)
    assert send_partition(options, iter([rows]), "job", 0).rows == 3
    frames = drain(stomp_client(proc, auto_decode=False), "/queue/big", 3)
    assert sorted(len(frame.body) for frame in frames) == [5, 9, len(big)]

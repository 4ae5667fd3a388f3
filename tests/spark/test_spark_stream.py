"""`spark.readStream.format("pagemq")`: real PySpark streaming queries against real brokers.

Every message must reach the file sink exactly once, and the queue must be empty after,
whatever happens in between: the query stopped and restarted from its checkpoint, its driver
process killed with SIGKILL, the broker killed and restarted, a paged backlog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from brokerproc import BrokerProcess, unique, wait_until

from pagemq.spark.stomp_sender import StompSender

PAGED = {"address-settings": {"paged.#": {"max-size-bytes": 0, "page-size-bytes": "256KiB"}}}
BROKER_CONFIG = PAGED
COUNT = 10_000
QUERY_SCRIPT = Path(__file__).with_name("stream_query.py")


def http_url(proc: BrokerProcess) -> str:
    return f"http://127.0.0.1:{proc.http_port}"


def send(proc: BrokerProcess, destination: str, count: int, *, start: int = 0, pad: int = 0) -> None:
    with StompSender("127.0.0.1", proc.stomp_port) as sender:
        for n in range(start, start + count):
            headers = [("persistent", "true"), ("n", str(n))] + ([("pad", "p" * pad)] if pad else [])
            sender.send(destination, headers, f"m{n}".encode())
        sender.flush()


def start_query(spark: Any, url: str, out: Path, checkpoint: Path, *, per_trigger: int | None = 1000,
                **options: str) -> Any:
    reader = spark.readStream.format("pagemq").option("url", url).option("partitionSize", "400")
    if per_trigger is not None:
        reader = reader.option("maxMessagesPerTrigger", str(per_trigger))
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().select("message_id", "seq", "body").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def written(spark: Any, out: Path) -> list[str]:
    """Bodies in the sink's committed files (its metadata log says which)."""
    from pyspark.errors import AnalysisException

    if not (out / "_spark_metadata").exists():
        return []
    try:
        rows = spark.read.parquet(str(out)).select("body").collect()
    except AnalysisException:  # no file committed yet
        return []
    return [bytes(row.body).decode() for row in rows]


def rows_in(query: Any) -> int:
    return sum(progress["numInputRows"] for progress in query.recentProgress)


def wait_for_all(spark: Any, out: Path, expected: int, timeout: float = 180) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        bodies = written(spark, out)
        if len(bodies) >= expected or time.monotonic() > deadline:
            return bodies
        time.sleep(1)


def assert_exactly_once(bodies: list[str], count: int, start: int = 0) -> None:
    expected = {f"m{n}" for n in range(start, start + count)}
    duplicates = len(bodies) - len(set(bodies))
    assert duplicates == 0, f"{duplicates} message(s) written twice"
    missing = expected - set(bodies)
    assert not missing, f"{len(missing)} message(s) lost, e.g. {sorted(missing)[:5]}"
    assert len(bodies) == count


@pytest.fixture
def stopping() -> Iterator[list[Any]]:
    """Queries to stop at teardown, whatever the test did."""
    queries: list[Any] = []
    yield queries
    for query in queries:
        if query.isActive:
            query.stop()


def test_query_stopped_midway_and_restarted_from_its_checkpoint_writes_each_message_once(
        spark, broker, tmp_path, stopping):
    queue = unique("stopped")
    send(broker, f"/queue/{queue}", COUNT)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = start_query(spark, http_url(broker), out, checkpoint, queue=queue)
    stopping.append(query)
    wait_until(lambda: rows_in(query) >= 3000, timeout=120, what="three batches")
    query.stop()
    assert 0 < broker.queue(queue)["messages"] < COUNT
    query = start_query(spark, http_url(broker), out, checkpoint, queue=queue)
    stopping.append(query)
    bodies = wait_for_all(spark, out, COUNT)
    broker.wait_queue(queue, timeout=30, messages=0)
    query.stop()
    assert_exactly_once(bodies, COUNT)
    assert written(spark, out) == bodies  # nothing more came after the queue was empty


def test_driver_killed_with_sigkill_and_restarted_writes_each_message_once(spark, broker, tmp_path):
    queue = unique("killed")
    send(broker, f"/queue/{queue}", COUNT)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    args = [sys.executable, str(QUERY_SCRIPT), http_url(broker), queue, str(out), str(checkpoint)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def run_until(predicate: Any, kill: bool, per_trigger: int) -> None:
        process = subprocess.Popen([*args, str(per_trigger)], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, env=env, start_new_session=True, text=True)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True).start()
        try:
            wait_until(lambda: predicate(lines), timeout=180, what="the query's progress")
        finally:
            os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
            process.wait(timeout=30)

    run_until(lambda lines: sum(1 for line in lines if line.startswith("batch")) >= 4, kill=True,
              per_trigger=700)
    left = broker.queue(queue)["messages"]
    assert 0 < left < COUNT, left
    # The restart re-runs the batch the kill cut with its logged range, then takes larger ones.
    run_until(lambda _lines: broker.queue(queue)["messages"] == 0, kill=True, per_trigger=3000)
    assert_exactly_once(written(spark, out), COUNT)


def test_broker_killed_and_restarted_mid_stream_loses_and_repeats_nothing(spark, start_broker, tmp_path,
                                                                          stopping):
    proc = start_broker(PAGED)
    queue = "paged.restart"
    send(proc, f"/queue/{queue}", COUNT, pad=200)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = start_query(spark, http_url(proc), out, checkpoint, queue=queue)
    stopping.append(query)
    wait_until(lambda: rows_in(query) >= 2000, timeout=120, what="two batches")
    proc.restart(kill=True)
    bodies = wait_for_all(spark, out, COUNT)
    proc.wait_queue(queue, timeout=30, messages=0)
    assert query.isActive, query.exception()
    query.stop()
    assert_exactly_once(bodies, COUNT)


def test_paged_backlog_streams_out_and_its_page_files_go(spark, broker, tmp_path, stopping):
    queue = f"paged.{unique()}"
    send(broker, f"/queue/{queue}", COUNT, pad=500)
    assert broker.queue(queue)["messages_paged"] == COUNT
    assert broker.address(queue)["page_files"] > 5
    out = tmp_path / "out"
    query = start_query(spark, http_url(broker), out, tmp_path / "checkpoint", per_trigger=4000, queue=queue)
    stopping.append(query)
    bodies = wait_for_all(spark, out, COUNT)
    broker.wait_queue(queue, timeout=30, messages=0)
    wait_until(lambda: broker.address(queue)["page_files"] == 0, timeout=30, what="page files deleted")
    query.stop()
    assert_exactly_once(bodies, COUNT)


def test_caught_up_idle_query_leaves_the_queue_empty(spark, broker, tmp_path, stopping):
    queue = unique("idle")
    send(broker, f"/queue/{queue}", 300)
    out = tmp_path / "out"
    query = start_query(spark, http_url(broker), out, tmp_path / "checkpoint", per_trigger=None, queue=queue)
    stopping.append(query)
    assert len(wait_for_all(spark, out, 300)) == 300
    # Spark never calls commit() for the last batch while no new data comes: the next
    # latestOffset(start) acknowledges it.
    broker.wait_queue(queue, timeout=30, messages=0)
    assert query.isActive
    (reader,) = broker.queue(queue)["stream_readers"]
    assert reader["offsets_behind_latest"] == 0 and reader["committed_offset"] > 0
    send(broker, f"/queue/{queue}", 50, start=300)
    bodies = wait_for_all(spark, out, 350)
    broker.wait_queue(queue, timeout=30, messages=0)
    query.stop()
    assert_exactly_once(bodies, 350)


def test_available_now_reads_the_backlog_in_limited_batches_and_stops_with_it_acknowledged(
        spark, broker, tmp_path):
    queue = unique("now")
    send(broker, f"/queue/{queue}", 2000)
    out = tmp_path / "out"
    query = (spark.readStream.format("pagemq").option("url", http_url(broker)).option("queue", queue)
             .option("maxMessagesPerTrigger", "600").load().select("body").writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 2000 and max(sizes) <= 600
    assert_exactly_once(written(spark, out), 2000)
    broker.wait_queue(queue, timeout=30, messages=0)


def test_driver_side_offsets_keep_key_order_and_types_and_available_now_stops_at_its_target(
        broker, start_broker, queue_name):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from pagemq.spark.stream import StreamOptions, StreamReader

    other = start_broker()
    urls = sorted([http_url(broker), http_url(other)], reverse=True)  # given out of order
    for proc in (broker, other):
        send(proc, f"/queue/{queue_name}", 100)
    reader = StreamReader(StreamOptions.parse({"url": ",".join(urls), "queue": queue_name,
                                               "maxOffsetsPerTrigger": "60"}))
    start = reader.initialOffset()
    assert list(start) == sorted(urls) and start == dict.fromkeys(sorted(urls), 0)
    assert reader.getDefaultReadLimit() == ReadMaxRows(60)
    end = reader.latestOffset(start, ReadMaxRows(60))
    assert list(end) == sorted(urls) and all(type(v) is int for v in end.values())
    parts = reader.partitions(start, end)
    assert {p.url for p in parts} == set(urls)
    assert sum(len(next(iter(reader.read(p)))) for p in parts) == 60  # 30 a broker
    reader.prepareForTriggerAvailableNow()
    for proc in (broker, other):
        send(proc, f"/queue/{queue_name}", 50, start=100)  # after the target: not this run's
    final = reader.latestOffset(end, ReadAllAvailable())
    assert final == reader._target
    rows = [batch for part in reader.partitions(end, final) for batch in reader.read(part)]
    assert sum(len(batch) for batch in rows) == 140  # 70 a broker: the rest of the first 100
    assert reader.latestOffset(final, ReadAllAvailable()) == final
    for proc in (broker, other):  # the batch ending at `end` was acknowledged, then `final`
        proc.wait_queue(queue_name, messages=50)


def _batches(reader: Any, limit: Any, start: dict[str, int], count: int) -> list[list[bytes]]:
    """Plan and read `count` batches as Spark would (each `latestOffset` acknowledges the
    batch before it): the bodies of each."""
    batches = []
    for _ in range(count):
        end = reader.latestOffset(start, limit)
        batches.append([body for part in reader.partitions(start, end) for batch in reader.read(part)
                        for body in batch.column("body").to_pylist()])
        start = end
    return batches


@pytest.mark.parametrize(("limit", "first", "second"), [(7, 20, 20), (1, 3, 3), (7, 2, 20)])
def test_a_batch_over_several_brokers_holds_at_most_the_limit_and_takes_from_each(
        broker, start_broker, queue_name, limit, first, second):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pagemq.spark.stream import StreamOptions, StreamReader

    other = start_broker()
    send(broker, f"/queue/{queue_name}", first)
    send(other, f"/queue/{queue_name}", second, start=first)
    reader = StreamReader(StreamOptions.parse({"url": f"{http_url(broker)},{http_url(other)}",
                                               "queue": queue_name, "maxMessagesPerTrigger": str(limit)}))
    total = first + second
    batches = _batches(reader, ReadMaxRows(limit), reader.initialOffset(), -(-total // limit) + 1)
    sizes = [len(batch) for batch in batches]
    assert max(sizes) <= limit
    assert sizes[:total // limit] == [limit] * (total // limit)  # full while messages are left
    assert sorted(body for batch in batches for body in batch) == sorted(
        f"m{n}".encode() for n in range(total))
    if limit < 2:  # a limit below the number of brokers: they take turns
        from_first_broker = [int(batch[0][1:]) < first for batch in batches[:2]]
        assert sorted(from_first_broker) == [False, True]


def test_a_deleted_queue_without_fail_on_data_loss_is_warned_of_once_until_it_is_back(
        broker, queue_name, caplog):
    import urllib.request

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pagemq.spark.stream import StreamOptions, StreamReader

    send(broker, f"/queue/{queue_name}", 3)
    reader = StreamReader(StreamOptions.parse({"url": http_url(broker), "queue": queue_name,
                                               "failOnDataLoss": "false"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    request = urllib.request.Request(f"{http_url(broker)}/api/queues/{queue_name}", method="DELETE")
    urllib.request.urlopen(request, timeout=10).close()
    with caplog.at_level("WARNING", logger="pagemq.spark"):
        for _ in range(5):  # five triggers while the queue is gone
            assert reader.latestOffset(end, ReadAllAvailable()) == end
        gone = [r for r in caplog.records if "reading nothing from there" in r.getMessage()]
        assert len(gone) == 1
        send(broker, f"/queue/{queue_name}", 2, start=3)  # the queue is made again
        later = reader.latestOffset(end, ReadAllAvailable())
        assert later[http_url(broker)] > end[http_url(broker)]
        assert any("is back" in r.getMessage() for r in caplog.records)


def test_durable_subscription_of_an_address_on_two_brokers(spark, broker, start_broker, tmp_path, stopping):
    other = start_broker()
    address = unique("orders")
    out = tmp_path / "out"
    urls = f"{http_url(broker)},{http_url(other)}"
    query = start_query(spark, urls, out, tmp_path / "checkpoint", address=address, subscription="sub",
                        clientId="etl")
    stopping.append(query)
    # made by the query as it starts, on each broker: messages sent from now on are its
    wait_until(lambda: all(p.http_get("/api/queues/etl.sub")[0] == 200 for p in (broker, other)),
               timeout=60, what="the subscription queues")
    send(broker, f"/topic/{address}", 500)
    send(other, f"/topic/{address}", 500, start=500)
    bodies = wait_for_all(spark, out, 1000)
    broker.wait_queue("etl.sub", timeout=30, messages=0)
    other.wait_queue("etl.sub", timeout=30, messages=0)
    query.stop()
    assert_exactly_once(bodies, 1000)


def test_messages_published_right_after_start_reach_a_new_subscription_stream(
        spark, broker, tmp_path, stopping):
    """(Helper 40: the subscription queue was made on the query's thread, 1.8-2.2 s after
    start() returned; what was published meanwhile went to no queue.)"""
    address = unique("events")
    out = tmp_path / "out"
    query = start_query(spark, http_url(broker), out, tmp_path / "checkpoint", address=address,
                        subscription=unique("sub"))
    stopping.append(query)
    send(broker, f"/topic/{address}", 50)  # at once: the query is not running yet
    assert_exactly_once(wait_for_all(spark, out, 50, timeout=120), 50)


def test_latest_is_where_the_queue_was_at_load_so_messages_sent_right_after_start_are_read(
        spark, broker, queue_name, tmp_path, stopping):
    """(Helper 40: `latest` was taken when the query first ran, a second or two after
    start(): messages sent meanwhile counted as before the start and were acknowledged
    unread.)"""
    send(broker, f"/queue/{queue_name}", 5)
    out = tmp_path / "out"
    query = start_query(spark, http_url(broker), out, tmp_path / "checkpoint", queue=queue_name,
                        startingOffsets="latest")
    stopping.append(query)
    send(broker, f"/queue/{queue_name}", 20, start=5)
    bodies = wait_for_all(spark, out, 20, timeout=120)
    assert sorted(bodies, key=lambda b: int(b[1:])) == [f"m{n}" for n in range(5, 25)]
    broker.wait_queue(queue_name, timeout=30, messages=0)  # the 5 before: acknowledged, skipped


def test_a_stream_read_without_url_names_url(spark, broker, queue_name):
    """(Helper 40: without `url` nor `path` the read was taken for a batch read and the
    error named 'path' alone: load() cannot tell a stream from a batch read, so both are named.)"""
    with pytest.raises(Exception, match=r"pagemq option 'path'.*pagemq option 'url': required instead"):
        spark.readStream.format("pagemq").option("queue", queue_name).load()


@pytest.mark.parametrize(("options", "named"), [
    ({"queue": "no-such-queue"}, "queue"),
    ({"queue": "{queue}", "selector": "color = "}, "selector"),
    ({"queue": "{queue}", "url": "http://127.0.0.1:1"}, "url"),
    ({"queue": "{queue}", "url": "stomp://127.0.0.1:61613"}, "url"),
    ({"queue": "{queue}", "url": "{url}/api"}, "url"),
    ({"queue": "{queue}", "startingOffsets": "yesterday"}, "startingOffsets"),
    ({"queue": "{queue}", "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
    ({"queue": "{queue}", "timeout": "1e10"}, "timeout"),
    ({"address": "x"}, "subscription"),
    ({}, "queue"),
    ({"queue": "{queue}", "selecter": "color = 'red'"}, "selecter"),  # would read every message
    ({"queue": "{queue}", "maxMessagePerTrigger": "10"}, "maxmessagepertrigger"),  # Spark lowercases
])
def test_bad_options_raise_at_load_naming_the_option(spark, broker, queue_name, options, named):
    send(broker, f"/queue/{queue_name}", 1)
    reader = spark.readStream.format("pagemq").option("url", http_url(broker))
    for key, value in options.items():
        reader = reader.option(key, value.format(queue=queue_name, url=http_url(broker)))
    with pytest.raises(Exception, match=f"pagemq option '{named}'"):
        reader.load()


def test_a_subscription_made_with_another_selector_is_refused_at_load_naming_the_selector(
        spark, broker):
    address = unique("orders")
    # a durable STOMP subscriber made the subscription queue with its selector
    conn = stomp.Connection12([("127.0.0.1", broker.stomp_port)])
    conn.connect(wait=True, headers={"client-id": "etl"})
    conn.subscribe(f"/topic/{address}", id="1", headers={
        "durable-subscription-name": "sub", "selector": "region = 'eu'", "receipt": "r"})
    wait_until(lambda: broker.http_get("/api/queues/etl.sub")[0] == 200, what="the subscription queue")
    conn.disconnect()
    def reader() -> Any:
        return (spark.readStream.format("pagemq").option("url", http_url(broker))
                .option("address", address).option("subscription", "sub").option("clientId", "etl"))

    with pytest.raises(Exception, match=r"pagemq option 'selector'.*exists with selector \"region = 'eu'\""):
        reader().option("selector", "region = 'us'").load()
    with pytest.raises(Exception, match=r"pagemq option 'selector'.*but the query gives no selector"):
        reader().load()
    reader().option("selector", "region = 'eu'").load()  # the same selector: the query may go on
    with pytest.raises(Exception, match=r"pagemq option 'subscription'.*belongs to address"):
        reader().option("address", unique("elsewhere")).option("selector", "region = 'eu'").load()


def test_a_read_cut_by_a_broker_killed_mid_answer_goes_on_after_the_rows_already_given(
        start_broker, queue_name):
    """Driven as an executor reads one partition. (Before: the cut answer raised
    IncompleteRead out of the task, which under local[2] failed the whole query.)"""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pagemq.spark.stream import StreamOptions, StreamReader

    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0}}})
    count = 20_000
    send(proc, f"/queue/{queue_name}", count, pad=1000)  # ~20 MB: more than the sockets hold
    reader = StreamReader(StreamOptions.parse({"url": http_url(proc), "queue": queue_name,
                                               "partitionSize": str(count), "timeout": "60"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    (part,) = reader.partitions(start, end)
    rows = reader.read(part)

    def numbers(batch: Any) -> list[int]:
        return [int(dict(headers)["n"]) for headers in batch.column("headers").to_pylist()]

    seen = numbers(next(rows))
    assert len(seen) < count
    proc.kill()
    restarter = threading.Timer(1.0, proc.start)
    restarter.start()
    try:
        for batch in rows:
            seen += numbers(batch)
    finally:
        restarter.join()
    assert len(seen) == len(set(seen)) == count
    assert seen == sorted(seen)


def test_a_page_span_damaged_on_disk_is_read_as_arrow_past_the_damage(start_broker, queue_name, caplog):
    """A frame whose bytes changed on disk (structure intact, CRC not): the broker ships the
    span without computing its CRCs, the executor finds the damage and asks for the rest of
    its slice as Arrow, which the broker reads past the damage: the rows are those of an
    Arrow read of the range, and none of them twice."""
    import urllib.request

    import pyarrow as pa
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pagemq.spark.stream import StreamOptions, StreamReader
    from pagemq.storage.paging.page_format import FILE_HEADER, read_frames

    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0}}})
    send(proc, f"/queue/{queue_name}", 300, pad=300)
    proc.stop()
    page = sorted((proc.data_dir / "paging").glob("*/*.page"))[0]
    data = bytearray(page.read_bytes())
    frames = list(read_frames(memoryview(bytes(data)), FILE_HEADER.size, len(data), damage=[]))
    offset, size, _first, _entries = frames[100]
    data[offset + size - 1] ^= 0xFF  # the last byte of its body: every field still adds up
    page.write_bytes(bytes(data))
    proc.start()
    reader = StreamReader(StreamOptions.parse({"url": http_url(proc), "queue": queue_name,
                                               "partitionSize": "1000", "timeout": "30"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    (part,) = reader.partitions(start, end)
    with caplog.at_level("WARNING", logger="pagemq"):
        seqs = [seq for batch in reader.read(part) for seq in batch.column("seq").to_pylist()]
    assert "damaged, frame CRC mismatch" in caplog.text and "as Arrow" in caplog.text
    base = f"{http_url(proc)}/api/streams/{queue_name}"
    with urllib.request.urlopen(f"{base}/read?after=0&upto={end[http_url(proc)]}", timeout=30) as response:
        expected = pa.ipc.open_stream(response.read()).read_all().column("seq").to_pylist()
    assert seqs == expected and len(expected) == 299  # all but the damaged record
    assert "1 record(s) lost to damage" in proc.log_tail(50)

"""`spark.read.format("pagemq")` over the page files of a real broker's data directory.

The module's broker pages every message (`max-size-bytes 0`) into 256 KiB pages, so the
20,000 messages of the `orders` fixture spread over ~25 page files (Spark spends ~40 ms per
partition of a Python source, so more files would only make the tests slower). They are
sent in four phases of 5,000 with their own `color` header and priority, a pause apart, so
that closed pages hold one phase each (or two, at a phase boundary) and their summaries let
filters and selectors skip them. The last page is the live one: it has no summary, so
nothing but a `seq` range can skip it.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, StompClient, unique
from test_paging_helpers import body, consume, durable, numbered, page_files, send_all

from pagemq.storage.paging.page_format import FILE_HEADER, FRAME_HEADER, PageSummaryRecord

BROKER_CONFIG = {
    "broker": {"archive-data-logs": True},
    "address-settings": {"#": {"page-size-bytes": "256KiB", "max-size-bytes": 0}},
}
SIZE = 200  # body bytes: ~800 messages per page
PHASES = (("red", 1), ("blue", 2), ("red", 3), ("blue", 4))
PER_PHASE = 5000


@dataclass
class Sent:
    address: str
    labels: list[str]


def read(spark: Any, proc: BrokerProcess, address: str, **options: str) -> Any:
    return (spark.read.format("pagemq").option("path", str(proc.data_dir)).option("address", address)
            .options(**options).load())


def label_of(row: Any) -> str:
    return bytes(row.body).decode().split("|", 1)[0]


@pytest.fixture(scope="module")
def orders(broker: BrokerProcess) -> Sent:
    client = StompClient(broker.stomp_port).connect()
    address = unique("orders")
    labels: list[str] = []
    try:
        for phase, (color, priority) in enumerate(PHASES):
            names = numbered(f"p{phase}-", PER_PHASE)
            send_all(client, f"/queue/{address}", names, size=SIZE, timeout=60,
                     headers={"color": color, "priority": priority})
            labels += names
            time.sleep(0.05)  # the next phase's timestamps are later
    finally:
        client.disconnect()
    return Sent(address, labels)


def test_every_paged_message_is_read_once_in_seq_order_with_the_exact_schema(spark, broker, orders):
    from pyspark.sql.types import StructType

    df = read(spark, broker, orders.address)
    assert df.schema == StructType.fromDDL(  # interface.md's read schema, every field nullable
        "message_id string, address string, queue string, seq long, timestamp timestamp, priority int, "
        "persistent boolean, headers map<string,string>, body binary")
    assert df.schema["headers"].dataType.valueContainsNull and df.schema["queue"].nullable
    files = page_files(broker, orders.address)
    assert len(files) > 20
    assert df.rdd.getNumPartitions() == len(files)  # one partition per page file

    rows = df.collect()  # partition by partition, each in its own order
    assert [label_of(row) for row in rows] == orders.labels
    seqs = [row.seq for row in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert {row.seq >> 32 for row in rows} == {int(path.stem) for path in files}

    first, last = rows[0], rows[-1]
    assert first.address == orders.address and first.queue == orders.address
    assert first.persistent is True and (first.priority, last.priority) == (1, 4)
    assert first.headers["color"] == "red" and first.headers["destination"] == f"/queue/{orders.address}"
    assert bytes(first.body) == body(orders.labels[0], SIZE).encode()
    assert int(first.message_id) < int(last.message_id)
    assert first.timestamp <= last.timestamp


def test_include_headers_false_leaves_the_headers_column_null_and_the_rest_as_it_was(spark, broker, orders):
    full = read(spark, broker, orders.address).drop("headers").collect()
    bare = read(spark, broker, orders.address, includeHeaders="false")
    assert bare.filter(bare.headers.isNotNull()).count() == 0
    assert bare.drop("headers").collect() == full


def test_a_seq_range_reads_only_the_page_files_it_can_touch(spark, broker, orders):
    df = read(spark, broker, orders.address)
    seqs = [row.seq for row in df.select("seq").collect()]
    low, high = seqs[6000], seqs[7999]

    ranged = df.filter((df.seq >= low) & (df.seq <= high))
    assert [label_of(row) for row in ranged.collect()] == orders.labels[6000:8000]
    pages = {seq >> 32 for seq in seqs[6000:8000]}
    assert ranged.rdd.getNumPartitions() == len(pages)  # the other files were skipped

    after = df.filter(df.seq > seqs[-2])
    assert [label_of(row) for row in after.collect()] == orders.labels[-1:]
    assert after.rdd.getNumPartitions() == 1


def pages_of(rows: list[Any]) -> set[int]:
    return {row.seq >> 32 for row in rows}


def test_priority_and_timestamp_filters_skip_page_files(spark, broker, orders):
    df = read(spark, broker, orders.address)
    live_page = int(page_files(broker, orders.address)[-1].stem)

    third = df.filter(df.priority == 3)
    rows = third.collect()
    assert [label_of(row) for row in rows] == orders.labels[2 * PER_PHASE:3 * PER_PHASE]
    # the pages holding phase 3, and the live page: its priorities are not summarised yet
    assert third.rdd.getNumPartitions() == len(pages_of(rows) | {live_page})

    cut = max(row.timestamp for row in df.filter(df.priority == 2).select("timestamp").collect())
    later = df.filter(df.timestamp > cut)
    rows = later.collect()
    assert [label_of(row) for row in rows] == orders.labels[2 * PER_PHASE:]
    assert later.rdd.getNumPartitions() == len(pages_of(rows) | {live_page})


def test_the_selector_option_filters_rows_and_skips_page_files(spark, broker, orders):
    everything = read(spark, broker, orders.address).rdd.getNumPartitions()
    red = read(spark, broker, orders.address, selector="color = 'red' AND JMSPriority > 1")
    rows = red.collect()
    assert [label_of(row) for row in rows] == orders.labels[2 * PER_PHASE:3 * PER_PHASE]
    # the pages of phase 3, maybe a page at a phase boundary (red and priority > 1 both occur
    # there, though not together), and the live page
    assert len(pages_of(rows)) < red.rdd.getNumPartitions() <= len(pages_of(rows)) + 3 < everything


def test_queue_names_the_durable_queues_a_message_was_routed_to(spark, broker, stomp_client):
    topic = unique("news")
    for client_id, name in (("c1", "first"), ("c2", "second")):
        durable(stomp_client, broker, f"{client_id}-{topic}", topic, name).drop()
    stomp_client(broker).subscribe(f"/topic/{topic}")  # non-durable: no queue record
    send_all(stomp_client(broker), f"/topic/{topic}", numbered("n", 3), size=SIZE)

    rows = read(spark, broker, topic).collect()
    assert len(rows) == 3
    names = rows[0].queue.split(",")
    assert len(names) == 2 and "first" in names[0] and "second" in names[1], rows[0].queue
    assert {row.queue for row in rows} == {rows[0].queue}


def test_archived_page_files_are_read_too(spark, broker, stomp_client):
    address = unique("archived")
    labels = send_all(stomp_client(broker), f"/queue/{address}", numbered("a", 1000), size=SIZE)
    consume(stomp_client(broker), f"/queue/{address}", 1000)  # acknowledged pages go to the archive
    archive = broker.data_dir / "archive" / "paging"
    assert any(archive.glob("*/*.page")), "no page was archived"
    labels += send_all(stomp_client(broker), f"/queue/{address}", numbered("b", 50), size=SIZE)

    assert [label_of(row) for row in read(spark, broker, address).collect()] == labels
    live_only = [label_of(row) for row in read(spark, broker, address, includeArchived="false").collect()]
    assert 50 <= len(live_only) < len(labels) and live_only == labels[-len(live_only):]


def test_a_read_while_the_broker_pages_sees_a_prefix_of_what_was_sent(spark, broker, stomp_client):
    address = unique("live")
    labels = numbered("w", 6000)
    client = stomp_client(broker)
    send_all(client, f"/queue/{address}", labels[:500], size=SIZE)
    done = threading.Event()

    def produce() -> None:
        try:
            for start in range(500, len(labels), 250):
                send_all(client, f"/queue/{address}", labels[start:start + 250], size=SIZE, timeout=30)
        finally:
            done.set()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    seen: list[int] = []
    while not done.is_set() or len(seen) < 2:
        got = [label_of(row) for row in read(spark, broker, address).collect()]
        assert got == labels[:len(got)], "a read while paging is not a prefix of what was sent"
        seen.append(len(got))
    producer.join(30)
    assert seen == sorted(seen) and seen[0] >= 500
    assert [label_of(row) for row in read(spark, broker, address).collect()] == labels


def test_register_turns_filter_pushdown_on_and_may_be_called_again(spark, broker, orders):
    from pagemq.spark import register

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    register(spark)
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    df = read(spark, broker, orders.address)
    seqs = [row.seq for row in df.select("seq").collect()]
    assert df.filter(df.seq >= seqs[-1]).rdd.getNumPartitions() == 1


@pytest.mark.parametrize(("options", "option"), [
    ({"address": "x"}, "path"),
    ({"path": "DATA"}, "address"),
    ({"path": "DATA", "address": "no-such-address"}, "address"),
    ({"path": "/nonexistent/pagemq-data", "address": "x"}, "path"),
    ({"path": "DATA", "address": "ADDRESS", "selector": "color = "}, "selector"),
    ({"path": "DATA", "address": "ADDRESS", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"path": "DATA", "address": "ADDRESS", "includeHeaders": "maybe"}, "includeHeaders"),
    ({"path": "DATA", "address": "ADDRESS", "url": "http://127.0.0.1:1"}, "url"),  # a stream's
    ({"path": "DATA", "address": "ADDRESS", "includeArchive": "false"}, "includearchive"),
])
def test_bad_options_raise_at_load_naming_the_option(spark, broker, orders, options, option):
    values = {key: value.replace("DATA", str(broker.data_dir)).replace("ADDRESS", orders.address)
              for key, value in options.items()}
    with pytest.raises(Exception, match=f"pagemq option '{option}'"):
        spark.read.format("pagemq").options(**values).load()


def _copy_data(proc: BrokerProcess, target: Path, *, journal: bool = True) -> Path:
    copy = target / "data"
    shutil.copytree(proc.data_dir, copy, ignore=shutil.ignore_patterns("server.lock", *(
        () if journal else ("journal",))))
    return copy


def test_transactional_batches_count_only_once_their_commit_record_is_in_the_journal(
        spark, broker, stomp_client, tmp_path):
    first, second = unique("tx-a"), unique("tx-b")
    client = stomp_client(broker)
    before = send_all(client, f"/queue/{first}", numbered("plain", 3), size=SIZE)
    journal_before_commit = tmp_path / "journal-before"
    shutil.copytree(broker.data_dir / "journal", journal_before_commit)
    client.begin("t1")
    in_tx = {"transaction": "t1", "persistent": "true"}
    for name in numbered("tx", 4):  # one COMMIT paging to two addresses: TX_BATCH frames
        client.conn.send(f"/queue/{first}", body(name, SIZE), headers=in_tx)
        client.conn.send(f"/queue/{second}", body(name, SIZE), headers=in_tx)
    client.commit("t1")
    after = send_all(client, f"/queue/{first}", numbered("late", 2), size=SIZE)

    committed = [label_of(row) for row in read(spark, broker, first).collect()]
    assert committed == before + numbered("tx", 4) + after

    # The same page files with the journal as it was before the COMMIT (as after a crash
    # between the page write and the commit record): no commit record, the batch is left out.
    copy = _copy_data(broker, tmp_path, journal=False)
    rows = (spark.read.format("pagemq").option("path", str(copy)).option("address", first)
            .option("journalDirectory", str(journal_before_commit)).load().collect())
    assert [label_of(row) for row in rows] == before + after


@pytest.mark.parametrize("journal", ["missing", "empty", "an empty file"])
def test_a_read_without_the_journal_fails_naming_the_option_rather_than_leaving_rows_out(
        spark, broker, stomp_client, tmp_path, journal):
    address = unique("no-journal")
    send_all(stomp_client(broker), f"/queue/{address}", numbered("m", 3), size=SIZE)
    copy = _copy_data(broker, tmp_path, journal=False)
    reader = spark.read.format("pagemq").option("path", str(copy)).option("address", address)
    named = "path"
    if journal != "missing":  # a directory that holds no journal files, or an empty one
        (tmp_path / "elsewhere").mkdir()
        if journal == "an empty file":
            (tmp_path / "elsewhere" / "pagemq-0000000001.jnl").touch()
        reader, named = reader.option("journalDirectory", str(tmp_path / "elsewhere")), "journalDirectory"
    with pytest.raises(Exception, match=f"pagemq option '{named}': no journal"):
        reader.load()


def test_a_damaged_frame_fails_the_read_naming_the_file_unless_failondataloss_is_false(
        spark, broker, stomp_client, tmp_path):
    address = unique("damaged")
    labels = send_all(stomp_client(broker), f"/queue/{address}", numbered("d", 1500), size=SIZE)
    copy = _copy_data(broker, tmp_path)
    folder = next(path.parent for path in (copy / "paging").glob("*/address.txt")
                  if path.read_text() == address)
    page = sorted(folder.glob("*.page"))[0]
    summary = PageSummaryRecord.decode(page.with_suffix(".summary").read_bytes())
    assert summary.file_size == page.stat().st_size  # a closed page, its summary valid
    data = bytearray(page.read_bytes())
    second_frame = FILE_HEADER.size + FRAME_HEADER.size + int.from_bytes(data[32:36], "little")
    data[second_frame + FRAME_HEADER.size + 30] ^= 0xFF  # a byte inside the second record
    page.write_bytes(bytes(data))

    df = spark.read.format("pagemq").option("path", str(copy)).option("address", address).load()
    with pytest.raises(Exception, match=rf"{page.name}: damaged bytes at offset {second_frame}"):
        df.collect()
    lenient = df.sparkSession.read.format("pagemq").option("path", str(copy)).option("address", address)
    got = [label_of(row) for row in lenient.option("failOnDataLoss", "false").load().collect()]
    assert got == labels[:1] + labels[2:]

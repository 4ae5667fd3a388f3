"""The streaming reader's HTTP endpoints (`/api/streams/...`) against a real broker: offsets,
range reads as Arrow IPC (memory and page files), commits (idempotent, releasing page files),
ranges kept across a restart, sharing a queue with a STOMP consumer, and lag figures."""

from __future__ import annotations

import io
import json
import struct
import urllib.error
import urllib.request
import zlib
from typing import Any

import pytest
from brokerproc import BrokerProcess, StompClient, unique, wait_until

pa = pytest.importorskip("pyarrow")

from pagemq.spark.range_parts import CONTENT_TYPE, RangeDecodeError, read_parts  # noqa: E402
from pagemq.spark.schema import ARROW_SCHEMA  # noqa: E402
from pagemq.spark.stomp_sender import StompSender  # noqa: E402
from pagemq.storage.paging.page_format import ENTRY_HEAD, FILE_HEADER, FRAME_HEADER, read_frames  # noqa: E402

BROKER_CONFIG = {"address-settings": {"paged.#": {"max-size-bytes": 0}}}


def api(proc: BrokerProcess, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}{path}", data=data,
                                     method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            status = response.status
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    if kind.startswith("application/vnd.apache.arrow.stream"):
        return status, pa.ipc.open_stream(raw).read_all()
    if kind.startswith(CONTENT_TYPE):
        return status, pa.Table.from_batches(list(read_parts(io.BytesIO(raw), "headers=false" not in path)),
                                             ARROW_SCHEMA)
    return status, json.loads(raw)


def send(proc: BrokerProcess, destination: str, count: int, *, start: int = 0,
         headers: list[tuple[str, str]] | None = None) -> None:
    with StompSender("127.0.0.1", proc.stomp_port) as sender:
        for n in range(start, start + count):
            sender.send(destination, [("persistent", "true"), ("n", str(n)), *(headers or [])],
                        f"m{n}".encode())
        sender.flush()


def read(proc: BrokerProcess, queue: str, after: int, upto: int, **params: Any) -> Any:
    query = "&".join(f"{k}={v}" for k, v in {"after": after, "upto": upto, **params}.items())
    status, table = api(proc, f"/api/streams/{queue}/read?{query}")
    assert status == 200, table
    return table


def bodies(table: Any) -> list[str]:
    return [body.decode() for body in table.column("body").to_pylist()]


def test_offsets_bound_the_next_range_and_a_read_takes_nothing(broker, queue_name):
    send(broker, f"/queue/{queue_name}", 50)
    status, figures = api(broker, f"/api/streams/{queue_name}/offsets?after=0&max=20")
    assert status == 200 and figures["messages"] == 20
    assert figures["earliest"] < figures["end"] < figures["latest"]
    table = read(broker, queue_name, 0, figures["end"])
    assert table.schema == ARROW_SCHEMA
    assert bodies(table) == [f"m{n}" for n in range(20)]
    assert table.column("seq").to_pylist()[-1] == figures["end"]
    assert table.column("queue").to_pylist() == [queue_name] * 20
    assert read(broker, queue_name, 0, figures["end"]).column("seq").to_pylist() == (
        table.column("seq").to_pylist())
    assert broker.queue(queue_name)["messages"] == 50
    assert dict(table.column("headers").to_pylist()[0])["n"] == "0"
    bare = read(broker, queue_name, 0, figures["end"], headers="false")
    assert bare.schema == ARROW_SCHEMA and bare.column("headers").null_count == 20


def test_commit_acknowledges_up_to_the_offset_once_and_older_commits_are_no_ops(broker, queue_name):
    send(broker, f"/queue/{queue_name}", 30)
    _, figures = api(broker, f"/api/streams/{queue_name}/offsets?after=0&max=10")
    read(broker, queue_name, 0, figures["end"])
    status, done = api(broker, f"/api/streams/{queue_name}/commit", {"offset": figures["end"]})
    assert status == 200 and done["acknowledged"] == 10 and done["committed"] == figures["end"]
    for offset in (figures["end"], figures["earliest"], 0):
        _, again = api(broker, f"/api/streams/{queue_name}/commit", {"offset": offset})
        assert again["acknowledged"] == 0 and again["committed"] == figures["end"]
    info = broker.queue(queue_name)
    assert info["messages"] == 20 and info["messages_acknowledged"] == 10
    assert bodies(read(broker, queue_name, figures["end"], figures["latest"])) == [
        f"m{n}" for n in range(10, 30)]


def test_paged_range_is_read_in_slices_and_its_commit_deletes_the_page_files(broker):
    name = f"paged.{unique()}"
    send(broker, f"/queue/{name}", 3000, headers=[("pad", "x" * 2000)])
    assert broker.queue(name)["messages_paged"] == 3000
    _, figures = api(broker, f"/api/streams/{name}/offsets?after=0")
    latest = figures["latest"]
    _, sliced = api(broker, f"/api/streams/{name}/splits?after=0&upto={latest}&size=1000")
    assert sliced["messages"] == 3000 and len(sliced["splits"]) == 3
    _, planned = api(broker, f"/api/streams/{name}/offsets?after=0&max=3000&size=1000")
    assert planned["end"] == latest and planned["splits"] == sliced["splits"]
    seen: list[str] = []
    for low, high, from_page in sliced["splits"]:
        seen += bodies(read(broker, name, low, high, from_page=from_page))
    assert seen == [f"m{n}" for n in range(3000)]
    assert broker.queue(name)["messages"] == 3000
    status, done = api(broker, f"/api/streams/{name}/commit", {"offset": latest})
    assert status == 200 and done["acknowledged"] == 3000
    broker.wait_queue(name, messages=0)
    wait_until(lambda: broker.address(name)["page_files"] == 0, timeout=10)


def test_selector_filters_a_read_and_a_commit_leaves_what_it_did_not_serve(broker, queue_name):
    with StompSender("127.0.0.1", broker.stomp_port) as sender:
        for n in range(20):
            sender.send(f"/queue/{queue_name}", [("color", "red" if n % 2 else "blue")], f"m{n}".encode())
        sender.flush()
    _, figures = api(broker, f"/api/streams/{queue_name}/offsets?after=0")
    table = read(broker, queue_name, 0, figures["latest"], selector="color%3D%27red%27")
    assert bodies(table) == [f"m{n}" for n in range(1, 20, 2)]
    _, done = api(broker, f"/api/streams/{queue_name}/commit",
                  {"offset": figures["latest"], "selector": "color='red'"})
    assert done["acknowledged"] == 10
    assert broker.queue(queue_name)["messages"] == 10


def test_a_message_a_stomp_consumer_held_during_the_read_is_not_acknowledged_by_the_commit(
        broker, stomp_client, queue_name):
    send(broker, f"/queue/{queue_name}", 10)
    consumer: StompClient = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual", headers={"activemq.prefetchSize": 2})
    held = consumer.wait_for(2)
    _, figures = api(broker, f"/api/streams/{queue_name}/offsets?after=0")
    table = read(broker, queue_name, 0, figures["latest"])
    assert bodies(table) == [f"m{n}" for n in range(2, 10)]
    consumer.disconnect()  # its two deliveries go back to the queue, below the stream's offset
    broker.wait_queue(queue_name, messages_delivering=0)
    _, done = api(broker, f"/api/streams/{queue_name}/commit", {"offset": figures["latest"]})
    assert done["acknowledged"] == 8
    assert broker.queue(queue_name)["messages"] == 2
    assert [f.body for f in held] == ["m0", "m1"]


def test_a_message_served_and_then_delivered_to_a_consumer_before_the_commit_is_left_to_it(
        broker, stomp_client, queue_name):
    """A read takes nothing: until the commit, a STOMP consumer may be given what a batch
    holds (docs/spark.md, "STOMP consumers on the same queue"); the commit then leaves those
    to the consumer, and nothing is lost."""
    send(broker, f"/queue/{queue_name}", 10)
    _, figures = api(broker, f"/api/streams/{queue_name}/offsets?after=0")
    assert bodies(read(broker, queue_name, 0, figures["latest"])) == [f"m{n}" for n in range(10)]
    consumer: StompClient = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual", headers={"activemq.prefetchSize": 4})
    held = consumer.wait_for(4)
    _, done = api(broker, f"/api/streams/{queue_name}/commit", {"offset": figures["latest"]})
    assert done["acknowledged"] == 6  # the four the consumer holds are its own
    for frame in held:
        consumer.ack(frame)
    broker.wait_queue(queue_name, messages=0)
    assert [f.body for f in held] == ["m0", "m1", "m2", "m3"]


def test_a_commit_completes_whole_served_pages_and_keeps_a_record_a_selective_consumer_held(
        start_broker, stomp_client):
    proc = start_broker({"address-settings": {"paged.#": {"max-size-bytes": 0, "page-size-bytes": "64KiB"}}})
    name = "paged.whole"
    send(proc, f"/queue/{name}", 400, headers=[("pad", "z" * 1000)])
    assert proc.address(name)["page_files"] >= 5
    consumer: StompClient = stomp_client(proc)
    consumer.subscribe(f"/queue/{name}", ack="client-individual", headers={"selector": "n = '150'"})
    assert [f.body for f in consumer.wait_for(1)] == ["m150"]  # claimed from the middle of the backlog
    _, figures = api(proc, f"/api/streams/{name}/offsets?after=0&max=1000&size=100")
    assert figures["end"] == figures["latest"] and figures["messages"] == 399
    seen: list[str] = []
    for low, high, from_page in figures["splits"]:
        seen += bodies(read(proc, name, low, high, from_page=from_page))
    assert seen == [f"m{n}" for n in range(400) if n != 150]
    consumer.disconnect()  # m150 goes back to its page, below the stream's offset
    proc.wait_queue(name, messages_delivering=0)
    _, done = api(proc, f"/api/streams/{name}/commit", {"offset": figures["end"]})
    assert done["acknowledged"] == 399
    proc.wait_queue(name, messages=1)
    wait_until(lambda: proc.address(name)["page_files"] <= 2, timeout=10)  # m150's page (and the live one)
    proc.restart(kill=True)  # the pages' complete records are in the journal
    assert proc.queue(name)["messages"] == 1
    stomp = stomp_client(proc)
    stomp.subscribe(f"/queue/{name}")
    assert [f.body for f in stomp.wait_for(1)] == ["m150"]
    # its auto ack and its page's deletion done before the broker stops
    proc.wait_queue(name, messages=0)
    wait_until(lambda: proc.address(name)["page_files"] == 0, timeout=10)


def test_raw_pages_answer_the_same_rows_as_arrow_with_page_spans_decoded_by_the_reader(
        broker, stomp_client):
    name = f"paged.{unique()}"
    send(broker, f"/queue/{name}", 2000, headers=[("pad", "x" * 1500)])
    consumer: StompClient = stomp_client(broker)  # takes some records out of the middle of spans
    consumer.subscribe(f"/queue/{name}", ack="client-individual", headers={"activemq.prefetchSize": 7})
    for frame in consumer.wait_for(7)[::2]:
        consumer.ack(frame)
    consumer.wait_for(11)  # four more, in the place of the four acknowledged
    _, figures = api(broker, f"/api/streams/{name}/offsets?after=0")
    _, sliced = api(broker, f"/api/streams/{name}/splits?after=0&upto={figures['latest']}&size=600")
    assert len(sliced["splits"]) >= 3
    for low, high, from_page in [*sliced["splits"], [0, figures["latest"], 0], [5, 1500, 0]]:
        for headers in ("true", "false"):
            query = f"after={low}&upto={high}&from_page={from_page}&headers={headers}"
            status, raw = api(broker, f"/api/streams/{name}/read?{query}&pages=raw")
            assert status == 200 and raw.schema == ARROW_SCHEMA
            arrow = read(broker, name, low, high, from_page=from_page, headers=headers)
            assert raw.equals(arrow), (low, high, from_page, headers)
    whole = read(broker, name, 0, figures["latest"], pages="raw")
    assert bodies(whole) == [f"m{n}" for n in range(11, 2000)]  # the consumer holds m0-m10 or took them
    consumer.disconnect()


def test_a_stored_message_that_does_not_decode_fails_a_raw_read_at_once_naming_it(start_broker):
    proc = start_broker(BROKER_CONFIG)
    send(proc, "/queue/paged.bad", 300, headers=[("pad", "p" * 300)])
    _, figures = api(proc, "/api/streams/paged.bad/offsets?after=0")
    proc.stop()
    page = sorted((proc.data_dir / "paging").glob("paged.bad*/*.page"))[0]
    data = bytearray(page.read_bytes())
    frames = list(read_frames(memoryview(bytes(data)), FILE_HEADER.size, len(data), damage=[]))
    offset, size, _first, _entries = frames[10]
    data[offset + FRAME_HEADER.size + 1 + ENTRY_HEAD.size + 8] = 7  # a codec version no one reads
    struct.pack_into("<I", data, offset + 4, zlib.crc32(data[offset + 8:offset + size]))  # its frame intact
    page.write_bytes(bytes(data))
    proc.start()
    earliest, latest = figures["earliest"], figures["latest"]
    for query, by_broker in ((f"after=0&upto={latest}", False),  # a whole span: the reader decodes it
                             (f"after={earliest + 3}&upto={latest}", True),  # the broker picks rows
                             (f"after=0&upto={latest}&selector=n%3C%3E%27x%27", True)):  # ... one by one
        with pytest.raises(RangeDecodeError, match=r"message \d+ on page \d+ does not decode") as caught:
            api(proc, f"/api/streams/paged.bad/read?{query}&pages=raw")
        assert str(caught.value).startswith("the broker cannot serve the range") == by_broker, query
    assert "does not decode" in proc.log_tail(20)


def test_an_uncommitted_range_reads_the_same_after_a_broker_restart(start_broker):
    proc = start_broker(BROKER_CONFIG)
    send(proc, "/queue/paged.r", 400, headers=[("pad", "y" * 1000)])
    send(proc, "/queue/mem.r", 40)
    first_run = {"paged.r": range(400), "mem.r": range(40)}
    ranges = {}
    for queue in ("paged.r", "mem.r"):
        _, figures = api(proc, f"/api/streams/{queue}/offsets?after=0&max=25")
        ranges[queue] = (figures["end"], bodies(read(proc, queue, 0, figures["end"])))
        api(proc, f"/api/streams/{queue}/commit", {"offset": figures["end"]})
        _, after = api(proc, f"/api/streams/{queue}/offsets?after={figures['end']}&max=100")
        ranges[queue] += (after["end"], bodies(read(proc, queue, figures["end"], after["end"])))
    proc.restart()
    for queue, (committed, _first, end, uncommitted) in ranges.items():
        assert bodies(read(proc, queue, committed, end)) == uncommitted
        _, figures = api(proc, f"/api/streams/{queue}/offsets?after=0")
        assert figures["earliest"] > committed
        rest = read(proc, queue, committed, figures["latest"])  # a commit covers what was read
        assert rest.num_rows == len(first_run[queue]) - 25
        api(proc, f"/api/streams/{queue}/commit", {"offset": figures["latest"]})
        proc.wait_queue(queue, messages=0)


def test_lag_of_each_reader_is_in_the_queue_view_and_the_metrics(broker, queue_name):
    send(broker, f"/queue/{queue_name}", 12)
    _, figures = api(broker, f"/api/streams/{queue_name}/offsets?reader=lagger&after=0&max=5")
    read(broker, queue_name, 0, figures["end"], reader="lagger")
    api(broker, f"/api/streams/{queue_name}/commit", {"reader": "lagger", "offset": figures["end"]})
    (reader,) = broker.queue(queue_name)["stream_readers"]
    assert reader == {"name": "lagger", "committed_offset": figures["end"],
                      "last_read_offset": figures["end"], "offsets_behind_latest": 7}
    _, _kind, text = broker.http_get_text("/metrics")
    labels = f'{{queue="{queue_name}",reader="lagger"}}'
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if labels in line and not line.startswith("#")}
    assert values[f"pagemq_stream_offsets_behind_latest{labels}"] == 7
    assert values[f"pagemq_stream_committed_offset{labels}"] == figures["end"]  # exact below 2**53


def test_durable_subscription_queue_is_made_on_demand_and_receives_the_address(broker):
    address = unique("news")
    status, made = api(broker, "/api/streams/subscriptions",
                       {"address": address, "subscription": "q1", "client_id": "spark"})
    assert status == 200 and made["queue"] == "spark.q1" and made["address"] == address
    send(broker, f"/topic/{address}", 5)
    broker.wait_queue("spark.q1", messages=5)
    status, figures = api(broker, "/api/streams/spark.q1/offsets")
    assert status == 200 and figures["filter"] is None  # what a reader's load() checks its selector by
    status, again = api(broker, "/api/streams/subscriptions",
                        {"address": address, "subscription": "q1", "client_id": "spark", "selector": "a=1"})
    assert status == 409 and "selector" in again["error"]
    status, made = api(broker, "/api/streams/subscriptions",
                       {"address": address, "subscription": "q2", "client_id": "spark", "selector": "a=1"})
    assert status == 200 and api(broker, "/api/streams/spark.q2/offsets")[1]["filter"] == "a=1"


@pytest.mark.parametrize(("path", "body", "status", "needle"), [
    ("/api/streams/nosuchqueue/offsets", None, 404, "nosuchqueue"),
    ("/api/streams/{q}/offsets?after=x", None, 400, "after"),
    ("/api/streams/{q}/read?after=0&upto=5&selector=a%3D", None, 400, "selector"),
    ("/api/streams/{q}/read?after=9&upto=5", None, 400, "upto"),
    ("/api/streams/{q}/read?after=0&upto=5&pages=cooked", None, 400, "pages"),
    ("/api/streams/{q}/commit", {"offset": "ten"}, 400, "offset"),
    ("/api/streams/{q}/commit", {"offset": 2 ** 70}, 400, "offset"),  # past a message id's range
    ("/api/streams/{q}/read?after=0&upto=99999999999999999999999", None, 400, "upto"),
    ("/api/streams/{q}/offsets?after=9223372036854775808", None, 400, "after"),
    ("/api/streams/subscriptions", {"address": "", "subscription": "s"}, 400, "address"),
])
def test_bad_requests_get_an_error_naming_the_problem(broker, queue_name, path, body, status, needle):
    send(broker, f"/queue/{queue_name}", 1)
    got, answer = api(broker, path.format(q=queue_name), body)
    assert got == status and needle in answer["error"]

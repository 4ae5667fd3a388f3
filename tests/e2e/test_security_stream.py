"""The Spark streaming source against a secured broker: it passes its `user` / `password`
options as HTTP Basic credentials, and a reader needs `consume` on the streamed address
(not the broker-wide `manage`), as a STOMP consumer of that address would.

Driven the way Spark drives it on the driver and an executor (`StreamReader`), over real
HTTP to a real broker process; no Spark session is needed for that."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess, StompClient, unique
from security_helpers import DEFAULT_SETTINGS, USERS, admin_get, login, password, start_secured

pytest.importorskip("pyspark")

SETTINGS: dict[str, Any] = {
    **DEFAULT_SETTINGS,
    "feed.#": {"send": ["admin"], "consume": ["feed-readers", "admin"],
               "create-durable-queue": ["feed-readers", "admin"]},
}
USERS_HERE = {**USERS, "spark": ("feed-readers",), "grafana": ("viewers",)}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_secured(tmp_path_factory.mktemp("stream"), SETTINGS, users=USERS_HERE,
                         extra={"addresses": [{"name": "feed.orders"}, {"name": "jobs"},
                                              {"name": "feed.events", "routing-type": "multicast"}]})
    yield proc
    proc.stop()
    assert not proc.tracebacks(), proc.log_tail(80)


def _url(proc: BrokerProcess) -> str:
    return f"http://127.0.0.1:{proc.http_port}"


def _send(proc: BrokerProcess, destination: str, count: int) -> None:
    client = StompClient(proc.stomp_port, connect_headers=login("alice")).connect()
    for n in range(count):
        client.send(destination, f"m{n}", headers={"persistent": "true"}, receipt=n == count - 1)
    client.disconnect()


def _read_all(reader: Any) -> int:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = sum(len(batch) for part in reader.partitions(start, end) for batch in reader.read(part))
    reader.commit(end)
    return rows


def _reader(proc: BrokerProcess, user: str | None, *, load: bool = False, **options: str) -> Any:
    """As Spark makes the reader at start() (`load`: first the check load() makes)."""
    from pagemq.spark.stream import StreamOptions, StreamReader, prepare

    given = {"url": _url(proc)}
    if user is not None:
        given |= {"user": user, "password": password(user)}
    given |= options
    parsed = StreamOptions.parse(given)
    if load:
        prepare(parsed, create=False)
    prepare(parsed, create=True)
    return StreamReader(parsed)


def test_stream_reader_with_consume_reads_and_acknowledges_its_queue(secured: BrokerProcess) -> None:
    _send(secured, "/queue/feed.orders", 25)
    reader = _reader(secured, "spark", queue="feed.orders")
    assert _read_all(reader) == 25
    status, body = admin_get(secured, "/api/queues/feed.orders")
    assert status == 200 and body["messages"] == 0, body  # committed: acknowledged


def test_stream_durable_subscription_made_by_a_reader_with_consume(secured: BrokerProcess) -> None:
    """(Before: load() asked about the subscription queue, not there yet, as an address of its
    own name, and refused a user with `consume` on the subscribed address alone.)"""
    subscription = unique("sub")
    _reader(secured, "spark", load=True, address="feed.events", subscription=subscription, clientId="etl")
    _send(secured, "/topic/feed.events", 7)
    reader = _reader(secured, "spark", address="feed.events", subscription=subscription, clientId="etl")
    assert _read_all(reader) == 7


def test_stream_without_credentials_or_consume_is_refused_naming_the_reason(
        secured: BrokerProcess) -> None:
    from pagemq.spark.options import PagemqOptionError

    with pytest.raises(PagemqOptionError, match=r"pagemq option 'user'.*HTTP 401"):
        _reader(secured, None, queue="feed.orders")
    with pytest.raises(PagemqOptionError, match=r"pagemq option 'user'.*HTTP 401.*user and password"):
        _reader(secured, "spark", queue="feed.orders", password="wrong")
    # `spark` may consume feed.#, not jobs; `consumer` may consume jobs but not feed.#
    with pytest.raises(PagemqOptionError,
                       match=r"pagemq option 'user'.*User spark lacks permission consume on address jobs"):
        _reader(secured, "spark", queue="jobs")
    with pytest.raises(PagemqOptionError,
                       match=r"User consumer lacks permission consume on address feed\.events"):
        _reader(secured, "consumer", address="feed.events", subscription=unique("sub"))


def test_sink_refused_login_fails_the_save_on_the_driver_naming_user(secured: BrokerProcess) -> None:
    """The sink connects once at save() / start(): a refused login fails there, naming the
    option. (Before: every task failed with `broker ERROR: Authentication failed`.)"""
    from pyspark.sql.types import StringType, StructField, StructType

    from pagemq.spark.options import PagemqOptionError
    from pagemq.spark.sink import SinkOptions, probe

    schema = StructType([StructField("body", StringType())])
    given = {"url": f"stomp://127.0.0.1:{secured.stomp_port}", "address": "feed.orders"}
    with pytest.raises(PagemqOptionError, match=r"pagemq option 'user'.*Authentication failed"):
        probe(SinkOptions.parse({**given, "user": "alice", "password": "wrong"}, schema))
    probe(SinkOptions.parse({**given, "user": "alice", "password": password("alice")}, schema))


def test_stream_of_a_user_who_may_view_but_not_consume_fails_at_load(secured: BrokerProcess) -> None:
    """A stream acknowledges what it reads. (Before: `view` alone passed load() and start(),
    ran a first batch into the sink, and the query died at its first commit.) Helper 41."""
    from pagemq.spark.options import PagemqOptionError

    _send(secured, "/queue/jobs", 3)
    with pytest.raises(PagemqOptionError,
                       match=r"pagemq option 'user'.*User grafana lacks permission consume on address jobs"):
        _reader(secured, "grafana", load=True, queue="jobs")
    status, body = admin_get(secured, "/api/queues/jobs")
    assert status == 200 and body["messages"] == 3, body


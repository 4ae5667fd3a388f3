"""The streaming source: `spark.readStream.format("pagemq")` over a queue of one or more
brokers, through their stream endpoints (`/api/streams/...`, pagemq/integrations/
stream_api.py).

Offsets are per broker: `{"<url>": <message id>}` (keys sorted, ids as JSON integers, so
equal offsets are equal strings, which is how Spark compares them). A micro-batch is, per
broker, the range `(start, end]` of the queue's message ids; it is read without consuming it
(in partitions of about `partitionSize` messages, several per broker when it is large) and
acknowledged once Spark has committed the batch: in `commit(end)`, and also when
`latestOffset` is next called with that offset as its start (Spark calls `commit` lazily:
never for the last batch before a stop). So a batch Spark re-runs after a crash reads the
same messages again, and a message is acknowledged only after its batch's output was
committed. docs/spark.md has the options and the guarantees.

The driver-side calls (`initialOffset`, `latestOffset`, `partitions`, `commit`) and the
executors' `read` talk JSON and Arrow IPC over HTTP with the standard library: nothing is
kept between calls but the options and the last latest offsets (for progress reports).
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pagemq.spark import range_parts
from pagemq.spark.options import MAX_TIMEOUT, PagemqOptionError, check_known, flag, number, required, text
from pagemq.spark.options import selector as option_selector
from pagemq.spark.schema import ARROW_SCHEMA

__all__ = ["BrokerStreamError", "RangePartition", "StreamOptions", "StreamReader", "is_stream_read"]

log = logging.getLogger("pagemq.spark")

Offset = dict[str, int]

STREAM_OPTIONS = ("url", "queue", "address", "subscription", "clientId", "startingOffsets",
                  "maxMessagesPerTrigger", "maxOffsetsPerTrigger", "selector", "includeHeaders",
                  "failOnDataLoss", "partitionSize", "readerName", "timeout", "user", "password")


class BrokerStreamError(RuntimeError):
    """A broker answered a stream request with an error, or could not be reached."""


def is_stream_read(options: Mapping[str, str]) -> bool:
    """A read with a broker `url` and no data directory `path` is a stream of a live broker."""
    return text(options, "path") is None and text(options, "url") is not None


def require_location(options: Mapping[str, str]) -> None:
    """A read names where its messages are: `url` (a stream of a live broker) or `path` (a
    data directory's page files); load() cannot tell a stream from a batch read, so the
    error names both."""
    if text(options, "path") is None and text(options, "url") is None:
        raise PagemqOptionError("path", "required to read page files (the broker's data directory); "
                                        "pagemq option 'url': required instead to stream from a live "
                                        "broker (its HTTP address, e.g. http://127.0.0.1:8161)")


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """A streaming read's options, checked on the driver (docs/spark.md has each)."""

    urls: tuple[str, ...]
    queue: str | None
    address: str | None
    subscription: str | None
    client_id: str
    starting: str | Offset
    max_messages: int | None
    selector: str | None
    fail_on_data_loss: bool
    include_headers: bool
    reader: str
    partition_size: int
    timeout: float
    # HTTP Basic credentials (a secured broker), as the sink's CONNECT login / passcode
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        """PagemqOptionError naming the option for anything missing or wrong (no I/O)."""
        check_known(options, STREAM_OPTIONS, "stream read")
        urls = tuple(_broker_url(part) for part in required(
            options, "url", "the brokers' HTTP endpoints, http://HOST:PORT[,http://...]").split(","))
        if len(set(urls)) != len(urls):
            raise PagemqOptionError("url", "a broker is listed twice")
        queue, address = text(options, "queue"), text(options, "address")
        subscription = text(options, "subscription")
        if queue is not None and (address is not None or subscription is not None):
            raise PagemqOptionError("queue", "give either queue, or address and subscription, not both")
        if queue is None:
            if address is None:
                raise PagemqOptionError("queue", "required (the queue to stream), or address and "
                                                 "subscription")
            if subscription is None:
                raise PagemqOptionError("subscription", "required with address (the durable subscription "
                                                        "that holds the stream's copy of the address)")
        selector = option_selector(options)
        limit = _max_messages(options)
        return cls(urls, queue, address, subscription, text(options, "clientId") or "spark",
                   _starting(options, urls), limit, selector, flag(options, "failOnDataLoss", True),
                   flag(options, "includeHeaders", True), text(options, "readerName") or "spark",
                   int(number(options, "partitionSize", 50_000, minimum=1, integer=True)),
                   number(options, "timeout", 60.0, minimum=0.001, maximum=MAX_TIMEOUT),
                   text(options, "user"), options.get("password"))

    @property
    def auth(self) -> str | None:
        """The `Authorization` header for the broker's HTTP API; None without `user`."""
        if self.user is None:
            return None
        token = base64.b64encode(f"{self.user}:{self.password or ''}".encode()).decode()
        return f"Basic {token}"

    @property
    def queue_name(self) -> str:
        return self.queue if self.queue is not None else f"{self.client_id}.{self.subscription}"


def _broker_url(part: str) -> str:
    url = part.strip().rstrip("/")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise PagemqOptionError("url", f"{part.strip()!r} is not a broker's HTTP endpoint (http://HOST:PORT)")
    if parsed.path or parsed.query or parsed.fragment:
        raise PagemqOptionError("url", f"{part.strip()!r}: give the broker's HTTP endpoint alone, "
                                       "http://HOST:PORT, without a path (the reader adds /api/...)")
    return url


def _max_messages(options: Mapping[str, str]) -> int | None:
    chosen = None
    for name in ("maxMessagesPerTrigger", "maxOffsetsPerTrigger"):
        if text(options, name) is not None:
            if chosen is not None:
                raise PagemqOptionError(name, "give maxMessagesPerTrigger or maxOffsetsPerTrigger, not both")
            chosen = int(number(options, name, 0, minimum=1, integer=True))
    return chosen


def _starting(options: Mapping[str, str], urls: tuple[str, ...]) -> str | Offset:
    value = (text(options, "startingOffsets") or "earliest").strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    try:
        given = json.loads(value)
    except json.JSONDecodeError:
        given = None
    if (not isinstance(given, dict) or set(given) - set(urls)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in given.values())):
        raise PagemqOptionError("startingOffsets", f"earliest, latest, or a JSON object of offsets by broker "
                                                   f"url (non-negative integers), not {value!r}")
    return {url: int(given.get(url, 0)) for url in sorted(urls)}


# ----- talking to a broker -----------------------------------------------------------------------


def _request(url: str, path: str, timeout: float, body: dict[str, Any] | None = None,
             params: Mapping[str, object] | None = None, auth: str | None = None) -> Any:
    """The response of one stream request (a file-like object); BrokerStreamError on an error.
    `auth`: the `Authorization` header (StreamOptions.auth)."""
    given = {key: value for key, value in (params or {}).items() if value is not None}
    query = "?" + urllib.parse.urlencode(given) if given else ""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if auth is not None:
        headers["Authorization"] = auth
    request = urllib.request.Request(f"{url}{path}{query}", data=data, method="POST" if data else "GET",
                                     headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        with exc:
            try:
                problem = json.loads(exc.read()).get("error", "")
            except (ValueError, AttributeError):
                problem = exc.reason
        raise BrokerStreamError(f"broker {url}: {path}: HTTP {exc.code}: {problem}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BrokerStreamError(f"broker {url} cannot be reached: {reason}") from None


def _patient(url: str, path: str, timeout: float, body: dict[str, Any] | None = None,
             params: Mapping[str, object] | None = None, auth: str | None = None) -> Any:
    """`_request`, asked again while the broker cannot be reached (restarting), until
    `timeout` has passed."""
    deadline = time.monotonic() + timeout
    pause = 0.1
    while True:
        try:
            return _request(url, path, timeout, body, params, auth)
        except BrokerStreamError as exc:
            left = deadline - time.monotonic()
            if "cannot be reached" not in str(exc) or left <= 0:
                raise
            pause = min(pause, left)  # the last try comes at the deadline, not a pause before it
            log.info("pagemq stream: %s; asking again in %.1fs", exc, pause)
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def _json(url: str, path: str, timeout: float, body: dict[str, Any] | None = None,
          params: Mapping[str, object] | None = None, *, retry: bool = True, auth: str | None = None) -> Any:
    """The JSON answer (see `_patient`; not `retry`: one attempt)."""
    ask = _patient if retry else _request
    with ask(url, path, timeout, body, params, auth) as response:
        return json.loads(response.read())


def _quoted(queue: str) -> str:
    return urllib.parse.quote(queue, safe="")


def prepare(options: StreamOptions, *, create: bool, wait: bool = True) -> None:
    """Check every broker is reachable and has the queue (with `create`, make the durable
    subscription queue where it is missing: at load(), and again at start() for a broker
    that lost it meanwhile). PagemqOptionError naming the option. At load() (not `wait`) an
    unreachable broker fails at once; at start() one restarting is waited for, up to
    `timeout`, as every later call of the query waits."""
    for url in options.urls:
        try:
            if options.queue is None and create:
                _json(url, "/api/streams/subscriptions", options.timeout, {
                    "address": options.address, "subscription": options.subscription,
                    "client_id": options.client_id, "selector": options.selector}, retry=wait,
                    auth=options.auth)
            else:  # the reader's own offsets: all a reader with `consume` may ask (security)
                figures = _json(url, f"/api/streams/{_quoted(options.queue_name)}/offsets",
                                options.timeout, params={"reader": options.reader}, retry=wait,
                                auth=options.auth)
                if options.queue is None:
                    _check_subscription(options, url, figures)
        except BrokerStreamError as exc:
            message = str(exc)
            if "cannot be reached" in message:
                raise PagemqOptionError("url", message) from None
            if options.queue is None and not create and ("HTTP 404" in message or "HTTP 403" in message):
                # Not made yet (the caller makes it next); or its queue name is checked as an
                # address of its own, which a user with `consume` on the subscribed address
                # alone may not read: making it asks about the address itself.
                continue
            if "HTTP 401" in message or "HTTP 403" in message:
                raise PagemqOptionError("user", f"{message} (the user and password options give the "
                                                "broker's credentials)") from None
            if options.queue is None:
                raise PagemqOptionError("subscription", message) from None
            raise PagemqOptionError("queue", f"no queue {options.queue!r}: {message}") from None
        _may_commit(options, url, wait)


def _may_commit(options: StreamOptions, url: str, wait: bool) -> None:
    """The user may acknowledge what the query reads: a commit to offset 0 (a no-op: it
    acknowledges nothing, and an older offset than the reader's is ignored) is refused
    exactly as the batches' commits would be. Else a user with the broker-wide `view` alone
    read, planned and ran a first batch, and the query failed at its first commit."""
    try:
        _json(url, f"/api/streams/{_quoted(options.queue_name)}/commit", options.timeout,
              {"reader": options.reader, "offset": 0, "selector": options.selector}, retry=wait,
              auth=options.auth)
    except BrokerStreamError as exc:
        message = str(exc)
        if "HTTP 401" in message or "HTTP 403" in message:
            raise PagemqOptionError("user", f"{message} (a stream acknowledges what it read: its user needs "
                                            "consume on the address, or manage)") from None
        if "cannot be reached" in message:
            raise PagemqOptionError("url", message) from None
        raise PagemqOptionError("subscription" if options.queue is None else "queue", message) from None


def latest_offsets(options: StreamOptions) -> Offset:
    """`startingOffsets=latest`: each broker's newest message id in the queue now."""
    latest: Offset = {}
    for url in sorted(options.urls):
        figures = _json(url, f"/api/streams/{_quoted(options.queue_name)}/offsets", options.timeout,
                        params={"reader": options.reader}, auth=options.auth)
        latest[url] = int(figures["latest"])
    return latest


def _check_subscription(options: StreamOptions, url: str, figures: dict[str, Any]) -> None:
    """At load(): a subscription queue made earlier on another address, or with another
    selector, is refused here, naming the option (start() would refuse it too, but PySpark
    buries that error)."""
    if figures.get("address") != options.address:
        raise PagemqOptionError(
            "subscription", f"queue {options.queue_name!r} on {url} belongs to address "
                            f"{figures.get('address')!r}, not {options.address!r}: use another "
                            "subscription name (or clientId)")
    existing = figures.get("filter")
    if existing != options.selector:
        def said(selector: str | None) -> str:
            return "no selector" if selector is None else f"selector {selector!r}"

        raise PagemqOptionError(
            "selector", f"subscription queue {options.queue_name!r} on {url} exists with "
                        f"{said(existing)}, but the query gives {said(options.selector)}: a "
                        "subscription keeps its selector; use another subscription name, or "
                        "remove the queue first")


# ----- the reader ------------------------------------------------------------------------------


class RangePartition(InputPartition):
    """One slice `(after, upto]` of one broker's range; `from_page`: where its paged part begins."""

    def __init__(self, url: str, after: int, upto: int, from_page: int) -> None:
        super().__init__((url, after, upto))
        self.url, self.after, self.upto, self.from_page = url, after, upto, from_page


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader Spark drives (see the module docstring)."""

    def __init__(self, options: StreamOptions, latest_at_load: Offset | None = None) -> None:
        self.options = options
        # `startingOffsets=latest` as load() found it (source.PagemqDataSource.schema)
        self._latest_at_load = latest_at_load
        self._latest: Offset | None = None
        # slices of the ranges latestOffset planned, by (url, start, end): found by the same
        # scan of the broker that found the end, so partitions() need not ask again
        self._slices: dict[tuple[str, int, int], list[list[int]]] = {}
        # Trigger.AvailableNow: the latest offsets when the query started; never read past
        self._target: Offset | None = None
        self._turns = 0  # batches planned under a limit: whose turn the limit's remainder is
        self._missing: set[str] = set()  # brokers whose queue is gone, warned of once

    def prepareForTriggerAvailableNow(self) -> None:
        target: Offset = {}
        for url in sorted(self.options.urls):
            figures = self._offsets(url)
            target[url] = int(figures["latest"]) if figures is not None else 0
        self._target = target

    # -- offsets ------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        starting = self.options.starting
        if isinstance(starting, dict):
            return dict(starting)
        if starting == "earliest":
            return {url: 0 for url in sorted(self.options.urls)}
        found = self._latest_at_load or {}
        if all(url in found for url in self.options.urls):
            return {url: found[url] for url in sorted(self.options.urls)}
        return latest_offsets(self.options)  # (a schema given to load(): not asked there)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next batch; acknowledges `start` too (the batch that ended there
        is committed: Spark plans the next batch only after that), while it plans: the
        acknowledgement of a large batch takes the broker a tenth of a second or more, and
        the plan does not depend on it (it reads after `start`)."""
        start_offset = self._checked(start)
        with ThreadPoolExecutor(1, thread_name_prefix="pagemq-ack") as pool:
            acknowledged = pool.submit(self._acknowledge, start_offset)
            end = self._next_end(start_offset, limit)
            acknowledged.result()
        return end

    def _next_end(self, start_offset: Offset, limit: ReadLimit) -> Offset:
        urls = sorted(self.options.urls)
        end: Offset = {}
        latest: Offset = {}
        taken: dict[str, int] = {}
        self._slices.clear()
        if not isinstance(limit, ReadMaxRows):
            if not isinstance(limit, ReadAllAvailable):
                log.warning("pagemq stream: read limit %r not supported: reading all available", limit)
            for url in urls:
                self._plan(url, start_offset[url], None, end, latest, taken)
            self._latest = latest
            return end
        # The batch's limit split between the brokers (who gets the remainder rotates), then
        # what a broker with fewer messages left unused offered to those that filled theirs:
        # the batch never holds more than the limit, and no broker waits while another has more.
        self._turns += 1
        order = urls[self._turns % len(urls):] + urls[:self._turns % len(urls)]
        share, remainder = divmod(limit.max_rows, len(urls))
        shares = {url: share + (1 if index < remainder else 0) for index, url in enumerate(order)}
        for url in urls:
            self._plan(url, start_offset[url], shares[url], end, latest, taken)
        for url in order:
            left = limit.max_rows - sum(taken.values())
            if left <= 0:
                break
            if taken[url] >= shares[url] and end[url] < latest[url]:
                self._plan(url, start_offset[url], taken[url] + left, end, latest, taken)
        self._latest = latest
        return end

    def _plan(self, url: str, after: int, most: int | None, end: Offset, latest: Offset,
              taken: dict[str, int]) -> None:
        """One broker's part of the next batch: at most `most` messages after `after` (None:
        all there are, 0: none), into `end`, `latest` and `taken` (how many it holds)."""
        figures = self._offsets(url, after=after if most != 0 else None, limit=most or None)
        if figures is None:
            end[url] = latest[url] = after
            taken[url] = 0
            return
        latest[url] = max(after, int(figures["latest"]))
        if most == 0:
            end[url] = after
            taken[url] = 0
            return
        end[url] = max(after, int(figures["end"]))
        if self._target is not None:
            end[url] = max(after, min(end[url], self._target.get(url, after)))
        taken[url] = max(0, int(figures.get("messages", 0)))
        if "splits" in figures:
            self._slices[(url, after, end[url])] = figures["splits"]

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def _offsets(self, url: str, *, after: int | None = None, limit: int | None = None) -> Any:
        options = self.options
        try:
            figures = _json(url, f"/api/streams/{_quoted(options.queue_name)}/offsets", options.timeout,
                            params={"reader": options.reader, "after": after, "max": limit,
                                    "size": options.partition_size if limit is not None else None},
                            auth=options.auth)
        except BrokerStreamError as exc:
            return self._lost(url, exc)
        self._found(url)
        return figures

    def _lost(self, url: str, exc: BrokerStreamError) -> None:
        """The queue is gone from a broker (deleted, unsubscribed): messages may be lost.
        Said once (not at every trigger) until the queue is back."""
        if "HTTP 404" not in str(exc):
            raise exc
        if self.options.fail_on_data_loss:
            raise BrokerStreamError(f"{exc} (the queue is gone: with failOnDataLoss=true the query "
                                    "fails; false reads nothing from that broker until it is back)") from None
        if url not in self._missing:
            self._missing.add(url)
            log.warning("pagemq stream: %s; reading nothing from there until it is back "
                        "(failOnDataLoss=false)", exc)
        return None

    def _found(self, url: str) -> None:
        if url in self._missing:
            self._missing.discard(url)
            log.warning("pagemq stream: queue %r is back on broker %s; reading it again",
                        self.options.queue_name, url)

    def _checked(self, offset: dict[str, Any]) -> Offset:
        """An offset from Spark's checkpoint, per broker of the `url` option (a broker added
        since starts at the beginning of its queue)."""
        checked: Offset = {}
        for url in self.options.urls:
            value = offset.get(url, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PagemqOptionError("startingOffsets", f"offset {offset!r} from the checkpoint is not "
                                                           "a pagemq offset (broker url -> message id)")
            checked[url] = value
        return checked

    # -- planning and reading -------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        options = self.options
        first, last = self._checked(start), self._checked(end)
        parts: list[InputPartition] = []
        for url in sorted(options.urls):
            after, upto = first[url], last[url]
            if upto <= after:
                continue
            planned = self._slices.get((url, after, upto))
            if planned is not None:
                parts += [RangePartition(url, low, high, page) for low, high, page in planned]
                continue
            try:
                plan = _json(url, f"/api/streams/{_quoted(options.queue_name)}/splits", options.timeout,
                             params={"after": after, "upto": upto, "size": options.partition_size},
                             auth=options.auth)
            except BrokerStreamError as exc:
                self._lost(url, exc)
                continue
            parts += [RangePartition(url, low, high, page) for low, high, page in plan["splits"]]
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the slice's messages as record batches of the read schema."""
        assert isinstance(partition, RangePartition)
        options = self.options
        params = {"reader": options.reader, "after": partition.after, "upto": partition.upto,
                  "from_page": partition.from_page, "selector": options.selector,
                  "headers": "true" if options.include_headers else "false", "pages": "raw"}
        path = f"/api/streams/{_quoted(options.queue_name)}/read"
        deadline = time.monotonic() + options.timeout
        last_cut = params["after"]
        while True:
            try:
                response = _patient(partition.url, path, options.timeout, params=params, auth=options.auth)
            except BrokerStreamError as exc:
                self._lost(partition.url, exc)
                return
            try:
                with response:
                    for batch in self._batches(partition.url, response):
                        yield batch
                        if batch.num_rows:  # a cut answer is asked again after the last row given
                            params["after"] = batch.column("seq")[-1].as_py()
                return
            except range_parts.SpanDamaged as exc:
                # A page span as it is on disk holds damage: the rest comes as Arrow, which
                # the broker builds from verified frames, reading past the damage.
                log.warning("pagemq stream: %s from %s; reading the rest of (%s, %s] as Arrow",
                            exc, partition.url, params["after"], partition.upto)
                params["pages"] = "arrow"
            except (http.client.HTTPException, OSError, EOFError, pa.ArrowInvalid) as exc:
                # The answer was cut (a broker killed or restarting mid-read): the rest of
                # the slice is asked for again, after the rows already given to Spark (each
                # cut that came after progress gets a `timeout` of its own).
                if params["after"] != last_cut:
                    last_cut, deadline = params["after"], time.monotonic() + options.timeout
                if time.monotonic() > deadline:
                    raise BrokerStreamError(f"broker {partition.url}: the read of ({params['after']}, "
                                            f"{partition.upto}] was cut and not served again within "
                                            f"timeout: {exc!r}") from None
                log.info("pagemq stream: read from %s cut after %s (%r); asking again",
                         partition.url, params["after"], exc)
                time.sleep(0.2)

    def _batches(self, url: str, response: Any) -> Iterator[pa.RecordBatch]:
        """A read's record batches: of parts, page spans decoded here (`pages=raw`, which a
        broker that predates it ignores), or of one Arrow IPC stream."""
        if response.headers.get("Content-Type", "").startswith(range_parts.CONTENT_TYPE):
            try:
                yield from range_parts.read_parts(response, self.options.include_headers)
            except range_parts.SpanDamaged:
                raise
            except range_parts.RangeDecodeError as exc:
                raise BrokerStreamError(f"broker {url}: {exc}") from None
            return
        stream = pa.ipc.open_stream(response)
        if stream.schema != ARROW_SCHEMA:
            raise BrokerStreamError(f"broker {url} sent rows of another schema: {stream.schema}")
        yield from stream

    # -- acknowledging ----------------------------------------------------------------------------

    def commit(self, end: dict[str, Any]) -> None:
        self._acknowledge(self._checked(end))

    def _acknowledge(self, offset: Offset) -> None:
        options = self.options
        for url, value in sorted(offset.items()):
            if value <= 0:
                continue
            try:
                _json(url, f"/api/streams/{_quoted(options.queue_name)}/commit", options.timeout,
                      {"reader": options.reader, "offset": value, "selector": options.selector},
                      auth=options.auth)
            except BrokerStreamError as exc:
                self._lost(url, exc)

    def stop(self) -> None:
        log.info("pagemq stream of %r stopped", self.options.queue_name)

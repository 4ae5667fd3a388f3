"""`/metrics`: the broker's figures as Prometheus metrics, through `prometheus_client`.

`BrokerCollector` is a custom collector over the broker's management views (`core/views.py`,
via `Broker.address_figures` / `Broker.queue_info`), the journal's stats, the event-loop lag
figures, the STOMP connection counts and the delivery-latency histogram. It yields
`prometheus_client` metric families, so types, HELP text, the `_total` suffix of counters,
and both exposition formats are the library's; a registry made by `metrics_registry` adds
the library's process, platform and garbage-collector metrics
(`process_resident_memory_bytes`, `process_cpu_seconds_total`, `python_info`, ...).

Why part of it is rendered here: with 10,000 queues the per-queue and per-address families
hold ~160,000 samples, and `prometheus_client` builds a namedtuple and a label dict per sample
and formats each label pair on its own: about a second on the build machine, where the
target is 200 ms (benchmarks/metrics_bench.py). Those families (`RowsFamily`) keep their
samples as rows (label values, value) and `render` writes their lines itself, in exactly the
library's format (same HELP/TYPE lines, label order, value formatting; the tests compare the
two byte for byte). Every other family goes through the library's own encoder. A
`RowsFamily` used through the ordinary collector API (`collect()`) carries real samples.

A scrape reads the figures on the event loop (the views are loop-only; `collect`), then writes
the text in a worker thread (`write`), so the loop is held only for the reading; nothing is
kept up to date for it between scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from pagemq.integrations.limit_metrics import PAGED_BYTES, limit_families, paged_bytes

if TYPE_CHECKING:
    from pagemq.core.broker import Broker

__all__ = [
    "ADDRESS_FAMILIES",
    "QUEUE_FAMILIES",
    "BrokerCollector",
    "ConnectionFigures",
    "LabelRows",
    "RowsFamily",
    "collect",
    "metrics_registry",
    "process_collectors",
    "render",
    "write",
]

OPENMETRICS = "application/openmetrics-text"
_GO_EXPONENT = 1_000_000  # from here on Go (and the library) write 1e+06
_BIG = 10**15  # below this a float's repr is the integer's digits and ".0"

# (connections open now, opened since start, closed since start), from the STOMP acceptor
ConnectionFigures = Callable[[], tuple[int, int, int]]
LoopFigures = Callable[[float | None], dict[str, object]]


@dataclass(frozen=True)
class FamilySpec:
    """One metric: the view field it shows, its name (counters without `_total`), kind, help."""

    field: str
    name: str
    kind: str  # "gauge" | "counter"
    help: str


ADDRESS_FAMILIES = (
    FamilySpec("messages", "pagemq_address_messages", "gauge",
               "Messages held for all queues of the address (one per copy), paged ones included"),
    FamilySpec("messages_in_memory", "pagemq_address_messages_in_memory", "gauge",
               "Messages of the address held in memory"),
    FamilySpec("messages_paged", "pagemq_address_messages_paged", "gauge",
               "Messages of the address in page files"),
    FamilySpec("bytes_in_memory", "pagemq_address_memory_bytes", "gauge",
               "Bytes the address holds in memory (estimated object size)"),
    FamilySpec("page_files", "pagemq_address_page_files", "gauge", "Page files of the address on disk"),
    FamilySpec("paging", "pagemq_address_paging", "gauge", "1 while the address is in page mode"),
    FamilySpec("dropped_messages", "pagemq_address_dropped_messages", "counter",
               "Messages dropped by the address-full or page-full policy since start"),
)
QUEUE_FAMILIES = (
    FamilySpec("messages", "pagemq_queue_messages", "gauge",
               "Messages not yet acknowledged, delivering and paged ones included"),
    FamilySpec("messages_in_memory", "pagemq_queue_messages_in_memory", "gauge",
               "Messages of the queue held in memory"),
    FamilySpec("messages_paged", "pagemq_queue_messages_paged", "gauge",
               "Messages of the queue in page files"),
    FamilySpec("messages_delivering", "pagemq_queue_messages_delivering", "gauge",
               "Messages delivered and not yet acknowledged"),
    FamilySpec("consumers", "pagemq_queue_consumers", "gauge", "Consumers attached to the queue"),
    FamilySpec("messages_added", "pagemq_queue_messages_added", "counter",
               "Messages added to the queue since start"),
    FamilySpec("messages_acknowledged", "pagemq_queue_messages_acknowledged", "counter",
               "Messages acknowledged from the queue since start"),
    FamilySpec("messages_expired", "pagemq_queue_messages_expired", "counter",
               "Messages of the queue expired since start"),
    FamilySpec("messages_killed", "pagemq_queue_messages_killed", "counter",
               "Messages of the queue moved to the dead-letter address since start"),
)
# The journal's stats (`Journal.stats`): which are counters; the rest are gauges.
STORE_FAMILIES: dict[str, tuple[str, str, str]] = {
    "files": ("pagemq_store_files", "gauge", "Journal data files"),
    "bytes": ("pagemq_store_bytes", "gauge", "Bytes of the journal data files"),
    "live_records": ("pagemq_store_live_records", "gauge", "Journal records still live"),
    "pending_bytes": ("pagemq_store_pending_bytes", "gauge",
                      "Bytes buffered for the journal writer, not yet written"),
    "records_written": ("pagemq_store_records_written", "counter", "Journal records written since start"),
    "flushes": ("pagemq_store_flushes", "counter", "Journal fsyncs since start"),
    "batches": ("pagemq_store_batches", "counter", "Journal write batches since start"),
    "compactions": ("pagemq_store_compactions", "counter", "Journal files compacted since start"),
    "files_deleted": ("pagemq_store_files_deleted", "counter", "Spent journal files deleted since start"),
    "files_archived": ("pagemq_store_files_archived", "counter",
                       "Spent journal files archived since start"),
}


class LabelRows:
    """The label values of a set of rows (one per queue, say), shared by every family over
    them, so each row's label text is escaped and written once per scrape, not once per family."""

    def __init__(self, names: Sequence[str], values: list[tuple[str, ...]],
                 previous: LabelRows | None = None) -> None:
        """`values` in sorted-`names` order; `previous`: the last scrape's rows, whose text is
        reused when the rows are the same (queues come and go far less often than scrapes)."""
        self.names = tuple(sorted(names))
        self.values = values
        self._text: list[str] | None = None
        if previous is not None and previous._text is not None and previous.values == values:
            self._text = previous._text

    def text(self) -> list[str]:
        """`{name="value",...}` per row, escaped as the library does."""
        if self._text is None:
            names = self.names
            if len(names) == 1:
                (n,) = names
                self._text = [f'{{{n}="{_escape(v)}"}}' for (v,) in self.values]
            elif len(names) == 2:
                n, m = names
                self._text = [f'{{{n}="{_escape(v)}",{m}="{_escape(w)}"}}' for v, w in self.values]
            else:
                self._text = [
                    "{" + ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)) + "}"
                    for values in self.values
                ]
        return self._text


class RowsFamily(Metric):
    """A labelled gauge or counter kept as one value per row of a `LabelRows`.

    `render` writes its lines directly; `with_samples()` gives the ordinary family (for
    `collect()` and the library's encoders).
    """

    def __init__(self, name: str, documentation: str, kind: str, rows: LabelRows) -> None:
        super().__init__(name, documentation, kind)
        self.rows = rows
        self.values: list[float] = []

    def with_samples(self) -> RowsFamily:
        sample_name = self.name + "_total" if self.type == "counter" else self.name
        names = self.rows.names
        self.samples = [
            Sample(sample_name, dict(zip(names, labels, strict=True)), float(value))
            for labels, value in zip(self.rows.values, self.values, strict=True)
        ]
        return self


class BrokerCollector(Collector):
    """The broker's metrics, read from its views at each scrape (loop-only)."""

    def __init__(self, broker: Broker, stats: Callable[[], dict[str, int]],
                 loop: LoopFigures | None = None, connections: ConnectionFigures | None = None) -> None:
        self.broker = broker
        self.stats = stats
        self.loop = loop
        self.connections = connections
        self._address_rows: LabelRows | None = None
        self._queue_rows: LabelRows | None = None

    def collect(self) -> Iterator[Metric]:
        for family in self.families():
            yield family.with_samples() if isinstance(family, RowsFamily) else family

    def families(self) -> Iterator[Metric]:
        """The families, the large labelled ones as `RowsFamily` without samples."""
        yield from self._address_families()
        yield from self._queue_families()
        yield from self._broker_families()
        yield from limit_families(self.broker)
        yield self._latency()
        if self.loop is not None:
            yield from self._loop_families(self.loop(None))
        if self.connections is not None:
            yield from self._connection_families(*self.connections())

    def _address_families(self) -> list[RowsFamily]:
        broker = self.broker
        names = sorted(broker.addresses)
        rows = self._address_rows = LabelRows(("address",), [(name,) for name in names], self._address_rows)
        figures = [broker.address_figures(name) for name in names]
        paged = RowsFamily(PAGED_BYTES[0], PAGED_BYTES[1], "gauge", rows)
        paged.values = paged_bytes(broker, names)
        return [*(_column(spec, rows, figures) for spec in ADDRESS_FAMILIES), paged]

    def _queue_families(self) -> list[RowsFamily]:
        broker = self.broker
        infos = [broker.queue_info(name) for name in sorted(broker.queues)]
        # label values in sorted label-name order: address, queue
        labels: list[tuple[str, ...]] = [(str(info["address"]), str(info["name"])) for info in infos]
        rows = self._queue_rows = LabelRows(("queue", "address"), labels, self._queue_rows)
        return [_column(spec, rows, infos) for spec in QUEUE_FAMILIES]

    def _broker_families(self) -> Iterator[Metric]:
        broker = self.broker
        memory = broker.memory
        yield InfoMetricFamily("pagemq_build", "The pagemq version running", value={"version": _version()})
        yield GaugeMetricFamily("pagemq_addresses", "Addresses defined", value=len(broker.addresses))
        yield GaugeMetricFamily("pagemq_queues", "Queues defined", value=len(broker.queues))
        yield GaugeMetricFamily("pagemq_memory_used_bytes",
                                "Bytes of messages the broker holds in memory (global-max-size counts these)",
                                value=memory.used_bytes)
        yield GaugeMetricFamily("pagemq_memory_used_messages", "Messages the broker holds in memory",
                                value=memory.used_messages)
        if memory.max_bytes >= 0:
            yield GaugeMetricFamily("pagemq_memory_limit_bytes", "global-max-size", value=memory.max_bytes)
        if memory.max_messages >= 0:
            yield GaugeMetricFamily("pagemq_memory_limit_messages", "global-max-messages",
                                    value=memory.max_messages)
        for key, value in sorted(self.stats().items()):
            name, kind, help_text = STORE_FAMILIES.get(
                key, (f"pagemq_store_{key}", "gauge", f"Journal figure {key}"))
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            yield family(name, help_text, value=value)

    def _latency(self) -> HistogramMetricFamily:
        buckets, _count, total = self.broker.delivery_latency.snapshot()
        return HistogramMetricFamily(
            "pagemq_delivery_latency_seconds",
            "Time from a message's send to its first delivery to a consumer",
            buckets=[(_go(bound), count) for bound, count in buckets], sum_value=total,
        )

    @staticmethod
    def _loop_families(figures: dict[str, object]) -> Iterator[Metric]:
        lag_ms, stalls, busy = figures["lag_max_ms"], figures["stalls"], figures["busy_stalls"]
        assert isinstance(lag_ms, int | float) and isinstance(stalls, int) and isinstance(busy, int)
        yield GaugeMetricFamily("pagemq_event_loop_lag_max_seconds",
                                "Most the event loop ran late since start", value=lag_ms / 1000)
        yield CounterMetricFamily("pagemq_event_loop_stalls",
                                  "Times the event loop ran 50 ms or more late", value=stalls)
        yield CounterMetricFamily("pagemq_event_loop_busy_stalls",
                                  "Stalls mostly spent running on the loop thread itself",
                                  value=busy)

    @staticmethod
    def _connection_families(open_now: int, opened: int, closed: int) -> Iterator[Metric]:
        yield GaugeMetricFamily("pagemq_connections", "STOMP connections open now", value=open_now)
        yield CounterMetricFamily("pagemq_connections_opened", "STOMP connections accepted since start",
                                  value=opened)
        yield CounterMetricFamily("pagemq_connections_closed", "STOMP connections closed since start",
                                  value=closed)


def _column(spec: FamilySpec, rows: LabelRows, views: Sequence[Mapping[str, object]]) -> RowsFamily:
    """One family: `spec.field` of each view (a bool as 0/1), over the shared label rows."""
    family = RowsFamily(spec.name, spec.help, spec.kind, rows)
    field = spec.field
    family.values = [int(view[field]) for view in views]  # type: ignore[call-overload]
    return family


def _version() -> str:
    try:
        return version("pagemq")
    except PackageNotFoundError:
        return "unknown"


def process_collectors() -> list[Collector]:
    """The library's process (RSS, CPU, open files), platform (`python_info`) and garbage
    collector metrics, not registered anywhere (no global state)."""
    # GCCollector insists on registering itself somewhere: a registry of its own, thrown away.
    return [ProcessCollector(registry=None), PlatformCollector(registry=None),
            GCCollector(registry=CollectorRegistry(auto_describe=False))]


def metrics_registry(collector: BrokerCollector) -> CollectorRegistry:
    """A registry of the broker's collector and `process_collectors()`, for the library's
    own encoders (`generate_latest`); `/metrics` renders the same with `render`."""
    registry = CollectorRegistry(auto_describe=False)
    for source in (collector, *process_collectors()):
        registry.register(source)
    return registry


class _One:
    """One family as a 'registry' for the library's encoders."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return (self.metric,)


def render(collectors: Sequence[Collector], accept: str | None) -> tuple[bytes, str]:
    """(body, content type) of a scrape, in the format the `Accept` header asks for:
    OpenMetrics when it names `application/openmetrics-text`, else Prometheus text 0.0.4."""
    return write(collect(collectors), accept)


def collect(collectors: Sequence[Collector]) -> list[Metric]:
    """Every family's figures, read now (on the loop: the views are loop-only)."""
    return [family for source in collectors
            for family in (source.families() if isinstance(source, BrokerCollector) else source.collect())]


def write(families: Sequence[Metric], accept: str | None) -> tuple[bytes, str]:
    """The text of families already collected: touches no broker state, so it may run in a
    worker thread while the loop serves clients (`/metrics` does that)."""
    encoder, content_type = choose_encoder(accept or "")
    openmetrics = content_type.startswith(OPENMETRICS)
    parts: list[str] = []
    for family in families:
        if isinstance(family, RowsFamily):
            parts.append(_rows_text(family, openmetrics))
        else:
            text = encoder(_One(family)).decode("utf-8")
            parts.append(text.removesuffix("# EOF\n"))
    if openmetrics:
        parts.append("# EOF\n")
    return "".join(parts).encode("utf-8"), content_type


def _rows_text(family: RowsFamily, openmetrics: bool) -> str:
    """The library's lines for `family`, written without a Sample per row."""
    sample_name = family.name + "_total" if family.type == "counter" else family.name
    help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    heading = family.name if openmetrics else sample_name
    lines = [f"# HELP {heading} {help_text}", f"# TYPE {heading} {family.type}"]
    values = family.values
    labels = family.rows.text()
    lines += [
        # `floatToGoString`, with a shortcut for the common case: a small whole number
        f"{sample_name}{label} {value}.0" if type(value) is int and -_BIG < value < _GO_EXPONENT
        else f"{sample_name}{label} {_go(value)}"
        for label, value in zip(labels, values, strict=True)
    ]
    lines.append("")
    return "\n".join(lines)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _go(value: float) -> str:
    """The library's number format (Go's: `1e+06` style from a million up)."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]

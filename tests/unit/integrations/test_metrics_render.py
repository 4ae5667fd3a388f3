"""The /metrics renderer against prometheus_client's own encoders, on a broker in memory.

`render` writes the large per-queue and per-address families itself (for speed); these
tests hold it to the library's output byte for byte, in both formats, with names that need
escaping, and check the delivery-latency histogram counts deliveries into the right bucket.
"""

from __future__ import annotations

import time

from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from pagemq.core.broker import Broker
from pagemq.core.consumer import AckMode
from pagemq.core.delivery_latency import DeliveryLatency
from pagemq.core.settings import AddressSettingsRepository
from pagemq.integrations.metrics import BrokerCollector, render

ODD_NAMES = ["plain", 'with"quote', "back\\slash", "new\nline", "é-unicode"]


class Sink:
    def __init__(self) -> None:
        self.delivered = 0

    def deliver(self, consumer: object, ref: object, tag: int) -> None:
        self.delivered += 1


def _broker() -> Broker:
    broker = Broker(AddressSettingsRepository())
    broker.recover()
    for name in ODD_NAMES:
        address = broker.ensure_address(name, "anycast", auto=False)
        broker.ensure_queue(address, name, "anycast")
    for n in range(3):
        broker.send("plain", "anycast", {"n": str(n)}, b"x" * 10, persistent=False)
    return broker


def _collector(broker: Broker) -> BrokerCollector:
    loop = {"lag_max_ms": 12.5, "stalls": 2, "busy_stalls": 1}
    return BrokerCollector(broker, lambda: {"files": 2, "flushes": 7}, lambda since: dict(loop),
                           lambda: (3, 10, 7))


def test_fast_text_is_byte_for_byte_what_prometheus_client_writes():
    collector = _collector(_broker())
    body, content_type = render([collector], None)
    assert content_type.startswith("text/plain; version=0.0.4")
    assert body == generate_latest(collector)


def test_openmetrics_is_byte_for_byte_what_prometheus_client_writes_when_asked_for():
    collector = _collector(_broker())
    body, content_type = render([collector], "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body == openmetrics_latest(collector)
    assert body.endswith(b"# EOF\n")
    names = {family.name for family in parse_openmetrics(body.decode())}
    assert "pagemq_queue_messages_added" in names  # OpenMetrics: counter family without _total


def test_counters_end_in_total_and_queue_figures_carry_both_labels():
    body, _ = render([_collector(_broker())], None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert families["pagemq_queue_messages_added"].type == "counter"
    samples = {s.labels["queue"]: s for s in families["pagemq_queue_messages_added"].samples}
    assert samples["plain"].name == "pagemq_queue_messages_added_total"
    assert samples["plain"].value == 3 and samples["plain"].labels["address"] == "plain"
    assert set(samples) == set(ODD_NAMES)  # escaped and parsed back intact
    assert families["pagemq_queue_messages"].type == "gauge"
    assert families["pagemq_connections"].samples[0].value == 3
    assert families["pagemq_event_loop_lag_max_seconds"].samples[0].value == 0.0125


def test_first_deliveries_are_observed_into_the_latency_histogram():
    broker = _broker()
    sink = Sink()
    queue = broker.queues["plain"]
    broker.subscribe(queue, sink, ack_mode=AckMode.INDIVIDUAL, prefetch=10)
    assert sink.delivered == 3
    body, _ = render([_collector(broker)], None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    histogram = families["pagemq_delivery_latency_seconds"]
    assert histogram.type == "histogram"
    by_name = {(s.name, s.labels.get("le")): s.value for s in histogram.samples}
    assert by_name[("pagemq_delivery_latency_seconds_count", None)] == 3
    assert by_name[("pagemq_delivery_latency_seconds_bucket", "+Inf")] == 3
    assert by_name[("pagemq_delivery_latency_seconds_bucket", "1.0")] == 3  # sent just now


def test_latency_buckets_are_cumulative_and_a_clock_step_back_counts_as_zero():
    latency = DeliveryLatency((0.01, 1.0))

    now_ms = int(time.time() * 1000)
    latency.observe(now_ms + 60_000)  # sent "in the future": the clock stepped back
    latency.observe(now_ms - 500)
    latency.observe(now_ms - 5_000)
    buckets, count, total = latency.snapshot()
    assert [c for _, c in buckets] == [1, 2, 3]
    assert count == 3 and 5.4 < total < 6.0

"""`/metrics` by Prometheus' conventions, parsed with prometheus_client's own parsers.

Types and HELP on every family, `_total` on counters, `_bytes` units, per-queue figures
labelled with queue and address, the process metrics, OpenMetrics when the Accept header
asks for it, the delivery-latency histogram and the connection counts.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from brokerproc import HOST, wait_until
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).parents[2] / "contrib" / "grafana" / "pagemq-dashboard.json"
BROKER_CONFIG = {"address-settings": {"zero.#": {"max-size-bytes": 0}}}


def _scrape(broker, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(f"http://{HOST}:{broker.http_port}/metrics",
                                     headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def _families(broker) -> dict:
    _, text = _scrape(broker)
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(family, **labels) -> float:
    found = [s.value for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{family.name} {labels}: {found} in {family.samples[:5]}"
    return found[0]


def _count(histogram) -> float:
    return next(s.value for s in histogram.samples if s.name.endswith("_count"))


def test_every_family_has_a_type_and_help_and_counters_end_in_total(broker, stomp_client, queue_name):
    stomp_client(broker).send(f"/queue/{queue_name}", "x", receipt=True)
    content_type, text = _scrape(broker)
    assert content_type.startswith("text/plain; version=0.0.4")
    declared = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")}
    helped = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP")}
    assert set(declared) <= helped, f"no HELP: {set(declared) - helped}"
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for family in families.values():
        assert family.type in ("counter", "gauge", "histogram", "info", "summary"), family
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.samples[:3]
    for name in ("pagemq_queue_messages_added", "pagemq_queue_messages_acknowledged",
                 "pagemq_queue_messages_expired", "pagemq_queue_messages_killed",
                 "pagemq_address_dropped_messages", "pagemq_store_records_written",
                 "pagemq_event_loop_stalls", "pagemq_connections_opened"):
        assert families[name].type == "counter", name
    for name in ("pagemq_queue_messages", "pagemq_queue_messages_paged", "pagemq_memory_used_bytes",
                 "pagemq_address_memory_bytes", "pagemq_address_paging", "pagemq_connections"):
        assert families[name].type == "gauge", name
    assert not [n for n in declared if "bytes" in n and not n.endswith(("_bytes", "_bytes_total"))], declared


def test_queue_figures_carry_queue_and_address_labels(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    for n in range(3):
        producer.send(f"/queue/{queue_name}", f"m{n}", receipt=True)
    families = _families(broker)
    assert _value(families["pagemq_queue_messages"], queue=queue_name, address=queue_name) == 3
    assert _value(families["pagemq_queue_messages_added"], queue=queue_name) == 3
    assert _value(families["pagemq_queue_messages_acknowledged"], queue=queue_name) == 0
    assert _value(families["pagemq_address_messages"], address=queue_name) == 3
    assert _value(families["pagemq_address_memory_bytes"], address=queue_name) > 0


def test_paged_messages_and_page_mode_show_per_address(broker, stomp_client, queue_name):
    address = f"zero.{queue_name}"
    producer = stomp_client(broker)
    for n in range(4):
        producer.send(f"/queue/{address}", f"p{n}", receipt=True)
    families = _families(broker)
    assert _value(families["pagemq_address_paging"], address=address) == 1
    assert _value(families["pagemq_address_messages_paged"], address=address) == 4
    assert _value(families["pagemq_queue_messages_paged"], queue=address) == 4
    assert _value(families["pagemq_address_page_files"], address=address) >= 1


def test_process_metrics_are_there(broker):
    families = _families(broker)
    assert families["process_resident_memory_bytes"].samples[0].value > 1 << 20
    assert families["process_cpu_seconds"].type == "counter"
    assert families["process_open_fds"].samples[0].value > 0
    assert "python_info" in families


def test_openmetrics_when_the_accept_header_asks_for_it(broker, stomp_client, queue_name):
    stomp_client(broker).send(f"/queue/{queue_name}", "x", receipt=True)
    content_type, text = _scrape(broker, "application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    assert content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in parse_openmetrics(text)}  # the strict parser: raises on bad input
    added = families["pagemq_queue_messages_added"]
    assert added.type == "counter"
    assert _value(added, queue=queue_name) == 1


def test_deliveries_are_observed_in_the_latency_histogram(broker, stomp_client, queue_name):
    count_before = _count(_families(broker)["pagemq_delivery_latency_seconds"])
    producer = stomp_client(broker)
    for n in range(5):
        producer.send(f"/queue/{queue_name}", f"m{n}", receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="auto")
    consumer.listener.wait_for(5)
    histogram = wait_until(
        lambda: (f := _families(broker)["pagemq_delivery_latency_seconds"]) and _count(f) >= count_before + 5
        and f,
        what="5 more deliveries observed")
    assert histogram.type == "histogram"
    buckets = [(s.labels["le"], s.value) for s in histogram.samples if s.name.endswith("_bucket")]
    assert buckets[-1][0] == "+Inf"
    assert [v for _, v in buckets] == sorted(v for _, v in buckets), "buckets must be cumulative"
    assert next(s.value for s in histogram.samples if s.name.endswith("_sum")) >= 0


def test_connections_are_counted_open_and_closed(broker, stomp_client):
    before = _families(broker)
    opened = _value(before["pagemq_connections_opened"])
    client = stomp_client(broker)
    families = _families(broker)
    assert _value(families["pagemq_connections_opened"]) == opened + 1
    assert _value(families["pagemq_connections"]) >= 1
    client.disconnect()
    wait_until(lambda: _value(_families(broker)["pagemq_connections_closed"])
               >= _value(before["pagemq_connections_closed"]) + 1, what="the close counted")


def test_the_grafana_dashboard_uses_only_metrics_the_broker_exposes(broker, stomp_client, queue_name):
    stomp_client(broker).send(f"/queue/{queue_name}", "x", receipt=True)
    dashboard = json.loads(DASHBOARD.read_text())
    _, text = _scrape(broker)
    exposed = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"\b((?:pagemq|process)_[a-z_]+)", target["expr"])}
    used |= set(re.findall(r"\b(pagemq_[a-z_]+)", json.dumps(dashboard["templating"])))
    assert used and used <= exposed, sorted(used - exposed)

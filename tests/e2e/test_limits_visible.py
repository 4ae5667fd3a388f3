"""Every limit, its use and its policy visible (issue 16, part 4): `GET /api/broker` shows
the memory budget and each filesystem's use against the disk limits, `GET
/api/addresses/{name}` an address's limits, and `/metrics` the same figures."""

from __future__ import annotations

from brokerproc import unique
from prometheus_client.parser import text_string_to_metric_families
from test_paging_helpers import numbered, send_all

BROKER_CONFIG = {
    "broker": {"global-max-size": "64MiB", "min-disk-free": "1MiB", "disk-full-policy": "FAIL"},
    "address-settings": {"capped.#": {"max-size-bytes": "1MiB", "address-full-policy": "BLOCK",
                                      "page-limit-messages": 500, "page-full-policy": "DROP"}},
}


def test_api_broker_shows_the_memory_budget_and_the_disk_against_its_limits(broker, stomp_client):
    producer = stomp_client(broker)
    send_all(producer, f"/queue/{unique('mem')}", numbered("m", 10))
    status, body = broker.http_get("/api/broker")
    assert status == 200
    memory = body["memory"]
    assert memory["global_max_size"] == 64 << 20
    assert memory["used_bytes"] > 0 and memory["used_messages"] >= 10
    assert 0 < memory["used_percent"] < 100
    disk = body["disk"]
    assert disk["disk_full"] is False and disk["reasons"] == []
    assert disk["disk_full_policy"] == "FAIL"
    assert disk["min_disk_free"] == 1 << 20 and disk["max_disk_usage"] == 90
    assert disk["limit_in_force"] == "min-disk-free"  # it wins when both are set
    roles = sorted(role for fs in disk["filesystems"] for role in fs["directories"])
    assert roles == ["journal", "paging"]
    for fs in disk["filesystems"]:
        assert fs["free_bytes"] > 0 and fs["total_bytes"] >= fs["free_bytes"]
        assert 0 <= fs["used_percent"] <= 100 and fs["over_limit"] is False


def test_an_address_shows_its_limits_use_and_policies(broker, stomp_client):
    address = f"capped.{unique('lim')}"
    producer = stomp_client(broker)
    send_all(producer, f"/queue/{address}", numbered("m", 3))
    limits = broker.address(address)["limits"]
    assert limits["memory"] == {
        "max_size_bytes": 1 << 20, "max_size_messages": -1,
        "used_bytes": limits["memory"]["used_bytes"], "used_messages": 3,
        "address_full_policy": "BLOCK",
    }
    assert limits["memory"]["used_bytes"] > 3 * 1024
    assert limits["paging"] == {"page_limit_bytes": -1, "page_limit_messages": 500,
                                "used_bytes": 0, "used_messages": 0, "page_full_policy": "DROP"}


def test_metrics_carry_the_limits_beside_their_use(broker, stomp_client):
    address = f"capped.{unique('met')}"
    producer = stomp_client(broker)
    send_all(producer, f"/queue/{address}", numbered("m", 1))
    status, _, text = broker.http_get_text("/metrics")
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("pagemq_disk_full", ())] == 0
    assert samples[("pagemq_memory_limit_bytes", ())] == 64 << 20
    assert samples[("pagemq_disk_min_free_bytes", ())] == 1 << 20
    assert samples[("pagemq_disk_max_usage_ratio", ())] == 0.9
    assert samples[("pagemq_disk_refused_sends_total", ())] == 0
    free = [v for (name, _labels), v in samples.items() if name == "pagemq_disk_free_bytes"]
    assert free and all(v > 0 for v in free)
    label = (("address", address),)
    assert samples[("pagemq_address_limit_bytes", label)] == 1 << 20
    assert samples[("pagemq_address_page_limit_messages", label)] == 500
    assert ("pagemq_address_limit_messages", label) not in samples  # -1: the limit is off
    assert samples[("pagemq_address_paged_bytes", label)] == 0

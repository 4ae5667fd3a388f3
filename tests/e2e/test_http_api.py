"""The HTTP management API and /metrics against a live broker."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

QUEUE_FIELDS = {
    "name", "address", "routing_type", "filter", "durable", "messages", "messages_in_memory",
    "messages_paged", "messages_delivering", "consumers", "messages_added", "messages_acknowledged",
    "messages_expired", "messages_killed",
}
ADDRESS_FIELDS = {
    "name", "routing_type", "queues", "paging", "messages", "messages_in_memory", "messages_paged",
    "bytes_in_memory", "page_files", "dropped_messages", "settings",
}


def test_queue_has_every_contract_field(broker, stomp_client, queue_name):
    stomp_client(broker).send(f"/queue/{queue_name}", "x", receipt=True)
    queue = broker.queue(queue_name)
    assert set(queue) >= QUEUE_FIELDS, f"missing {QUEUE_FIELDS - set(queue)}"
    assert (queue["name"], queue["address"], queue["routing_type"]) == (queue_name, queue_name, "anycast")
    assert queue["filter"] in (None, "")
    assert isinstance(queue["durable"], bool)


def test_queue_counts_follow_sends_deliveries_and_acks(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    for n in range(3):
        producer.send(f"/queue/{queue_name}", f"m{n}", headers={"persistent": "true"}, receipt=True)
    queue = broker.queue(queue_name)
    assert (queue["messages"], queue["messages_added"], queue["consumers"]) == (3, 3, 0)
    assert (queue["messages_delivering"], queue["messages_acknowledged"]) == (0, 0)
    assert queue["messages_in_memory"] + queue["messages_paged"] == 3

    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    frames = consumer.wait_for(3)
    broker.wait_queue(queue_name, consumers=1, messages=3, messages_delivering=3)

    consumer.ack(frames[0])
    consumer.ack(frames[2], receipt=True)
    queue = broker.wait_queue(queue_name, messages=1, messages_acknowledged=2, messages_delivering=1)
    assert (queue["messages_added"], queue["messages_expired"], queue["messages_killed"]) == (3, 0, 0)

    consumer.disconnect()
    broker.wait_queue(queue_name, consumers=0, messages=1, messages_delivering=0)


def test_address_has_every_contract_field(broker, stomp_client, queue_name):
    stomp_client(broker).send(f"/queue/{queue_name}", "x", receipt=True)
    address = broker.address(queue_name)
    assert set(address) >= ADDRESS_FIELDS, f"missing {ADDRESS_FIELDS - set(address)}"
    assert (address["name"], address["routing_type"]) == (queue_name, "anycast")
    assert address["queues"] == [queue_name]
    assert address["paging"] is False
    assert (address["messages"], address["messages_in_memory"], address["messages_paged"]) == (1, 1, 0)
    assert address["bytes_in_memory"] > 0
    assert (address["page_files"], address["dropped_messages"]) == (0, 0)


def test_address_settings_are_the_effective_kebab_case_settings(broker, stomp_client, queue_name):
    stomp_client(broker).send(f"/queue/{queue_name}", "x", receipt=True)
    settings = broker.address(queue_name)["settings"]
    assert settings["address-full-policy"] == "PAGE"
    assert settings["max-delivery-attempts"] == 10
    assert settings["dead-letter-address"] == "DLQ"
    assert settings["expiry-address"] == "ExpiryQueue"
    assert "max-size-bytes" in settings
    assert "page-size-bytes" in settings


def test_topic_address_counts_one_message_per_subscription_copy(broker, stomp_client, queue_name):
    subscribers = [stomp_client(broker) for _ in range(2)]
    for subscriber in subscribers:
        subscriber.subscribe(f"/topic/{queue_name}", ack="client-individual")
    stomp_client(broker).send(f"/topic/{queue_name}", "copied", receipt=True)
    for subscriber in subscribers:
        subscriber.wait_for(1)
    address = broker.address(queue_name)
    assert address["routing_type"] == "multicast"
    assert len(address["queues"]) == 2
    assert address["messages"] == 2
    for name in address["queues"]:
        queue = broker.queue(name)
        assert (queue["address"], queue["routing_type"], queue["messages"]) == (queue_name, "multicast", 1)


def test_a_paging_multicast_address_counts_memory_and_pages_one_per_copy(start_broker, stomp_client):
    """(Before: `messages_in_memory` was the memory budget's count of distinct messages, 2
    here, while `messages` and `messages_paged` count copies: 15 was not 2 + 9.)"""
    proc = start_broker({
        "address-settings": {"events": {"max-size-messages": 2}},
        "addresses": [{"name": "events", "routing-type": "multicast",
                       "queues": [{"name": f"q{n}"} for n in range(3)]}],
    })
    producer = stomp_client(proc)
    for n in range(5):
        producer.send("/topic/events", f"m{n}", headers={"persistent": "true"}, receipt=True)
    address = proc.address("events")
    assert (address["messages"], address["messages_in_memory"], address["messages_paged"]) == (15, 6, 9)
    for n in range(3):
        queue = proc.queue(f"q{n}")
        assert (queue["messages"], queue["messages_in_memory"], queue["messages_paged"]) == (5, 2, 3)


def test_address_list_contains_created_addresses(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    client.send(f"/queue/{queue_name}", "x", receipt=True)
    client.subscribe(f"/topic/{queue_name}-t")
    status, body = broker.http_get("/api/addresses")
    assert status == 200
    by_name = {address["name"]: address for address in body["addresses"]}
    assert by_name[queue_name]["routing_type"] == "anycast"
    assert by_name[f"{queue_name}-t"]["routing_type"] == "multicast"
    assert set(by_name[queue_name]) >= ADDRESS_FIELDS


def test_unknown_queue_is_404_with_error(broker):
    status, body = broker.http_get("/api/queues/no-such-queue-here")
    assert status == 404
    assert isinstance(body.get("error"), str) and body["error"]


def test_unknown_address_is_404_with_error(broker):
    status, body = broker.http_get("/api/addresses/no-such-address-here")
    assert status == 404
    assert isinstance(body.get("error"), str) and body["error"]


def test_metrics_is_prometheus_text_with_per_queue_figures(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    for n in range(3):
        producer.send(f"/queue/{queue_name}", f"m{n}", receipt=True)
    status, content_type, text = broker.http_get_text("/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    mine = {s.name: s.value for s in samples if s.labels.get("queue") == queue_name}
    assert mine["pagemq_queue_messages"] == 3, mine
    assert mine["pagemq_queue_messages_acknowledged_total"] == 0, mine
    assert mine["pagemq_queue_messages_added_total"] == 3, mine


def test_broker_view_has_the_event_loop_lag_figures(broker):
    status, body = broker.http_get("/api/broker")
    assert status == 200
    loop = body["event_loop"]
    assert set(loop) >= {"since", "samples", "lag_max_ms", "stalls", "busy_stalls", "stall_threshold_ms",
                         "recent_stalls"}
    assert loop["samples"] > 0 and loop["stall_threshold_ms"] == 50
    assert loop["lag_max_ms"] >= 0 and loop["stalls"] >= 0
    assert set(body["store"]) >= {"files", "live_records"} and body["memory"]["used_bytes"] >= 0
    status, window = broker.http_get(f"/api/broker?since={loop['since'] + 1e6}")
    assert status == 200 and window["event_loop"]["samples"] == 0  # a window in the future is empty
    status, error = broker.http_get("/api/broker?since=yesterday")
    assert status == 400 and "since" in error["error"]
    _, _, text = broker.http_get_text("/metrics")
    assert "pagemq_event_loop_stalls_total " in text and "pagemq_event_loop_lag_max_seconds " in text

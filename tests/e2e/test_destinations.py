"""Destinations: /queue/, /topic/, bare names, auto-create, multicast, durable subscriptions."""

from __future__ import annotations

from brokerproc import bodies, unique

BROKER_CONFIG = {
    "addresses": [
        {"name": "cfg-orders", "routing-type": "anycast"},
        {"name": "cfg-events", "routing-type": "multicast", "queues": [
            {"name": "cfg-eu-events", "filter": "region = 'eu'"},
            {"name": "cfg-all-events"},
        ]},
    ],
}


def test_bare_name_is_the_same_queue_as_queue_prefix(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    client.subscribe(f"/queue/{queue_name}")
    client.send(queue_name, "bare", receipt=True)
    client.send(f"/queue/{queue_name}", "prefixed", receipt=True)
    assert sorted(bodies(client.wait_for(2))) == ["bare", "prefixed"]


def test_consumer_on_bare_name_receives_from_queue_prefix(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    client.subscribe(queue_name)
    client.send(f"/queue/{queue_name}", "hello", receipt=True)
    assert bodies(client.wait_for(1)) == ["hello"]


def test_queue_and_address_are_created_on_first_send(broker, stomp_client, queue_name):
    assert broker.http_get(f"/api/queues/{queue_name}")[0] == 404
    stomp_client(broker).send(f"/queue/{queue_name}", "x", receipt=True)
    queue = broker.queue(queue_name)
    assert (queue["name"], queue["address"], queue["routing_type"]) == (queue_name, queue_name, "anycast")
    address = broker.address(queue_name)
    assert address["routing_type"] == "anycast"
    assert address["queues"] == [queue_name]


def test_queue_is_created_on_first_subscribe(broker, stomp_client, queue_name):
    stomp_client(broker).subscribe(f"/queue/{queue_name}")
    assert broker.queue(queue_name)["consumers"] == 1


def test_topic_address_is_multicast(broker, stomp_client, queue_name):
    stomp_client(broker).subscribe(f"/topic/{queue_name}")
    assert broker.address(queue_name)["routing_type"] == "multicast"


def test_every_topic_subscriber_gets_each_message(broker, stomp_client, queue_name):
    first, second = stomp_client(broker), stomp_client(broker)
    first.subscribe(f"/topic/{queue_name}")
    second.subscribe(f"/topic/{queue_name}")
    producer = stomp_client(broker)
    for n in range(5):
        producer.send(f"/topic/{queue_name}", f"m{n}", receipt=True)
    expected = [f"m{n}" for n in range(5)]
    assert bodies(first.wait_for(5)) == expected
    assert bodies(second.wait_for(5)) == expected
    assert first.messages[0].headers["destination"] == f"/topic/{queue_name}"


def test_two_subscriptions_on_one_connection_each_get_topic_messages(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    sub_a = client.subscribe(f"/topic/{queue_name}")
    sub_b = client.subscribe(f"/topic/{queue_name}")
    client.send(f"/topic/{queue_name}", "fan-out", receipt=True)
    frames = client.wait_for(2)
    assert sorted(f.headers["subscription"] for f in frames) == sorted([sub_a, sub_b])
    client.listener.assert_no_more(2)


def test_a_topic_subscription_made_after_an_unsubscribe_gets_its_own_copy(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    sub_a = client.subscribe(f"/topic/{queue_name}")
    sub_b = client.subscribe(f"/topic/{queue_name}")
    client.unsubscribe(sub_a)
    sub_c = client.subscribe(f"/topic/{queue_name}")
    for n in range(4):
        client.send(f"/topic/{queue_name}", f"m{n}", receipt=n == 3)
    frames = client.wait_for(8)
    for sub in (sub_b, sub_c):
        assert bodies(f for f in frames if f.headers["subscription"] == sub) == [f"m{n}" for n in range(4)]
    client.listener.assert_no_more(8)


def test_topic_message_without_subscribers_is_not_kept_for_later_ones(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    producer.send(f"/topic/{queue_name}", "nobody listens", receipt=True)
    late = stomp_client(broker)
    late.subscribe(f"/topic/{queue_name}")
    producer.send(f"/topic/{queue_name}", "now someone does", receipt=True)
    assert bodies(late.wait_for(1)) == ["now someone does"]
    late.listener.assert_no_more(1)


def test_two_consumers_on_a_queue_share_messages_round_robin(broker, stomp_client, queue_name):
    first, second = stomp_client(broker), stomp_client(broker)
    first.subscribe(f"/queue/{queue_name}")
    second.subscribe(f"/queue/{queue_name}")
    producer = stomp_client(broker)
    for n in range(10):
        producer.send(f"/queue/{queue_name}", str(n), receipt=(n == 9))
    got_first = first.wait_for(5)
    got_second = second.wait_for(5)
    first.listener.assert_no_more(5, within=0.3)
    second.listener.assert_no_more(5, within=0)
    assert sorted(bodies(got_first) + bodies(got_second), key=int) == [str(n) for n in range(10)]
    assert bodies(got_first) == sorted(bodies(got_first), key=int), "each consumer sees queue order"


def test_queue_message_goes_to_one_consumer_only(broker, stomp_client, queue_name):
    first, second = stomp_client(broker), stomp_client(broker)
    first.subscribe(f"/queue/{queue_name}")
    second.subscribe(f"/queue/{queue_name}")
    stomp_client(broker).send(f"/queue/{queue_name}", "once", receipt=True)
    first.listener.wait(lambda: len(first.messages) + len(second.messages) >= 1, 5, "one delivery")
    first.listener.assert_no_more(len(first.messages), within=0.5)
    assert len(first.messages) + len(second.messages) == 1


# -- durable topic subscriptions ------------------------------------------------------------


def _durable(broker, stomp_client, client_id, topic, name, header="durable-subscription-name"):
    client = stomp_client(broker, client_id=client_id)
    sub = client.subscribe(f"/topic/{topic}", ack="client-individual", headers={header: name})
    return client, sub


def test_durable_subscription_keeps_receiving_while_the_subscriber_is_away(broker, stomp_client, queue_name):
    client_id, sub_name = unique("client"), "audit"
    subscriber, _ = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    subscriber.disconnect()
    producer = stomp_client(broker)
    for n in range(3):
        producer.send(f"/topic/{queue_name}", f"while away {n}", receipt=True)
    queue = broker.queue(f"{client_id}.{sub_name}")
    assert queue["messages"] == 3
    assert queue["address"] == queue_name
    assert queue["routing_type"] == "multicast"
    assert queue["durable"] is True

    back, _ = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    assert bodies(back.wait_for(3)) == [f"while away {n}" for n in range(3)]


def test_activemq_subscription_name_header_makes_a_durable_subscription(broker, stomp_client, queue_name):
    client_id, sub_name = unique("client"), "legacy"
    header = "activemq.subscriptionName"
    subscriber, _ = _durable(broker, stomp_client, client_id, queue_name, sub_name, header)
    subscriber.disconnect()
    stomp_client(broker).send(f"/topic/{queue_name}", "kept", receipt=True)
    assert broker.queue(f"{client_id}.{sub_name}")["messages"] == 1
    back, _ = _durable(broker, stomp_client, client_id, queue_name, sub_name, header)
    assert bodies(back.wait_for(1)) == ["kept"]


def test_non_durable_topic_subscription_is_gone_after_disconnect(broker, stomp_client, queue_name):
    subscriber = stomp_client(broker)
    subscriber.subscribe(f"/topic/{queue_name}")
    assert len(broker.address(queue_name)["queues"]) == 1
    subscriber.disconnect()
    producer = stomp_client(broker)
    producer.send(f"/topic/{queue_name}", "lost", receipt=True)
    status, address = broker.http_get(f"/api/addresses/{queue_name}")
    assert status == 404 or (address["queues"], address["messages"]) == ([], 0), address


def test_unsubscribe_with_durable_headers_removes_the_subscription(broker, stomp_client, queue_name):
    client_id, sub_name = unique("client"), "gone"
    subscriber, sub = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    subscriber.unsubscribe(sub, headers={"durable-subscription-name": sub_name})
    status, body = broker.http_get(f"/api/queues/{client_id}.{sub_name}")
    assert status == 404, body
    subscriber.disconnect()
    stomp_client(broker).send(f"/topic/{queue_name}", "after unsubscribe", receipt=True)
    back, _ = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    back.listener.assert_no_more(0)


def test_a_durable_subscription_with_an_active_subscriber_is_not_removed_by_another_connection(
        broker, stomp_client, queue_name):
    """(Before: another connection's UNSUBSCRIBE got a RECEIPT and deleted the queue under the
    subscriber, which then silently received nothing more.)"""
    client_id, sub_name = unique("client"), "busy"
    subscriber, _ = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    other = stomp_client(broker, client_id=client_id)
    other.unsubscribe("x", headers={"durable-subscription-name": sub_name}, receipt=False)
    error = other.listener.wait_for_error()
    assert "has an active subscriber" in error.headers["message"]
    stomp_client(broker).send(f"/topic/{queue_name}", "still delivered", receipt=True)
    assert bodies(subscriber.wait_for(1)) == ["still delivered"]


def test_removing_the_durable_subscription_that_paged_takes_its_address_out_of_page_mode(
        start_broker, stomp_client):
    """(Before: the address stayed in page mode with nothing paged, and paged the next message
    although nothing was held in memory.)"""
    proc = start_broker({"address-settings": {"news": {"max-size-messages": 2}}})
    subscriber, sub = _durable(proc, stomp_client, "app", "news", "sub")
    subscriber.unsubscribe(sub)  # away: the subscription keeps receiving
    producer = stomp_client(proc)
    for n in range(6):
        producer.send("/topic/news", f"m{n}", headers={"persistent": "true"}, receipt=True)
    assert proc.address("news")["paging"] is True
    subscriber.unsubscribe(sub, headers={"durable-subscription-name": "sub"})
    assert proc.address("news")["paging"] is False
    _durable(proc, stomp_client, "app", "news", "again")
    producer.send("/topic/news", "held in memory", headers={"persistent": "true"}, receipt=True)
    address = proc.address("news")
    assert (address["paging"], address["messages_in_memory"], address["messages_paged"]) == (False, 1, 0)


def test_a_durable_subscription_read_by_name_keeps_its_selector_and_its_reader(
        broker, stomp_client, queue_name):
    """(Before: the subscriber coming back with another selector deleted the queue under a
    `/queue/CID.NAME` reader, which then silently got nothing more.)"""
    client_id, sub_name = unique("client"), "shared"
    subscriber, sub = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    subscriber.unsubscribe(sub)  # away
    reader = stomp_client(broker)
    reader.subscribe(f"/queue/{client_id}.{sub_name}")
    back = stomp_client(broker, client_id=client_id)
    back.subscribe(f"/topic/{queue_name}", headers={"durable-subscription-name": sub_name,
                                                   "selector": "region = 'eu'"}, receipt=False)
    assert "its selector cannot change" in back.listener.wait_for_error().headers["message"]
    stomp_client(broker).send(f"/topic/{queue_name}", "still read", receipt=True)
    assert bodies(reader.wait_for(1)) == ["still read"]


def test_a_durable_subscription_resubscribed_on_another_topic_is_made_anew_there(
        broker, stomp_client, queue_name):
    """JMS: changing a durable subscription's topic deletes it and makes a new one, as
    Artemis recreates its queue. (Before: the SUBSCRIBE was refused.)"""
    client_id, sub_name = unique("client"), "moves"
    first, second = f"{queue_name}-a", f"{queue_name}-b"
    subscriber, sub = _durable(broker, stomp_client, client_id, first, sub_name)
    subscriber.unsubscribe(sub)  # away
    stomp_client(broker).send(f"/topic/{first}", "of the old topic", receipt=True)
    back, _ = _durable(broker, stomp_client, client_id, second, sub_name)
    queue = broker.queue(f"{client_id}.{sub_name}")
    assert (queue["address"], queue["messages"]) == (second, 0)
    stomp_client(broker).send(f"/topic/{first}", "not for it any more", receipt=True)
    stomp_client(broker).send(f"/topic/{second}", "of the new topic", receipt=True)
    assert bodies(back.wait_for(1)) == ["of the new topic"]
    back.listener.assert_no_more(1)


def test_a_durable_subscription_being_read_does_not_move_to_another_topic(broker, stomp_client, queue_name):
    client_id, sub_name = unique("client"), "pinned"
    subscriber, _ = _durable(broker, stomp_client, client_id, f"{queue_name}-a", sub_name)
    other = stomp_client(broker, client_id=client_id)
    other.subscribe(f"/topic/{queue_name}-b", headers={"durable-subscription-name": sub_name}, receipt=False)
    assert "its topic cannot change" in other.listener.wait_for_error().headers["message"]
    stomp_client(broker).send(f"/topic/{queue_name}-a", "still delivered", receipt=True)
    assert bodies(subscriber.wait_for(1)) == ["still delivered"]


def test_a_blank_selector_is_no_selector_for_a_durable_subscription(broker, stomp_client, queue_name):
    """(Before: `selector:  ` counted as another selector, so coming back without one deleted
    the subscription and the messages kept for it.)"""
    client_id, sub_name = unique("client"), "blank"
    client = stomp_client(broker, client_id=client_id)
    sub = client.subscribe(f"/topic/{queue_name}", headers={"durable-subscription-name": sub_name,
                                                          "selector": "  "})
    client.unsubscribe(sub)  # away
    stomp_client(broker).send(f"/topic/{queue_name}", "kept", receipt=True)
    back, _ = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    assert bodies(back.wait_for(1)) == ["kept"]
    assert broker.queue(f"{client_id}.{sub_name}")["filter"] in (None, "")


def test_plain_unsubscribe_keeps_the_durable_subscription(broker, stomp_client, queue_name):
    client_id, sub_name = unique("client"), "stays"
    subscriber, sub = _durable(broker, stomp_client, client_id, queue_name, sub_name)
    subscriber.unsubscribe(sub)
    stomp_client(broker).send(f"/topic/{queue_name}", "still kept", receipt=True)
    assert broker.queue(f"{client_id}.{sub_name}")["messages"] == 1


def test_durable_subscription_survives_restart_with_persistent_messages(start_broker, stomp_client):
    proc = start_broker()
    topic, client_id, sub_name = unique("topic"), unique("client"), "restart"
    subscriber, _ = _durable(proc, stomp_client, client_id, topic, sub_name)
    subscriber.disconnect()
    producer = stomp_client(proc)
    for n in range(3):
        producer.send(f"/topic/{topic}", f"durable {n}", headers={"persistent": "true"}, receipt=True)
    producer.disconnect()
    proc.restart()
    assert proc.queue(f"{client_id}.{sub_name}")["messages"] == 3
    producer = stomp_client(proc)
    producer.send(f"/topic/{topic}", "after restart", headers={"persistent": "true"}, receipt=True)
    back, _ = _durable(proc, stomp_client, client_id, topic, sub_name)
    assert bodies(back.wait_for(4)) == [f"durable {n}" for n in range(3)] + ["after restart"]
    back.disconnect()


# -- addresses from the configuration file --------------------------------------------------


def test_configured_anycast_address_and_queue_exist_at_start(broker):
    queue = broker.queue("cfg-orders")
    assert (queue["address"], queue["routing_type"], queue["messages"]) == ("cfg-orders", "anycast", 0)
    assert broker.address("cfg-orders")["routing_type"] == "anycast"


def test_configured_multicast_queues_receive_topic_messages_through_their_filter(broker, stomp_client):
    address = broker.address("cfg-events")
    assert address["routing_type"] == "multicast"
    assert sorted(address["queues"]) == ["cfg-all-events", "cfg-eu-events"]
    eu = broker.queue("cfg-eu-events")
    assert (eu["filter"], eu["durable"], eu["routing_type"]) == ("region = 'eu'", True, "multicast")

    producer = stomp_client(broker)
    for region in ("eu", "us", "eu"):
        producer.send("/topic/cfg-events", region, headers={"region": region}, receipt=True)
    assert broker.queue("cfg-eu-events")["messages_added"] == 2
    assert broker.queue("cfg-all-events")["messages_added"] == 3


def test_a_configured_queue_of_a_multicast_address_is_consumed_by_its_name(start_broker, stomp_client):
    """(Before: SUBSCRIBE /queue/NAME was refused, 'queue already exists on address', and
    left an address NAME behind: a configured multicast queue could not be read over STOMP.)"""
    broker = start_broker(BROKER_CONFIG)
    producer = stomp_client(broker)
    for n, region in enumerate(("eu", "us", "eu")):
        producer.send("/topic/cfg-events", f"{region}{n}", headers={"region": region}, receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe("/queue/cfg-eu-events", ack="client-individual")
    assert bodies(consumer.wait_for(2)) == ["eu0", "eu2"]
    assert broker.http_get("/api/addresses/cfg-eu-events")[0] == 404  # nothing made on the way
    browser = stomp_client(broker)
    browser.subscribe("cfg-all-events", headers={"browser": "true"})
    assert bodies(browser.wait_for(4))[:3] == ["eu0", "us1", "eu2"]  # then browser:end
    assert broker.queue("cfg-all-events")["messages"] == 3  # browsed, not consumed


def test_a_send_to_the_name_of_a_multicast_address_queue_is_refused_and_makes_nothing(
        start_broker, stomp_client):
    """(Before: refused, but it left an empty durable anycast address of that name.)"""
    proc = start_broker(BROKER_CONFIG)
    client = stomp_client(proc)
    client.send("/queue/cfg-eu-events", "lost?", receipt=False)
    assert "another address's queue" in client.listener.wait_for_error().headers["message"]
    assert proc.http_get("/api/addresses/cfg-eu-events")[0] == 404
    assert proc.queue("cfg-eu-events")["messages"] == 0


def test_a_fully_qualified_queue_name_reads_that_queue_of_the_address(start_broker, stomp_client):
    broker = start_broker(BROKER_CONFIG)
    producer = stomp_client(broker)
    producer.send("/topic/cfg-events", "us", headers={"region": "us"}, receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe("/topic/cfg-events::cfg-all-events")
    assert bodies(consumer.wait_for(1)) == ["us"]
    assert broker.queue("cfg-all-events")["messages"] == 0


def test_a_fully_qualified_queue_name_makes_a_missing_queue_on_the_address(broker, stomp_client):
    address, queue = unique("fq"), unique("fqq")
    stomp_client(broker).subscribe(f"/topic/{address}")  # the multicast address exists
    consumer = stomp_client(broker)
    consumer.subscribe(f"{address}::{queue}")
    assert (broker.queue(queue)["address"], broker.queue(queue)["routing_type"]) == (address, "multicast")
    stomp_client(broker).send(f"/topic/{address}", "both get it", receipt=True)
    assert bodies(consumer.wait_for(1)) == ["both get it"]


def test_an_address_named_with_a_double_colon_before_it_meant_a_queue_is_still_used_whole(
        start_broker, stomp_client):
    """Earlier versions took `a::b` as a plain name: such an address and queue (here made by
    the configuration) are still sent to and read by that name."""
    proc = start_broker({"addresses": [{"name": "legacy::x", "routing-type": "anycast"}]})
    stomp_client(proc).send("/queue/legacy::x", "kept", receipt=True)
    assert proc.queue("legacy::x")["messages"] == 1
    consumer = stomp_client(proc)
    consumer.subscribe("/queue/legacy::x")
    assert bodies(consumer.wait_for(1)) == ["kept"]
    assert proc.http_get("/api/addresses/legacy")[0] == 404  # no address `legacy` made


def test_a_fully_qualified_queue_name_of_another_address_is_refused(broker, stomp_client):
    client = stomp_client(broker)
    client.subscribe("cfg-orders::cfg-eu-events", receipt=False)
    error = client.listener.wait_for_error()
    assert "address 'cfg-orders' has no queue 'cfg-eu-events'" in error.headers["message"]


def test_a_send_to_a_fully_qualified_queue_name_is_refused_naming_the_address(broker, stomp_client):
    added = broker.queue("cfg-eu-events")["messages_added"]
    client = stomp_client(broker)
    client.send("/topic/cfg-events::cfg-eu-events", "x", headers={"region": "eu"}, receipt=False)
    error = client.listener.wait_for_error()
    assert "send to /queue/cfg-events or /topic/cfg-events" in error.headers["message"]
    assert broker.queue("cfg-eu-events")["messages_added"] == added

"""Management actions over HTTP against a live broker: browse, purge, delete, move, retry,
on in-memory and paged queues, and the API's 400/404/405 answers (issue 18)."""

from __future__ import annotations

import threading

import test_paging_helpers as paging
from admin_http import browse, call, ok, path_of
from brokerproc import unique, wait_until

BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "zero.#": {"max-size-bytes": 0},
        "hold.#": {"max-size-bytes": "16KiB", "max-read-page-bytes": "1MiB",
                   "prefetch-page-bytes": "1MiB"},
        "dead.#": {"max-delivery-attempts": 1, "dead-letter-address": "dead.DLQ"},
    },
}


def test_purge_of_a_paged_queue_removes_every_message_and_its_page_files(broker, stomp_client):
    name = "zero." + unique("purge")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 300))
    paging.assert_paging(broker, name, paged=300)
    assert len(paging.page_files(broker, name)) > 5

    answer = ok(broker, "POST", path_of("queues", name, "purge"))

    assert answer == {"queue": name, "purged": 300}
    paging.wait_no_page_files(broker, name)
    queue = broker.wait_queue(name, messages=0, messages_paged=0)
    assert queue["messages_in_memory"] == 0
    assert broker.address(name)["paging"] is False
    # the queue still works: a new message is delivered, none of the purged ones
    producer = stomp_client(broker)
    paging.send_all(producer, f"/queue/{name}", ["after"])
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual")
    assert paging.take(consumer, 1) == ["after"]


def _readers(broker) -> tuple[int, int]:
    memory = ok(broker, "GET", "/api/broker")["memory"]
    return memory["page_readers"], memory["page_read_ahead_bytes"]


def test_purge_under_a_waiting_consumer_leaves_no_reader_holding_budget(broker, stomp_client):
    """A consumer whose selector matches nothing keeps its queue a reader of the memory budget
    while records are left on disk; once a purge took them all, the queue reads nothing and
    holds no share of the budget (a helper's find: it stayed a reader, its page reads' charge
    a quarter of the budget, until the consumer left)."""
    name = "zero." + unique("purge")
    before = _readers(broker)
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 300))
    paging.assert_paging(broker, name, paged=300)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual", headers={"selector": "nomatch = 1"})
    wait_until(lambda: _readers(broker)[0] > before[0], timeout=10)

    assert ok(broker, "POST", path_of("queues", name, "purge"))["purged"] == 300

    broker.wait_queue(name, messages=0, messages_paged=0, consumers=1)
    wait_until(lambda: _readers(broker) == before, timeout=10)


def test_purge_under_a_full_budget_takes_what_a_woken_reader_read_in_meanwhile(start_broker, stomp_client):
    """Releasing the queue's messages frees budget, and a reader waiting for it reads records
    in before the page files are purged: those are purged too (a helper's find: 376 of 400
    purged, 24 left in memory until a second purge)."""
    broker = start_broker({"broker": {"global-max-size": "64KiB"},
                           "address-settings": {"#": {"max-size-bytes": 0, "page-size-bytes": "64KiB"}}})
    name = unique("purgefull")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 400))
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual", headers={"selector": "nomatch = 1"})
    wait_until(lambda: broker.queue(name)["messages_in_memory"] > 0, timeout=10)

    assert ok(broker, "POST", path_of("queues", name, "purge"))["purged"] == 400

    queue = broker.queue(name)
    assert (queue["messages"], queue["messages_in_memory"], queue["messages_paged"]) == (0, 0, 0), queue


def test_purge_of_a_queue_half_read_into_memory_leaves_only_what_is_being_delivered(broker, stomp_client):
    name = "hold." + unique("purge")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 120))
    paging.assert_paging(broker, name)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual", headers={"activemq.prefetchSize": 3})
    held = paging.wait_frames(consumer, 3)
    assert paging.labels(held) == ["m0", "m1", "m2"]

    answer = ok(broker, "POST", path_of("queues", name, "purge"))

    assert answer["purged"] == 117
    broker.wait_queue(name, messages=3, messages_delivering=3, messages_paged=0)
    for frame in held:
        consumer.ack(frame, receipt=True)
    broker.wait_queue(name, messages=0)
    paging.wait_no_page_files(broker, name)
    consumer.listener.assert_no_more(3)


def test_purge_while_a_producer_sends_loses_nothing_sent_after_it_and_keeps_order(broker, stomp_client):
    name = "zero." + unique("purgerace")
    stop = threading.Event()
    producer = stomp_client(broker)

    def produce() -> None:
        n = 0
        while not stop.is_set():
            paging.send_all(producer, f"/queue/{name}", paging.numbered("b", 50, n))
            n += 50

    def queued() -> int:  # the queue is made by the first SEND, maybe after the first look
        status, body = broker.http_get(f"/api/queues/{name}")
        return int(body["messages"]) if status == 200 else 0

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        wait_until(lambda: queued() > 300, timeout=20)
        for _ in range(3):
            ok(broker, "POST", path_of("queues", name, "purge"))
    finally:
        stop.set()  # else a failure leaves it sending into the next test's broker
        thread.join(20)
    paging.send_all(producer, f"/queue/{name}", paging.numbered("after", 100))
    left = broker.queue(name)["messages"]
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual", headers={"activemq.prefetchSize": 1000})
    got = paging.take(consumer, left, timeout=20)
    assert got[-100:] == paging.numbered("after", 100)
    before = [int(label[1:]) for label in got[:-100]]
    assert before == sorted(before) and len(set(before)) == len(before)
    paging.wait_no_page_files(broker, name)


def test_purge_of_an_in_memory_queue_counts_what_it_removed(broker, stomp_client):
    name = unique("purge")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 5))
    assert ok(broker, "POST", path_of("queues", name, "purge")) == {"queue": name, "purged": 5}
    broker.wait_queue(name, messages=0)
    assert ok(broker, "POST", path_of("queues", name, "purge"))["purged"] == 0


def test_browse_shows_memory_and_paged_messages_in_order_with_their_fields(broker, stomp_client):
    name = "hold." + unique("browse")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 60),
                    headers={"color": "red"})
    paging.assert_paging(broker, name)

    page = browse(broker, name, limit=25)
    first = page["messages"][0]
    assert set(first) >= {"message_id", "headers", "body_preview", "size", "priority", "timestamp", "paged"}
    assert first["headers"]["color"] == "red" and first["priority"] == 4 and first["size"] == 1024
    assert page["more"] is True and page["count"] == 25

    seen = [m["message_id"] for m in page["messages"]]
    after = page["next_after"]
    while after is not None:
        page = browse(broker, name, limit=25, after=after)
        seen += [m["message_id"] for m in page["messages"]]
        after = page["next_after"]
    assert len(seen) == 60 and seen == sorted(seen)
    every = browse(broker, name, limit=100)["messages"]
    assert any(m["paged"] for m in every) and any(not m["paged"] for m in every)
    assert [_label(m) for m in every] == paging.numbered("m", 60)
    broker.wait_queue(name, messages=60)  # nothing was taken


def test_browse_with_a_selector_shows_only_matching_messages(broker, stomp_client):
    name = "zero." + unique("browsesel")
    producer = stomp_client(broker)
    paging.send_all(producer, f"/queue/{name}", paging.numbered("r", 10), headers={"color": "red"})
    paging.send_all(producer, f"/queue/{name}", paging.numbered("b", 10), headers={"color": "blue"})
    found = browse(broker, name, selector="color = 'blue'")["messages"]
    assert [_label(m) for m in found] == paging.numbered("b", 10)
    assert all(m["paged"] for m in found)


def test_move_of_a_paged_queue_keeps_the_order_and_leaves_no_page_files(broker, stomp_client):
    name, target = "zero." + unique("movefrom"), unique("moveto")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 200))
    paging.assert_paging(broker, name, paged=200)

    answer = ok(broker, "POST", path_of("queues", name, "move"), {"to": target})

    assert answer == {"queue": name, "to": target, "moved": 200}
    broker.wait_queue(name, messages=0)
    paging.wait_no_page_files(broker, name)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{target}", ack="client-individual")
    assert paging.take(consumer, 200, timeout=20) == paging.numbered("m", 200)


def test_move_with_a_selector_moves_only_matching_messages_in_order(broker, stomp_client):
    name, target = "hold." + unique("movesel"), unique("movesel.to")
    producer = stomp_client(broker)
    for n in range(40):
        parity = "even" if n % 2 == 0 else "odd"
        paging.send_all(producer, f"/queue/{name}", [f"m{n}"], headers={"parity": parity})
    paging.assert_paging(broker, name)

    answer = ok(broker, "POST", path_of("queues", name, "move"), {"to": target, "selector": "parity = 'odd'"})

    assert answer["moved"] == 20
    broker.wait_queue(name, messages=20)
    moved = stomp_client(broker)
    moved.subscribe(f"/queue/{target}", ack="client-individual")
    assert paging.take(moved, 20) == [f"m{n}" for n in range(1, 40, 2)]
    kept = stomp_client(broker)
    kept.subscribe(f"/queue/{name}", ack="client-individual")
    assert paging.take(kept, 20) == [f"m{n}" for n in range(0, 40, 2)]


def test_retry_sends_dead_letters_back_to_their_original_destination(broker, stomp_client):
    name = "dead." + unique("retry")
    paging.send_all(stomp_client(broker), f"/queue/{name}", ["d0", "d1", "d2"])
    paging.nack_all(stomp_client(broker), f"/queue/{name}", 3)
    wait_until(lambda: broker.queue("dead.DLQ")["messages"] >= 3)
    dead = [m for m in browse(broker, "dead.DLQ", limit=1000)["messages"]
            if m["headers"].get("original-destination") == f"/queue/{name}"]
    assert [_label(m) for m in dead] == ["d0", "d1", "d2"]

    answer = ok(broker, "POST", path_of("queues", "dead.DLQ", "retry"))

    assert answer["retried"] >= 3
    again = stomp_client(broker)
    again.subscribe(f"/queue/{name}", ack="client-individual")
    frames = paging.wait_frames(again, 3)
    assert paging.labels(frames) == ["d0", "d1", "d2"]
    assert all("original-destination" not in f.headers for f in frames)


def test_a_retried_dead_letter_with_a_duplicate_id_is_not_dropped_as_a_duplicate(broker, stomp_client):
    name = "dead." + unique("dupretry")
    stomp_client(broker).send(f"/queue/{name}", paging.body("dup0"), headers={"_AMQ_DUPL_ID": name},
                              receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual")
    consumer.nack(paging.wait_frames(consumer, 1)[0], receipt=True)
    consumer.disconnect()
    broker.wait_queue(name, messages=0)

    ok(broker, "POST", path_of("queues", "dead.DLQ", "retry"))

    broker.wait_queue(name, messages=1)
    again = stomp_client(broker)
    again.subscribe(f"/queue/{name}", ack="client-individual")
    assert paging.labels(paging.wait_frames(again, 1)) == ["dup0"]


def test_retry_of_a_topic_dead_letter_goes_back_to_its_own_subscription_only(broker, stomp_client):
    topic = "dead." + unique("topic")
    nacks_id, acks_id = unique("nacks"), unique("acks")
    nacking = stomp_client(broker, client_id=nacks_id)
    nacking.subscribe(f"/topic/{topic}", ack="client-individual", headers={"durable-subscription-name": "s"})
    acking = stomp_client(broker, client_id=acks_id)
    acking.subscribe(f"/topic/{topic}", ack="auto", headers={"durable-subscription-name": "s"})
    stomp_client(broker).send(f"/topic/{topic}", paging.body("t0"), receipt=True)
    paging.wait_frames(acking, 1)
    nacking.nack(paging.wait_frames(nacking, 1)[0], receipt=True)
    wait_until(lambda: any(m["headers"].get("original-destination") == f"/topic/{topic}"
                           for m in browse(broker, "dead.DLQ", limit=1000)["messages"]))
    nacking.disconnect()
    acking.disconnect()

    assert ok(broker, "POST", path_of("queues", "dead.DLQ", "retry"))["retried"] >= 1

    broker.wait_queue(f"{nacks_id}.s", messages=1)
    assert broker.queue(f"{acks_id}.s")["messages"] == 0  # it had it already: not sent again


def test_typo_queues_with_slash_hash_and_space_can_be_deleted(broker, stomp_client):
    client = stomp_client(broker)
    typo_hash, typo_space = "/queue/#" + unique("typo"), "a b " + unique("typo")
    client.send(f"/queue/{typo_hash}", "x", receipt=True)
    client.send(f"/queue/{typo_space}", "y", receipt=True)
    for name in (typo_hash, typo_space):
        status, queue, _ = call(broker, "GET", path_of("queues", name))
        assert status == 200 and queue["messages"] == 1

        assert ok(broker, "DELETE", path_of("queues", name)) == {"deleted": name}
        assert call(broker, "GET", path_of("queues", name))[0] == 404
        assert ok(broker, "DELETE", path_of("addresses", name)) == {"deleted": name, "queues": []}
        assert call(broker, "GET", path_of("addresses", name))[0] == 404
        assert call(broker, "DELETE", path_of("addresses", name))[0] == 404


def test_deleting_an_address_deletes_its_queues_and_their_page_files(broker, stomp_client):
    name = "zero." + unique("deladdr")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 100))
    paging.assert_paging(broker, name)
    answer = ok(broker, "DELETE", path_of("addresses", name))
    assert answer == {"deleted": name, "queues": [name]}
    assert call(broker, "GET", path_of("queues", name))[0] == 404
    wait_until(lambda: not paging.page_files(broker, name), timeout=10)
    # the name can be used again, from scratch
    paging.send_all(stomp_client(broker), f"/queue/{name}", ["again"])
    broker.wait_queue(name, messages=1)


def test_deleting_a_queue_ends_its_consumers_with_an_error_naming_it(broker, stomp_client):
    name = unique("delconsumed")
    paging.send_all(stomp_client(broker), f"/queue/{name}", ["one"])
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual")
    paging.wait_frames(consumer, 1)
    ok(broker, "DELETE", path_of("queues", name))
    error = consumer.listener.wait_for_error()
    assert name in error.headers["message"]
    assert call(broker, "GET", path_of("queues", name))[0] == 404


def test_unknown_names_are_404_and_wrong_methods_405(broker):
    missing = unique("missing")
    for method, action in (("GET", "messages"), ("POST", "purge"), ("POST", "retry"), ("DELETE", "")):
        status, answer, _ = call(broker, method, path_of("queues", missing, action))
        assert status == 404 and missing in answer["error"], (method, action, answer)
    status, answer, _ = call(broker, "POST", path_of("queues", missing, "move"), {"to": "x"})
    assert status == 404
    assert call(broker, "DELETE", path_of("addresses", missing))[0] == 404
    for method, path in (("GET", path_of("queues", missing, "purge")), ("POST", path_of("queues", missing)),
                         ("PUT", "/api/queues"), ("POST", "/health"), ("DELETE", "/api/connections"),
                         ("GET", path_of("queues", missing, "move"))):
        status, answer, headers = call(broker, method, path)
        assert status == 405, (method, path, status, answer)
        assert "error" in answer and headers.get("Allow")
    assert call(broker, "GET", "/api/nothing-here")[0] == 404


def test_bad_bodies_parameters_and_selectors_are_400_and_change_nothing(broker, stomp_client):
    name = unique("bad")
    paging.send_all(stomp_client(broker), f"/queue/{name}", ["kept"])
    move = path_of("queues", name, "move")
    for raw in (b"{not json", b"[1, 2]", b'{"to": 5}', b'{"selector": "a = 1"}', b'{"to": "x", "what": 1}',
                b'{"to": "x", "selector": "color = = 1"}'):
        status, answer, _ = call(broker, "POST", move, raw=raw)
        assert status == 400 and answer["error"], (raw, answer)
    for query in ("limit=x", "limit=-1", "after=abc", "selector=a%20%3D%3D"):
        status, answer, _ = call(broker, "GET", path_of("queues", name, "messages") + "?" + query)
        assert status == 400 and answer["error"], (query, answer)
    for query in ("offset=-2", "limit=no", "order=up", "sort=nosuchfield"):
        status, answer, _ = call(broker, "GET", f"/api/queues?{query}")
        assert status == 400 and answer["error"], (query, answer)
    broker.wait_queue(name, messages=1)
    assert call(broker, "GET", "/api/addresses/x?y")[0] in (404, 200)


def test_queue_and_address_lists_page_sort_and_filter_on_the_server(broker, stomp_client):
    prefix = unique("listing")
    client = stomp_client(broker)
    for n in range(12):
        for _ in range(n % 4):
            client.send(f"/queue/{prefix}.{n:02d}", "x")
        client.send(f"/queue/{prefix}.{n:02d}", "x", receipt=True)

    page = ok(broker, "GET", f"/api/queues?filter={prefix}&offset=2&limit=5")
    assert page["total"] == 12 and page["offset"] == 2 and page["limit"] == 5
    assert [q["name"] for q in page["queues"]] == [f"{prefix}.{n:02d}" for n in range(2, 7)]
    desc = ok(broker, "GET", f"/api/queues?filter={prefix.upper()}&order=desc&limit=3")
    assert [q["name"] for q in desc["queues"]] == [f"{prefix}.{n:02d}" for n in (11, 10, 9)]
    by_count = ok(broker, "GET", f"/api/queues?filter={prefix}&sort=messages&order=desc")
    counts = [q["messages"] for q in by_count["queues"]]
    assert counts == sorted(counts, reverse=True) and counts[0] == 4
    addresses = ok(broker, "GET", f"/api/addresses?filter={prefix}&limit=4")
    assert addresses["total"] == 12 and len(addresses["addresses"]) == 4
    every = ok(broker, "GET", "/api/queues")  # unpaged, as before: every queue, by name
    names = [q["name"] for q in every["queues"]]
    assert names == sorted(names) and every["total"] == len(names)


def test_connections_list_peer_user_version_subscriptions_and_in_flight(broker, stomp_client):
    name = unique("conns")
    paging.send_all(stomp_client(broker), f"/queue/{name}", ["a", "b"])
    consumer = stomp_client(broker, version="1.1", connect_headers={"login": "watcher"},
                            client_id=unique("cid"))
    consumer.subscribe(f"/queue/{name}", ack="client-individual", headers={"selector": "JMSPriority > 0"})
    paging.wait_frames(consumer, 2)

    def mine() -> dict | None:
        found = ok(broker, "GET", "/api/connections")["connections"]
        return next((c for c in found if c["subscriptions"] and c["subscriptions"][0]["queue"] == name), None)

    wait_until(lambda: mine() is not None)
    connection = mine()
    assert connection is not None
    assert connection["peer"].startswith("127.0.0.1:")
    assert connection["user"] == "watcher" and connection["version"] == "1.1"
    assert connection["in_flight"] == 2 and connection["connected_since"] > 0
    sub = connection["subscriptions"][0]
    assert (sub["selector"], sub["ack"], sub["in_flight"]) == ("JMSPriority > 0", "client-individual", 2)


def test_health_is_ready_once_started(broker):
    status, answer, _ = call(broker, "GET", "/health")
    assert status == 200 and answer == {"status": "ready", "ready": True, "live": True}
    assert call(broker, "GET", "/health/live")[0] == 200
    assert call(broker, "GET", "/health/ready")[0] == 200


def _label(message: dict) -> str:
    return message["body_preview"].split("|", 1)[0]

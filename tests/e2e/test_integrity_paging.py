"""Integrity of paged data with several queues, read limits and restarts (issue: integrity).

Each test is a user scenario that lost or stranded receipted messages before its fix:
a page completed for a queue while it was still being written, a cursor that stopped reading
a page that rolled under it, receipts that came before the address's records were durable.
"""

from __future__ import annotations

from brokerproc import unique
from test_paging_helpers import (
    body,
    durable,
    label,
    labels,
    numbered,
    send_all,
    take,
    wait_frames,
    wait_no_page_files,
)

PAGE_ALL = {"address-settings": {"#": {"max-size-bytes": 0, "page-size-bytes": "16KiB"}}}


def test_durable_subscriber_keeps_messages_sent_while_away_across_a_clean_restart(
    start_broker, stomp_client
):
    proc = start_broker(PAGE_ALL)
    topic = unique("topic")
    a_id, b_id = unique("a"), unique("b")
    durable(stomp_client, proc, b_id, topic, "sub").disconnect()
    a = durable(stomp_client, proc, a_id, topic, "sub")
    producer = stomp_client(proc)
    first = send_all(producer, f"/topic/{topic}", numbered("m", 5))
    assert take(a, 5) == first
    a.disconnect()
    later = send_all(producer, f"/topic/{topic}", numbered("m", 5, start=5))
    producer.disconnect()

    proc.restart()
    a = durable(stomp_client, proc, a_id, topic, "sub")
    assert take(a, 5) == later
    b = durable(stomp_client, proc, b_id, topic, "sub")
    assert take(b, 10) == first + later


def test_durable_subscribers_keep_receipted_paged_sends_after_kill(start_broker, stomp_client):
    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0, "page-size-bytes": "8KiB"}}})
    topic = unique("topic")
    ids = [unique(f"s{n}") for n in range(3)]
    for client_id in ids:
        durable(stomp_client, proc, client_id, topic, "sub").disconnect()
    sent = send_all(stomp_client(proc), f"/topic/{topic}", numbered("m", 3))
    proc.restart(kill=True)
    for client_id in ids:
        subscriber = durable(stomp_client, proc, client_id, topic, "sub")
        assert take(subscriber, 3) == sent, client_id
        subscriber.disconnect()


def test_paged_messages_are_not_stranded_behind_a_read_limit(start_broker, stomp_client):
    proc = start_broker({"address-settings": {"#": {
        "max-size-bytes": 0, "page-size-bytes": "8KiB", "max-read-page-messages": 2,
    }}})
    queue = unique("limited")
    producer = stomp_client(proc)
    sent = send_all(producer, f"/queue/{queue}", numbered("m", 3))
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual",
                       headers={"activemq.prefetchSize": 1})
    sent += send_all(producer, f"/queue/{queue}", numbered("m", 20, start=3))
    assert take(consumer, 23, timeout=15) == sent
    proc.wait_queue(queue, messages=0)
    wait_no_page_files(proc, queue)
    assert not proc.address(queue)["paging"]


def test_one_consuming_subscriber_is_not_stalled_by_two_holding_their_prefetch(
    start_broker, stomp_client
):
    proc = start_broker({"address-settings": {"#": {
        "max-size-bytes": 0, "page-size-bytes": "8KiB", "max-read-page-messages": 5,
    }}})
    topic = unique("topic")
    holders = []
    for n in range(2):
        holder = stomp_client(proc, client_id=unique(f"h{n}"))
        holder.subscribe(f"/topic/{topic}", ack="client-individual", headers={
            "durable-subscription-name": "sub", "activemq.prefetchSize": 3})
        holders.append(holder)
    consumer = durable(stomp_client, proc, unique("c"), topic, "sub")
    sent = send_all(stomp_client(proc), f"/topic/{topic}", numbered("m", 100))
    assert take(consumer, 100, timeout=20) == sent
    for holder in holders:
        assert labels(wait_frames(holder, 3)) == sent[:3]


def test_paged_send_to_a_new_address_survives_a_kill_right_after_its_receipt(
    start_broker, stomp_client
):
    proc = start_broker(PAGE_ALL)
    queue = unique("fresh")
    producer = stomp_client(proc)
    producer.send(f"/queue/{queue}", body("only"), headers={"persistent": "true"}, receipt=True)
    proc.restart(kill=True)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    assert label(wait_frames(consumer, 1)[0]) == "only"


# -- transactions ---------------------------------------------------------------------------


def test_commit_of_many_sends_holds_no_more_than_max_size_messages_in_memory(
    start_broker, stomp_client
):
    proc = start_broker({"address-settings": {"#": {"max-size-messages": 10, "page-size-bytes": "16KiB"}}})
    queue = unique("tx")
    producer = stomp_client(proc)
    producer.begin("t1")
    names = numbered("m", 100)
    for name in names:
        producer.send(f"/queue/{queue}", body(name, 256), headers={"persistent": "true",
                                                                  "transaction": "t1"})
    producer.commit("t1")
    info = proc.address(queue)
    assert info["messages_in_memory"] <= 10
    assert info["messages"] == 100
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual", headers={"activemq.prefetchSize": 5})
    assert take(consumer, 100, timeout=20) == names


def test_a_commit_spanning_memory_and_page_files_keeps_the_senders_order(start_broker, stomp_client):
    """Two sends of the commit are held in memory (journal), four page; the SEND right after
    the COMMIT, not waiting for its receipt, still comes after all six, before and after a
    kill once it is receipted."""
    proc = start_broker({"address-settings": {"#": {"max-size-messages": 2, "page-size-bytes": "8KiB"}}})
    queue = unique("tx")
    producer = stomp_client(proc)
    producer.begin("t1")
    names = numbered("m", 6)
    for name in names:
        producer.send(f"/queue/{queue}", body(name), headers={"persistent": "true", "transaction": "t1"})
    producer.commit("t1", receipt=False)
    producer.send(f"/queue/{queue}", body("after"), headers={"persistent": "true"}, receipt=True)
    assert proc.queue(queue)["messages"] == 7
    proc.restart(kill=True)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    assert take(consumer, 7) == [*names, "after"]


def test_a_send_after_a_commit_that_pages_elsewhere_comes_after_the_commits_send(
    start_broker, stomp_client
):
    """The commit pages to one address and holds its send to another in memory; a SEND to
    that other address right behind the COMMIT (no wait for its receipt) must not overtake
    the commit's send, which takes effect only once the page file is written."""
    paged, plain = unique("paged"), unique("plain")
    proc = start_broker({"address-settings": {paged: {"max-size-bytes": 0}}})
    producer = stomp_client(proc)
    for attempt in range(5):
        producer.begin(f"t{attempt}")
        for queue in (paged, plain):
            producer.send(f"/queue/{queue}", body(f"tx{attempt}"), headers={
                "persistent": "true", "transaction": f"t{attempt}"})
        producer.commit(f"t{attempt}", receipt=False)
        producer.send(f"/queue/{plain}", body(f"after{attempt}"), headers={"persistent": "true"},
                      receipt=True)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{plain}", ack="client-individual")
    assert take(consumer, 10) == [name for n in range(5) for name in (f"tx{n}", f"after{n}")]


def test_a_commit_to_two_paging_queues_and_an_ack_survives_a_kill_after_its_receipt(
    start_broker, stomp_client
):
    """One transaction acknowledges a paged message of one queue and pages a send to it and
    to another: after its receipt, a kill keeps all three effects."""
    proc = start_broker(PAGE_ALL)
    left, right = unique("left"), unique("right")
    send_all(stomp_client(proc), f"/queue/{left}", ["first"])
    worker = stomp_client(proc)
    worker.subscribe(f"/queue/{left}", ack="client-individual")
    (delivered,) = wait_frames(worker, 1)
    worker.begin("t1")
    worker.ack(delivered, transaction="t1")
    for queue in (left, right):
        worker.send(f"/queue/{queue}", body(f"{queue}-tx"), headers={"persistent": "true",
                                                                      "transaction": "t1"})
    worker.commit("t1")
    proc.restart(kill=True)
    for queue in (left, right):
        reader = stomp_client(proc)
        reader.subscribe(f"/queue/{queue}", ack="client-individual")
        assert take(reader, 1) == [f"{queue}-tx"], queue
        reader.disconnect()


def test_fail_policy_refuses_a_whole_commit_that_does_not_fit(start_broker, stomp_client):
    proc = start_broker({"address-settings": {"#": {"max-size-messages": 10,
                                                    "address-full-policy": "FAIL"}}})
    queue = unique("tx")
    producer = stomp_client(proc)
    producer.begin("t1")
    for name in numbered("m", 20):
        producer.send(f"/queue/{queue}", body(name, 256), headers={"persistent": "true",
                                                                  "transaction": "t1"})
    producer.commit("t1", receipt=False)
    error = producer.listener.wait_for_error()
    assert "full" in error.headers["message"]
    assert proc.queue(queue)["messages"] == 0
    assert proc.address(queue)["messages_in_memory"] == 0


# -- dead letters ---------------------------------------------------------------------------


def test_message_moved_to_a_full_fail_policy_dead_letter_queue_is_kept(start_broker, stomp_client):
    proc = start_broker({"address-settings": {
        "#": {"max-delivery-attempts": 1, "page-size-bytes": "16KiB"},
        "DLQ": {"max-size-messages": 1, "address-full-policy": "FAIL"},
    }})
    queue = unique("poison")
    producer = stomp_client(proc)
    send_all(producer, "/queue/DLQ", ["filler"])
    send_all(producer, f"/queue/{queue}", numbered("p", 3))
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual", headers={"activemq.prefetchSize": 10})
    for frame in wait_frames(consumer, 3):
        consumer.nack(frame, receipt=True)
    assert not consumer.listener.errors
    proc.wait_queue(queue, messages=0, messages_killed=3)
    proc.wait_queue("DLQ", messages=4)
    reader = stomp_client(proc)
    reader.subscribe("/queue/DLQ", ack="client-individual", headers={"activemq.prefetchSize": 10})
    assert sorted(labels(wait_frames(reader, 4))) == sorted(["filler", "p0", "p1", "p2"])


def test_message_whose_dead_letter_address_cannot_be_created_stays_in_its_queue(
    start_broker, stomp_client
):
    proc = start_broker({"address-settings": {
        "#": {"max-delivery-attempts": 1, "dead-letter-address": "nowhere"},
        "nowhere": {"auto-create-addresses": False},
    }})
    queue = unique("poison")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{queue}", ["p0"])
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual",
                       headers={"activemq.prefetchSize": 1})
    first = wait_frames(consumer, 1)[0]
    assert label(first) == "p0"
    consumer.nack(first, receipt=True)
    assert not consumer.listener.errors
    second = wait_frames(consumer, 2)[1]
    assert label(second) == "p0"
    consumer.ack(second, receipt=True)
    proc.wait_queue(queue, messages=0, messages_killed=0)


# -- found by the model-based test ----------------------------------------------------------


def test_selective_consumer_gets_a_match_paged_while_the_queue_read_is_held_by_its_limits(
    start_broker, stomp_client
):
    """Model-based test, seed 2000: the new match was written after the consumer's look-ahead
    had read the live page, and nothing looked again."""
    proc = start_broker({"address-settings": {"#": {
        "max-size-bytes": 0, "page-size-bytes": "16KiB",
        "max-read-page-messages": 5, "prefetch-page-messages": 4,
    }}})
    queue = unique("held")
    producer = stomp_client(proc)
    colors = ["green", "red", "blue", "green", "red", "blue", "blue", "green", "red", "green",
              "blue", "blue"]
    for n, color in enumerate(colors):
        producer.send(f"/queue/{queue}", body(f"m{n}"), headers={"persistent": "true", "color": color},
                      receipt=True)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="auto",
                       headers={"activemq.prefetchSize": 5, "selector": "color <> 'blue'"})
    producer.send(f"/queue/{queue}", body("late"), headers={"persistent": "true", "color": "green"},
                  receipt=True)
    wanted = [f"m{n}" for n, color in enumerate(colors) if color != "blue"] + ["late"]
    assert sorted(labels(wait_frames(consumer, len(wanted)))) == sorted(wanted)


def test_acked_non_persistent_paged_message_does_not_hide_a_persistent_one_after_a_kill(
    start_broker, stomp_client
):
    """Model-based test, seed 43: the journaled ack of a non-persistent paged record was
    counted against the page's persistent records at recovery, so a receipted one vanished."""
    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0, "page-size-bytes": "32KiB"}}})
    queue = unique("mixed")
    reds = stomp_client(proc)
    reds.subscribe(f"/queue/{queue}", ack="auto",
                   headers={"activemq.prefetchSize": 5, "selector": "color = 'red'"})
    producer = stomp_client(proc)
    producer.send(f"/queue/{queue}", body("blue0"), headers={"persistent": "true", "color": "blue"},
                  receipt=True)
    producer.send(f"/queue/{queue}", body("red"), headers={"color": "red"}, receipt=True)
    producer.send(f"/queue/{queue}", body("blue1"), headers={"persistent": "true", "color": "blue"},
                  receipt=True)
    assert labels(wait_frames(reds, 1)) == ["red"]
    proc.restart(kill=True)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    assert take(consumer, 2) == ["blue0", "blue1"]


def test_pending_transactional_sends_count_toward_and_are_bounded_by_global_max_size(
    start_broker, stomp_client
):
    proc = start_broker({"broker": {"global-max-size": "256KiB"}})
    queue = unique("bigtx")
    producer = stomp_client(proc)
    producer.begin("t1")
    sent = 0
    listener = producer.listener
    while not listener.errors and sent < 200:
        receipt = f"r{sent}"
        producer.conn.send(f"/queue/{queue}", body(f"m{sent}", 4096),
                           headers={"transaction": "t1", "receipt": receipt})
        listener.wait(lambda r=receipt: r in listener.receipts or bool(listener.errors), 5, receipt)
        sent += 1
    error = listener.wait_for_error()
    assert "global-max-size" in error.headers["message"]
    assert 40 <= sent < 200
    other = stomp_client(proc)
    assert send_all(other, f"/queue/{queue}", ["after"]) == ["after"]
    proc.wait_queue(queue, messages=1)


def test_selective_consumer_does_not_skip_a_match_on_a_page_that_rolled_before_it_was_written(
    start_broker, stomp_client
):
    """Model-based test, seed 3001: the look-ahead moved on to the next page while the rolled
    page's last records were still being written, and never came back for them."""
    proc = start_broker({"address-settings": {"#": {
        "max-size-messages": 2, "page-size-bytes": "4KiB", "max-read-page-messages": 3,
    }}})
    queue = unique("rolled")
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client",
                       headers={"activemq.prefetchSize": 1000, "selector": "color IN ('blue', 'green')"})
    producer = stomp_client(proc)
    colors = ["red", "blue", "green", "blue", "green", "blue", "green", "green"]
    for n, color in enumerate(colors):
        producer.conn.send(f"/queue/{queue}", body(f"m{n}", 700),
                           headers={"persistent": "true", "color": color})
    wanted = [f"m{n}" for n, color in enumerate(colors) if color != "red"]
    assert sorted(labels(wait_frames(consumer, len(wanted)))) == wanted


def test_unacked_messages_of_a_connection_closed_at_shutdown_are_not_auto_acked_by_another(
    start_broker, stomp_client
):
    """Model-based test, seed 5021: at a clean shutdown the deliveries one connection returned
    were dispatched to an auto-ack consumer of another connection being closed too, and so
    acknowledged without ever reaching anyone. Racy; three rounds make it likely."""
    proc = start_broker({"address-settings": {"#": {
        "max-size-messages": 1, "page-size-bytes": "32KiB", "prefetch-page-messages": 1}}})
    for round_ in range(3):
        queue = unique(f"shutdown{round_}")
        auto = stomp_client(proc)
        auto.subscribe(f"/queue/{queue}", ack="auto", headers={"activemq.prefetchSize": 2})
        holder = stomp_client(proc)
        holder.subscribe(f"/queue/{queue}", ack="client-individual", headers={"activemq.prefetchSize": 2})
        send_all(stomp_client(proc), f"/queue/{queue}", numbered("m", 5))
        held = wait_frames(holder, 2)
        wait_frames(auto, 3)
        proc.restart()
        assert proc.queue(queue)["messages"] == 2, f"round {round_}: {labels(held)} held at the stop"

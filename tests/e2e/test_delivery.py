"""Delivery semantics: ack modes, NACK and redelivery, dead letters, prefetch, priority,
expiry, transactions."""

from __future__ import annotations

from brokerproc import bodies, encode_frame, now_ms

MAX_DELIVERY_ATTEMPTS = 3
BROKER_CONFIG = {"address-settings": {"#": {"max-delivery-attempts": MAX_DELIVERY_ATTEMPTS}}}


def _from_original(frame, queue_name) -> bool:
    return frame.headers.get("original-destination") in (queue_name, f"/queue/{queue_name}")


def _moved_messages(broker, stomp_client, target, queue_name, count=1, timeout=5.0):
    """Messages from `queue_name` that arrive on queue `target` (DLQ, ExpiryQueue)."""
    reader = stomp_client(broker)
    reader.subscribe(f"/queue/{target}")

    def mine():
        return [f for f in reader.messages if _from_original(f, queue_name)]

    reader.listener.wait(lambda: len(mine()) >= count, timeout,
                         f"{count} message(s) from {queue_name} on {target}")
    return mine()


# -- acknowledgement modes ------------------------------------------------------------------


def test_auto_ack_consumes_the_message_on_delivery(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    client.subscribe(f"/queue/{queue_name}", ack="auto")
    client.send(f"/queue/{queue_name}", "auto", receipt=True)
    assert bodies(client.wait_for(1)) == ["auto"]
    broker.wait_queue(queue_name, messages=0, messages_acknowledged=1, messages_delivering=0)


def test_client_ack_is_cumulative(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client")
    for n in range(3):
        consumer.send(f"/queue/{queue_name}", f"m{n}", receipt=True)
    _, second, _ = consumer.wait_for(3)
    consumer.ack(second, receipt=True)
    broker.wait_queue(queue_name, messages=1, messages_acknowledged=2)
    consumer.drop()

    successor = stomp_client(broker)
    successor.subscribe(f"/queue/{queue_name}", ack="client")
    (redelivered,) = successor.wait_for(1)
    assert redelivered.body == "m2"
    assert redelivered.headers.get("redelivered") == "true"
    successor.listener.assert_no_more(1)


def test_client_individual_ack_acknowledges_only_that_message(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    for n in range(3):
        consumer.send(f"/queue/{queue_name}", f"m{n}", receipt=True)
    _, second, _ = consumer.wait_for(3)
    consumer.ack(second, receipt=True)
    broker.wait_queue(queue_name, messages=2, messages_acknowledged=1)
    consumer.drop()

    successor = stomp_client(broker)
    successor.subscribe(f"/queue/{queue_name}", ack="client-individual")
    frames = successor.wait_for(2)
    assert bodies(frames) == ["m0", "m2"]
    assert all(f.headers.get("redelivered") == "true" for f in frames)
    successor.listener.assert_no_more(2)


def test_unacked_messages_count_as_delivering(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "held", receipt=True)
    consumer.wait_for(1)
    broker.wait_queue(queue_name, messages=1, messages_delivering=1, consumers=1)


# -- NACK, redelivery, dead letters ---------------------------------------------------------


def test_nack_redelivers_with_redelivered_header(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "try again", headers={"mark": "1"}, receipt=True)
    (first,) = consumer.wait_for(1)
    assert first.headers.get("redelivered") == "false"
    consumer.nack(first, receipt=True)
    _, again = consumer.wait_for(2)
    assert again.body == "try again"
    assert again.headers.get("redelivered") == "true"
    assert again.headers["message-id"] == first.headers["message-id"]
    assert again.headers["mark"] == "1"
    consumer.ack(again, receipt=True)
    broker.wait_queue(queue_name, messages=0, messages_acknowledged=1)


def test_disconnect_without_ack_redelivers_to_the_next_consumer(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "unfinished", receipt=True)
    consumer.wait_for(1)
    consumer.disconnect()
    successor = stomp_client(broker)
    successor.subscribe(f"/queue/{queue_name}", ack="client-individual")
    (again,) = successor.wait_for(1)
    assert (again.body, again.headers.get("redelivered")) == ("unfinished", "true")


def test_vanished_consumer_without_ack_redelivers_to_the_next_consumer(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client")
    consumer.send(f"/queue/{queue_name}", "orphan", receipt=True)
    consumer.wait_for(1)
    consumer.drop()  # socket closed without DISCONNECT
    successor = stomp_client(broker)
    successor.subscribe(f"/queue/{queue_name}", ack="client")
    (again,) = successor.wait_for(1)
    assert (again.body, again.headers.get("redelivered")) == ("orphan", "true")


def test_nacked_max_delivery_attempts_times_goes_to_dlq_with_original_destination(
    broker, stomp_client, queue_name
):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "poison", headers={"mark": "p"}, receipt=True)
    for attempt in range(1, MAX_DELIVERY_ATTEMPTS + 1):
        frame = consumer.wait_for(attempt)[-1]
        assert frame.body == "poison"
        consumer.nack(frame, receipt=True)
    consumer.listener.assert_no_more(MAX_DELIVERY_ATTEMPTS)

    (dead,) = _moved_messages(broker, stomp_client, "DLQ", queue_name)
    assert dead.body == "poison"
    assert dead.headers["mark"] == "p"
    broker.wait_queue(queue_name, messages=0, messages_killed=1)
    assert broker.address("DLQ")["routing_type"] == "anycast"


def test_dead_lettered_copy_of_a_message_with_expires_never_expires(broker, stomp_client, queue_name):
    """As Artemis resets a moved copy's expiration: the DLQ's consumer is not told a time
    (here an hour ahead) that no longer applies to the copy."""
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "poison", headers={"expires": now_ms() + 3_600_000}, receipt=True)
    for attempt in range(1, MAX_DELIVERY_ATTEMPTS + 1):
        consumer.nack(consumer.wait_for(attempt)[-1], receipt=True)
    (dead,) = _moved_messages(broker, stomp_client, "DLQ", queue_name)
    assert dead.headers["expires"] == "0"
    assert "_AMQ_ACTUAL_EXPIRY" not in dead.headers


def test_consumer_vanishing_max_delivery_attempts_times_moves_message_to_dlq(
    broker, stomp_client, queue_name
):
    stomp_client(broker).send(f"/queue/{queue_name}", "crashes consumers", receipt=True)
    for attempt in range(MAX_DELIVERY_ATTEMPTS):
        consumer = stomp_client(broker)
        consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
        (frame,) = consumer.wait_for(1)
        assert frame.headers.get("redelivered") == ("true" if attempt else "false")
        consumer.drop()
    (dead,) = _moved_messages(broker, stomp_client, "DLQ", queue_name)
    assert dead.body == "crashes consumers"
    broker.wait_queue(queue_name, messages=0, messages_killed=1)


def test_delivery_attempts_count_across_restarts_and_still_end_in_the_dlq(start_broker, stomp_client):
    """(Before: a restart forgot how often a persistent message had been delivered, so it
    came back `redelivered:false` and a poison message never reached the DLQ when the
    broker restarted between attempts.)"""
    proc = start_broker(BROKER_CONFIG)
    stomp_client(proc).send("/queue/poison", "crashes consumers", headers={"persistent": "true"},
                            receipt=True)
    for attempt in range(MAX_DELIVERY_ATTEMPTS):
        consumer = stomp_client(proc)
        consumer.subscribe("/queue/poison", ack="client-individual")
        (frame,) = consumer.wait_for(1)
        assert frame.headers.get("redelivered") == ("true" if attempt else "false")
        consumer.disconnect()  # given back unacknowledged
        proc.restart()
    (dead,) = _moved_messages(proc, stomp_client, "DLQ", "poison")
    assert dead.body == "crashes consumers"
    proc.wait_queue("poison", messages=0)  # settled once the copy is durable, maybe after its delivery


def test_acks_written_with_unsubscribe_or_disconnect_start_no_new_deliveries(
    broker, raw_stomp, stomp_client, queue_name
):
    """The room a read's ACKs make is filled after the read's frames: a subscription the same
    read ends gets nothing more, so no message it never saw spends a delivery attempt."""
    producer = stomp_client(broker)
    for ending in ("UNSUBSCRIBE", "DISCONNECT"):
        queue = f"{queue_name}-{ending.lower()}"
        for n in range(20):
            producer.send(f"/queue/{queue}", f"m{n}", receipt=True)
        raw = raw_stomp(broker)
        raw.connect()
        raw.send_frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "s", "ack": "client-individual",
                                     "activemq.prefetchSize": "5"})
        got = [raw.read_frame() for _ in range(5)]
        burst = b"".join(encode_frame("ACK", {"id": f.headers["ack"]}) for f in got)
        ends = {"id": "s", "receipt": "end"} if ending == "UNSUBSCRIBE" else {"receipt": "end"}
        burst += encode_frame(ending, ends)
        raw.send(burst)
        after = raw.read_until_receipt("end")
        assert [f.command for f in after] == ["RECEIPT"], f"{ending}: {[f.command for f in after]}"
        raw.close()
        broker.wait_queue(queue, messages=15, messages_acknowledged=5, messages_delivering=0,
                          messages_killed=0)
        reader = stomp_client(broker)
        reader.subscribe(f"/queue/{queue}")
        frames = reader.wait_for(15)
        assert bodies(frames) == [f"m{n}" for n in range(5, 20)]
        assert {f.headers.get("redelivered") for f in frames} == {"false"}


# -- prefetch -------------------------------------------------------------------------------


def test_prefetch_one_holds_the_second_message_until_the_first_is_acked(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual",
                       headers={"activemq.prefetchSize": 1})
    for n in range(2):
        consumer.send(f"/queue/{queue_name}", f"m{n}", receipt=True)
    (first,) = consumer.wait_for(1)
    consumer.listener.assert_no_more(1)
    consumer.ack(first)
    assert bodies(consumer.wait_for(2)) == ["m0", "m1"]


def test_prefetch_count_header_limits_messages_in_flight(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual", headers={"prefetch-count": 2})
    for n in range(4):
        consumer.send(f"/queue/{queue_name}", f"m{n}", receipt=True)
    first, _ = consumer.wait_for(2)
    consumer.listener.assert_no_more(2)
    consumer.ack(first)
    consumer.wait_for(3)
    consumer.listener.assert_no_more(3)


def test_two_consumers_with_prefetch_one_share_the_work(broker, stomp_client, queue_name):
    workers = [stomp_client(broker), stomp_client(broker)]
    for worker in workers:
        worker.subscribe(f"/queue/{queue_name}", ack="client-individual",
                         headers={"activemq.prefetchSize": 1})
    producer = stomp_client(broker)
    for n in range(4):
        producer.send(f"/queue/{queue_name}", f"job{n}", receipt=True)
    for worker in workers:
        worker.wait_for(1)
        worker.listener.assert_no_more(1, within=0.3)
    for worker in workers:
        worker.ack(worker.messages[0])
    done = [bodies(worker.wait_for(2)) for worker in workers]
    assert sorted(done[0] + done[1]) == [f"job{n}" for n in range(4)]


# -- priority -------------------------------------------------------------------------------


def test_higher_priority_message_is_delivered_first(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    producer.send(f"/queue/{queue_name}", "low", headers={"priority": 1}, receipt=True)
    producer.send(f"/queue/{queue_name}", "default", receipt=True)
    producer.send(f"/queue/{queue_name}", "high", headers={"priority": 9}, receipt=True)
    producer.send(f"/queue/{queue_name}", "low again", headers={"priority": 1}, receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    assert bodies(consumer.wait_for(4)) == ["high", "default", "low", "low again"]


def test_priority_past_nine_is_delivered_as_nine_and_says_so(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    producer.send(f"/queue/{queue_name}", "nine", headers={"priority": 9}, receipt=True)
    producer.send(f"/queue/{queue_name}", "twelve", headers={"priority": 12}, receipt=True)
    producer.send(f"/queue/{queue_name}", "below", headers={"priority": -3}, receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    frames = consumer.wait_for(3)
    assert [(f.body, f.headers["priority"]) for f in frames] == [
        ("nine", "9"), ("twelve", "9"), ("below", "0")]


# -- expiry ---------------------------------------------------------------------------------


def test_message_already_expired_goes_to_expiry_queue_not_to_consumers(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    producer.send(f"/queue/{queue_name}", "stale", headers={"expires": now_ms() - 1000, "mark": "e"},
                  receipt=True)
    producer.send(f"/queue/{queue_name}", "fresh", receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    assert bodies(consumer.wait_for(1)) == ["fresh"]
    consumer.listener.assert_no_more(1)
    (expired,) = _moved_messages(broker, stomp_client, "ExpiryQueue", queue_name)
    assert (expired.body, expired.headers["mark"]) == ("stale", "e")
    broker.wait_queue(queue_name, messages_expired=1)
    assert broker.address("ExpiryQueue")["routing_type"] == "anycast"


def test_expired_copy_says_expires_zero_and_when_it_expired(broker, stomp_client, queue_name):
    sent_at = now_ms()
    stomp_client(broker).send(f"/queue/{queue_name}", "stale", headers={"expires": sent_at - 1000},
                              receipt=True)
    stomp_client(broker).subscribe(f"/queue/{queue_name}")  # a dispatch finds it expired
    (expired,) = _moved_messages(broker, stomp_client, "ExpiryQueue", queue_name)
    assert expired.headers["expires"] == "0"
    assert sent_at <= int(expired.headers["_AMQ_ACTUAL_EXPIRY"]) <= now_ms()


def test_message_expiring_while_queued_goes_to_expiry_queue(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    producer.send(f"/queue/{queue_name}", "short-lived", headers={"expires": now_ms() + 300}, receipt=True)
    broker.wait_queue(queue_name, timeout=6, messages=0, messages_expired=1)
    (expired,) = _moved_messages(broker, stomp_client, "ExpiryQueue", queue_name)
    assert expired.body == "short-lived"


def test_expires_zero_means_never(broker, stomp_client, queue_name):
    stomp_client(broker).send(f"/queue/{queue_name}", "forever", headers={"expires": 0}, receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    assert bodies(consumer.wait_for(1)) == ["forever"]
    assert broker.queue(queue_name)["messages_expired"] == 0


# -- transactions ---------------------------------------------------------------------------


def test_transactional_send_is_delivered_only_on_commit(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    producer = stomp_client(broker)
    producer.begin("tx1")
    for n in range(3):
        producer.send(f"/queue/{queue_name}", f"tx{n}", headers={"transaction": "tx1"}, receipt=True)
    consumer.listener.assert_no_more(0)
    assert broker.queue(queue_name)["messages_added"] == 0
    producer.commit("tx1")
    assert bodies(consumer.wait_for(3)) == ["tx0", "tx1", "tx2"]


def test_aborted_transaction_delivers_nothing(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    producer = stomp_client(broker)
    producer.begin("tx1")
    producer.send(f"/queue/{queue_name}", "never", headers={"transaction": "tx1"}, receipt=True)
    producer.abort("tx1")
    producer.send(f"/queue/{queue_name}", "outside", receipt=True)
    assert bodies(consumer.wait_for(1)) == ["outside"]
    consumer.listener.assert_no_more(1)


def test_disconnect_with_an_open_transaction_discards_its_sends(broker, stomp_client, queue_name):
    producer = stomp_client(broker)
    producer.begin("open")
    producer.send(f"/queue/{queue_name}", "uncommitted", headers={"transaction": "open"}, receipt=True)
    producer.disconnect()
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}")
    consumer.listener.assert_no_more(0)


def test_abort_of_a_transacted_ack_redelivers_the_message(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "ack me later", receipt=True)
    (frame,) = consumer.wait_for(1)
    consumer.begin("txa")
    consumer.ack(frame, transaction="txa", receipt=True)
    consumer.abort("txa")
    _, again = consumer.wait_for(2)
    assert (again.body, again.headers.get("redelivered")) == ("ack me later", "true")
    consumer.ack(again, receipt=True)
    broker.wait_queue(queue_name, messages=0, messages_acknowledged=1)


def test_a_transacted_consumer_takes_more_than_its_prefetch_before_commit(broker, stomp_client, queue_name):
    """An ACK inside a transaction frees the window (ActiveMQ and Artemis return the credit),
    so a consumer that commits every 5 with prefetch 2 gets them all; it stalled at 2."""
    producer = stomp_client(broker)
    for n in range(10):
        producer.send(f"/queue/{queue_name}", f"m{n}", {"persistent": "true"}, receipt=True)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual", headers={"activemq.prefetchSize": 2})
    acked = 0
    for batch in ("tx1", "tx2"):
        consumer.begin(batch)
        for _ in range(5):
            consumer.ack(consumer.wait_for(acked + 1)[acked], transaction=batch)
            acked += 1
        consumer.commit(batch)
    assert [frame.body for frame in consumer.listener.messages] == [f"m{n}" for n in range(10)]
    broker.wait_queue(queue_name, messages=0, messages_acknowledged=10)


def test_transacted_ack_takes_effect_on_commit(broker, stomp_client, queue_name):
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{queue_name}", ack="client-individual")
    consumer.send(f"/queue/{queue_name}", "acked in tx", receipt=True)
    (frame,) = consumer.wait_for(1)
    consumer.begin("txc")
    consumer.ack(frame, transaction="txc", receipt=True)
    assert broker.queue(queue_name)["messages_acknowledged"] == 0
    consumer.commit("txc")
    broker.wait_queue(queue_name, messages=0, messages_acknowledged=1)
    consumer.drop()
    successor = stomp_client(broker)
    successor.subscribe(f"/queue/{queue_name}")
    successor.listener.assert_no_more(0)


def test_a_dead_letter_move_at_shutdown_leaves_one_copy_after_restart(start_broker, stomp_client):
    """A move settles its original once the copy is durable. At a clean stop the copy's write
    was drained with the journal but the original's acknowledgement came after it closed,
    so the restarted broker held both (and logged a JournalError traceback)."""
    proc = start_broker({"address-settings": {"#": {"max-delivery-attempts": 1}}})
    rounds = 6
    for n in range(rounds):
        queue = f"moved-at-stop-{n}"
        stomp_client(proc).send(f"/queue/{queue}", f"m{n}", headers={"persistent": "true"}, receipt=True)
        consumer = stomp_client(proc)
        consumer.subscribe(f"/queue/{queue}", ack="client-individual")
        consumer.nack(consumer.wait_for(1)[0])  # no receipt: the stop races the move
        proc.restart()
    for n in range(rounds):
        proc.wait_queue(f"moved-at-stop-{n}", messages=0)
    proc.wait_queue("DLQ", messages=rounds)
    dead = _moved_messages(proc, stomp_client, "DLQ", "moved-at-stop-0")
    assert len(dead) == 1


def test_a_delivery_outstanding_at_a_clean_stop_comes_back_redelivered(start_broker, stomp_client, raw_stomp):
    """A consumer that keeps its socket open through the stop. (Before: its connection ended
    only after the journal had closed, so the attempt was not counted and the message came
    back `redelivered:false`.)"""
    proc = start_broker(BROKER_CONFIG)
    stomp_client(proc).send("/queue/held-at-stop", "m", headers={"persistent": "true"}, receipt=True)
    consumer = raw_stomp(proc)
    consumer.connect()
    consumer.send_frame("SUBSCRIBE", {"destination": "/queue/held-at-stop", "id": "s",
                                      "ack": "client-individual"})
    assert consumer.read_frame().headers["redelivered"] == "false"
    proc.restart()
    again = stomp_client(proc)
    again.subscribe("/queue/held-at-stop", ack="client-individual")
    assert again.wait_for(1)[0].headers["redelivered"] == "true"

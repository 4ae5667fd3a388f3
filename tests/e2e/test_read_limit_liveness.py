"""Read limits never strand a queue: found while testing commit atomicity and FIFO across
a restart. Each test is the user scenario that stalled before its fix: a selective
consumer that read the last paged record left the address in page mode for good, and
paged messages that expired as they were read back kept their share of the read limit."""

from __future__ import annotations

import time

from brokerproc import unique
from test_paging_helpers import body, send_all, take, wait_address

P = {"persistent": "true"}


def test_address_leaves_paging_after_a_selective_consumer_drains_a_read_limited_queue(
    start_broker, stomp_client
):
    proc = start_broker({"address-settings": {"#": {
        "page-size-bytes": "8KiB", "max-size-messages": 4, "max-read-page-messages": 2}}})
    queue = unique("stuck")
    sent = send_all(stomp_client(proc), f"/queue/{queue}", [f"m{n}" for n in range(12)],
                    size=200, headers={"color": "red"})
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual",
                       headers={"activemq.prefetchSize": 3, "selector": "color = 'red'"})
    assert take(consumer, 12) == sent
    proc.wait_queue(queue, messages=0, messages_in_memory=0, messages_paged=0)
    time.sleep(0.5)
    # the queue is empty and has no page file: a new send should be held in memory
    stomp_client(proc).send(f"/queue/{queue}", body("late", 200), headers=P, receipt=True)
    info = proc.address(queue)
    assert (info["messages_paged"], info["page_files"]) == (0, 0), info
    wait_address(proc, queue, paging=False, timeout=3)


def test_consumer_gets_a_live_paged_message_behind_more_expired_ones_than_the_read_limit(
    start_broker, stomp_client
):
    proc = start_broker({"address-settings": {"#": {
        "page-size-bytes": "8KiB", "max-size-bytes": 0, "max-read-page-messages": 3}}})
    queue = unique("expired")
    producer = stomp_client(proc)
    expires = {"expires": str(int(time.time() * 1000) + 1000)}
    for n in range(5):
        producer.send(f"/queue/{queue}", body(f"e{n}", 200), headers={**P, **expires})
    producer.send(f"/queue/{queue}", body("keep", 200), headers=P, receipt=True)
    time.sleep(1.5)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    assert take(consumer, 1, timeout=8) == ["keep"]
    proc.wait_queue(queue, messages=0, messages_expired=5)


def _hog_on_paged_queue(start_broker, stomp_client, count: int, broker: dict | None = None):
    """A paged queue of `count` 4 KiB messages with a 128 KiB max-read-page-bytes, and a
    consumer that never acknowledges holding the 20 or so the limit lets it read:
    (broker, queue, that consumer)."""
    proc = start_broker({"broker": broker or {}, "address-settings": {"#": {
        "max-size-bytes": 0, "page-size-bytes": "64KiB", "max-read-page-bytes": "128KiB"}}})
    queue = unique("hog")
    send_all(stomp_client(proc), f"/queue/{queue}", [f"m{n}" for n in range(count)], size=4096)
    hog = stomp_client(proc)
    hog.subscribe(f"/queue/{queue}", ack="client-individual", headers={"activemq.prefetchSize": 100_000})
    hog.wait_for(20)
    return proc, queue, hog


def test_a_consumer_holding_its_window_unacknowledged_does_not_starve_the_others(start_broker, stomp_client):
    """Found by a breaker: one consumer with a large prefetch that never acknowledges fills
    the queue's max-read-page-bytes; five consumers subscribing after it got nothing. Each
    consumer holding nothing still gets a message past the read limit, as past the budget."""
    proc, queue, _hog = _hog_on_paged_queue(start_broker, stomp_client, 200)
    time.sleep(0.3)
    others = [stomp_client(proc) for _ in range(5)]
    for other in others:
        other.subscribe(f"/queue/{queue}", ack="client-individual", headers={"activemq.prefetchSize": 10})
    for other in others:
        other.ack(other.wait_for(1)[0], receipt=True)  # and after an ACK, the next
        other.wait_for(2)


def test_a_message_read_past_the_limit_goes_to_the_consumer_holding_nothing(start_broker, stomp_client):
    """Found by a breaker: beside an auto-ack consumer (always holding nothing), every read
    past the read limit went round-robin, and a consumer that never acknowledges took half of
    them: 2,014 of 4,000 held against a 128 KiB limit and a 2 MiB budget."""
    proc, queue, hog = _hog_on_paged_queue(start_broker, stomp_client, 600, {"global-max-size": "2MiB"})
    reader = stomp_client(proc)
    reader.subscribe(f"/queue/{queue}", ack="auto", headers={"activemq.prefetchSize": 100})
    taken = len(hog.listener.messages)
    reader.wait_for(600 - taken, timeout=30)
    assert len(hog.listener.messages) == taken, "the hog grew past the read limit"


def test_a_message_read_past_the_limit_goes_to_the_idle_consumer_beside_a_selective_one(
        start_broker, stomp_client):
    """The same with a consumer with a selector on the queue too (the queue then offers each
    message to the consumers in turn): the hog took every read past the limit, 1,000 held
    against a limit of 10 messages. Helper 42."""
    proc, queue, hog = _hog_on_paged_queue(start_broker, stomp_client, 600, {"global-max-size": "2MiB"})
    selective = stomp_client(proc)
    selective.subscribe(f"/queue/{queue}", ack="client-individual", headers={"selector": "color = 'red'"})
    reader = stomp_client(proc)
    reader.subscribe(f"/queue/{queue}", ack="auto", headers={"activemq.prefetchSize": 100})
    taken = len(hog.listener.messages)
    reader.wait_for(600 - taken, timeout=30)
    assert len(hog.listener.messages) == taken, "the hog grew past the read limit"

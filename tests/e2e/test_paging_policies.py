"""What happens past a memory or page limit: address-full-policy DROP, FAIL and BLOCK,
page-limit-messages with page-full-policy FAIL and DROP, and global-max-messages.

Ported from Artemis' testDropMessages, testFailMessagesDurable, testSendOverBlockingNoFlowControl,
PagingLimitTest and MaxMessagesPagingTest, over STOMP. The module broker gives each policy an
address prefix; the global limit needs brokers of its own.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from brokerproc import unique, wait_until
from test_paging_helpers import (
    assert_paging,
    body,
    consume,
    durable,
    labels,
    numbered,
    page_files,
    send_all,
    send_until_error,
    take,
    wait_address,
    wait_no_page_files,
)

SMALL = "16KiB"
PAGE_LIMIT = 20
BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "drop.#": {"max-size-bytes": SMALL, "address-full-policy": "DROP"},
        "fail.#": {"max-size-bytes": SMALL, "address-full-policy": "FAIL"},
        "block.#": {"max-size-bytes": SMALL, "address-full-policy": "BLOCK"},
        "plfail.#": {"max-size-bytes": 0, "page-limit-messages": PAGE_LIMIT, "page-full-policy": "FAIL"},
        "pldrop.#": {"max-size-bytes": 0, "page-limit-messages": PAGE_LIMIT, "page-full-policy": "DROP"},
    },
}


def _assert_not_paging(proc, address: str) -> None:
    info = proc.address(address)
    assert (info["paging"], info["messages_paged"], info["page_files"]) == (False, 0, 0), info
    assert page_files(proc, address) == []


# -- address-full-policy --------------------------------------------------------------------


def test_drop_policy_discards_messages_past_the_limit_and_still_sends_receipts(
        broker, stomp_client, queue_name):
    address = f"drop.{queue_name}"
    send_all(stomp_client(broker), f"/queue/{address}", numbered("m", 50))  # asserts 50 receipts
    info = broker.address(address)
    kept = broker.queue(address)["messages"]
    assert 0 < kept < 50, f"{kept} of 50 kept past a 16 KiB limit: {info}"
    assert info["dropped_messages"] == 50 - kept, info
    _assert_not_paging(broker, address)
    assert consume(stomp_client(broker), f"/queue/{address}", kept) == numbered("m", kept)


def test_fail_policy_answers_error_with_the_receipt_id_and_stores_nothing(
        broker, stomp_client, queue_name):
    address = f"fail.{queue_name}"
    producer = stomp_client(broker)
    receipted, error, receipt_id = send_until_error(producer, f"/queue/{address}", 100)
    assert 0 < len(receipted) < 100
    assert error.headers.get("receipt-id") == receipt_id, error.headers
    assert error.headers.get("message"), f"ERROR without a message header: {error.headers}"
    producer.listener.wait_for_disconnect()
    broker.wait_queue(address, messages=len(receipted))
    _assert_not_paging(broker, address)
    assert broker.address(address)["dropped_messages"] == 0
    assert consume(stomp_client(broker), f"/queue/{address}", len(receipted)) == receipted


def test_block_policy_stalls_the_producer_until_a_consumer_drains_and_loses_nothing(
        broker, stomp_client, queue_name):
    address = f"block.{queue_name}"
    producer = stomp_client(broker)
    tag = uuid.uuid4().hex[:8]
    sent = numbered("m", 60)
    for n, name in enumerate(sent):  # pipelined: 60 KiB fit in the socket buffers
        producer.conn.send(f"/queue/{address}", body(name),
                           headers={"persistent": "true", "receipt": f"{tag}-{n}"})
    listener = producer.listener
    time.sleep(1.0)
    stalled = len(listener.receipts)
    assert 0 < stalled < 60, f"{stalled} receipts: the producer was not blocked at 16 KiB"
    time.sleep(0.5)
    assert len(listener.receipts) == stalled, "receipts kept coming past the limit"
    assert not listener.errors, [(e.headers, e.body) for e in listener.errors]
    _assert_not_paging(broker, address)

    assert consume(stomp_client(broker), f"/queue/{address}", 60, ack="auto") == sent
    listener.wait(lambda: len(listener.receipts) == 60, 5, "all 60 receipts after the drain")
    assert not listener.errors
    assert producer.is_connected
    broker.wait_queue(address, messages=0)


def test_block_policy_takes_a_message_larger_than_the_limit_once_the_address_is_below_it(
        broker, stomp_client, queue_name):
    """A message larger than max-size-bytes could never fit: blocked for good before. It
    goes in when the address is below its limit (as Artemis), the next waits its turn."""
    address = f"block.{queue_name}"
    producer = stomp_client(broker)
    large = "x" * (40 * 1024)  # 16 KiB is the limit
    for n in range(3):
        producer.conn.send(f"/queue/{address}", f"big-{n}|{large}", headers={"receipt": f"big-{n}"})
    producer.listener.wait_for_receipt("big-0", timeout=10)
    time.sleep(0.5)
    assert set(producer.listener.receipts) & {"big-0", "big-1", "big-2"} == {"big-0"}
    broker.wait_queue(address, messages=1)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{address}", ack="auto")
    wait_until(lambda: len(consumer.messages) == 3, timeout=10, what="the three large messages")
    assert [m.body.split("|", 1)[0] for m in consumer.messages] == ["big-0", "big-1", "big-2"]
    producer.listener.wait_for_receipt("big-2", timeout=10)
    _assert_not_paging(broker, address)


def test_block_policy_takes_a_commit_larger_than_the_limit_once_the_address_is_below_it(
        broker, stomp_client, queue_name):
    """A COMMIT whose sends are more than max-size-bytes could never fit: it waited for good
    before. It goes in whole when the address is below its limit; the next one waits."""
    address = f"block.{queue_name}"
    producer = stomp_client(broker)
    part = "y" * (6 * 1024)  # 5 x 6 KiB: 30 KiB against a 16 KiB limit
    for tx in ("t0", "t1"):
        producer.begin(tx, receipt=False)
        for n in range(5):
            producer.send(f"/queue/{address}", f"{tx}-{n}|{part}", headers={"transaction": tx},
                          receipt=False)
        producer.conn.commit(tx, headers={"receipt": f"c-{tx}"})  # not waited for
    producer.listener.wait_for_receipt("c-t0", timeout=10)
    broker.wait_queue(address, messages=5)
    time.sleep(0.5)
    assert "c-t1" not in producer.listener.receipts  # the address is over its limit now
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{address}", ack="auto")
    wait_until(lambda: len(consumer.messages) == 10, timeout=10, what="both commits' messages")
    assert [m.body.split("|", 1)[0] for m in consumer.messages] == (
        [f"t0-{n}" for n in range(5)] + [f"t1-{n}" for n in range(5)])
    producer.listener.wait_for_receipt("c-t1", timeout=10)


@pytest.mark.parametrize("limits", [
    {"address-settings": {"#": {"max-size-messages": 2, "address-full-policy": "BLOCK"}}},
    {"broker": {"global-max-messages": 2}, "address-settings": {"#": {"address-full-policy": "BLOCK"}}},
], ids=["max-size-messages", "global-max-messages"])
def test_block_policy_takes_a_commit_of_more_sends_than_a_message_limit_once_below_it(
        start_broker, stomp_client, limits):
    """(Before: only a COMMIT over max-size-bytes was let in; 3 sends against a limit of 2
    messages waited for ever, and every later frame of the connection behind them.)"""
    proc = start_broker(limits)
    producer = stomp_client(proc)
    producer.begin("t0", receipt=False)
    for n in range(3):
        producer.send("/queue/orders", f"m{n}", headers={"transaction": "t0"}, receipt=False)
    producer.conn.commit("t0", headers={"receipt": "c-t0"})
    producer.listener.wait_for_receipt("c-t0", timeout=10)
    assert consume(stomp_client(proc), "/queue/orders", 3, ack="auto") == numbered("m", 3)
    producer.send("/queue/orders", "after it", receipt=True)  # the connection goes on


def test_open_transactions_do_not_count_against_global_max_messages(start_broker, stomp_client):
    """(Before: the sends of open transactions counted as messages held, so two COMMITs of 5
    under a limit of 8 each waited for the other's sends to go, for ever, with every queue
    empty; and every plain SEND behind them.)"""
    proc = start_broker({"broker": {"global-max-messages": 8},
                         "address-settings": {"#": {"address-full-policy": "BLOCK"}}})
    producers = [stomp_client(proc) for _ in range(2)]
    for n, producer in enumerate(producers):
        producer.begin(f"t{n}", receipt=False)
        for m in range(5):
            producer.send(f"/queue/tx{n}", f"m{m}", headers={"transaction": f"t{n}"}, receipt=False)
    stomp_client(proc).send("/queue/plain", "not held up", receipt=True)
    producers[0].conn.commit("t0", headers={"receipt": "c0"})
    producers[0].listener.wait_for_receipt("c0", timeout=10)
    producers[1].conn.commit("t1", headers={"receipt": "c1"})  # 6 + 5 > 8: waits for room
    assert consume(stomp_client(proc), "/queue/tx0", 5, ack="auto") == numbered("m", 5)
    producers[1].listener.wait_for_receipt("c1", timeout=10)
    assert proc.queue("tx1")["messages"] == 5


def test_block_policy_blocks_only_that_address(broker, stomp_client, queue_name):
    blocked, free = f"block.{queue_name}", unique("free")
    producer = stomp_client(broker)
    for n in range(40):
        producer.conn.send(f"/queue/{blocked}", body(f"m{n}"), headers={"receipt": f"b-{n}"})
    other = stomp_client(broker)
    send_all(other, f"/queue/{free}", numbered("f", 10))  # not held up by the blocked address
    assert consume(stomp_client(broker), f"/queue/{blocked}", 40, ack="auto") == numbered("m", 40)


# -- page limits ----------------------------------------------------------------------------


def test_page_limit_messages_with_fail_policy_refuses_the_next_message(broker, stomp_client, queue_name):
    address = f"plfail.{queue_name}"
    producer = stomp_client(broker)
    receipted, error, receipt_id = send_until_error(producer, f"/queue/{address}", 100)
    assert receipted == numbered("m", PAGE_LIMIT)
    assert error.headers.get("receipt-id") == receipt_id, error.headers
    assert_paging(broker, address, paged=PAGE_LIMIT)

    assert consume(stomp_client(broker), f"/queue/{address}", PAGE_LIMIT) == receipted
    wait_no_page_files(broker, address)
    # the limit counts what is in page files now: with them gone, sends are accepted again
    send_all(stomp_client(broker), f"/queue/{address}", ["again"])


def test_page_limit_counts_messages_not_yet_acknowledged_not_the_page_files(start_broker, stomp_client):
    """Acknowledged paged messages free room under page-limit-messages at once, though the
    page file holding them stays (interface.md: "not yet acknowledged by every queue"):
    half of the limit consumed, half of it can be sent again; so after a restart too."""
    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0, "page-limit-messages": PAGE_LIMIT}}})
    producer = stomp_client(proc)
    receipted, _error, _receipt = send_until_error(producer, "/queue/lim", 100)
    assert receipted == numbered("m", PAGE_LIMIT)
    half = PAGE_LIMIT // 2
    consumer = stomp_client(proc)
    consumer.subscribe("/queue/lim", ack="client-individual", headers={"activemq.prefetchSize": 1})
    for n in range(half):
        consumer.ack(consumer.wait_for(n + 1)[n], receipt=True)
    consumer.disconnect()  # the one delivered after the last ACK goes back
    assert labels(consumer.listener.messages[:half]) == receipted[:half]
    assert proc.address("lim")["page_files"] == 1  # one page holds all twenty
    wait_until(lambda: proc.address("lim")["limits"]["paging"]["used_messages"] == half,
               what="half of the limit free")
    more, _error, _receipt = send_until_error(stomp_client(proc), "/queue/lim", 100, prefix="n")
    assert more == numbered("n", half)
    proc.restart()
    assert proc.address("lim")["limits"]["paging"]["used_messages"] == PAGE_LIMIT
    consumer = stomp_client(proc)
    consumer.subscribe("/queue/lim", ack="client-individual", headers={"activemq.prefetchSize": 1})
    for n in range(3):
        consumer.ack(consumer.wait_for(n + 1)[n], receipt=True)
    consumer.disconnect()
    assert labels(consumer.listener.messages[:3]) == receipted[half:half + 3]
    again, _error, _receipt = send_until_error(stomp_client(proc), "/queue/lim", 100, prefix="r")
    assert again == numbered("r", 3)


def test_page_limit_frees_a_topic_message_once_every_subscription_acknowledged_it(
    start_broker, stomp_client
):
    """On a page whose messages went to two subscriptions, one subscription acknowledging
    them frees nothing: the other still holds them. Once both have acknowledged three, three
    can be sent again; so after a restart too."""
    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0, "page-limit-messages": 6}}})
    first = durable(stomp_client, proc, "c1", "news", "one")
    durable(stomp_client, proc, "c2", "news", "two").disconnect()
    send_all(stomp_client(proc), "/topic/news", numbered("m", 6))
    assert take(first, 6) == numbered("m", 6)
    assert proc.address("news")["limits"]["paging"]["used_messages"] == 6
    _sent, error, _receipt = send_until_error(stomp_client(proc), "/topic/news", 1)
    assert error is not None
    second = stomp_client(proc, client_id="c2")
    second.subscribe("/topic/news", ack="client-individual",
                     headers={"durable-subscription-name": "two", "activemq.prefetchSize": 1})
    for n in range(3):
        second.ack(second.wait_for(n + 1)[n], receipt=True)
    second.disconnect()  # the one delivered after the last ACK goes back
    assert labels(second.listener.messages[:3]) == numbered("m", 3)
    wait_until(lambda: proc.address("news")["limits"]["paging"]["used_messages"] == 3,
               what="three of the limit free")
    more, _error, _receipt = send_until_error(stomp_client(proc), "/topic/news", 10, prefix="n")
    assert more == numbered("n", 3)
    proc.restart()
    assert proc.address("news")["limits"]["paging"]["used_messages"] == 6
    _sent, error, _receipt = send_until_error(stomp_client(proc), "/topic/news", 1)
    assert error is not None


def test_a_subscription_removed_while_behind_on_the_live_page_frees_the_page_limit(
    start_broker, stomp_client
):
    """Found by a breaker: one subscription had acknowledged every message, the other was
    removed while it still held some on the live page; the page file stayed (nobody rolled
    it), and two of the limit stayed taken."""
    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0, "page-limit-messages": 10}}})
    first = durable(stomp_client, proc, "c1", "feed", "one")
    durable(stomp_client, proc, "c2", "feed", "two").disconnect()
    send_all(stomp_client(proc), "/topic/feed", numbered("m", 4))
    assert take(first, 4) == numbered("m", 4)
    second = stomp_client(proc, client_id="c2")
    sub_id = second.subscribe("/topic/feed", ack="client-individual",
                              headers={"durable-subscription-name": "two", "activemq.prefetchSize": 0})
    second.unsubscribe(sub_id, headers={"durable-subscription-name": "two"})
    second.disconnect()
    wait_no_page_files(proc, "feed")
    assert proc.address("feed")["limits"]["paging"]["used_messages"] == 0
    first.disconnect()
    more, _error, _receipt = send_until_error(stomp_client(proc), "/topic/feed", 20, prefix="n")
    assert more == numbered("n", 10)


def test_page_limit_counts_exactly_across_a_subscription_leaving_mid_page(start_broker, stomp_client):
    """A subscription leaves a topic mid-page: its messages stop counting, the records sent
    after it went count for the one left, and so after a restart."""
    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0, "page-limit-messages": 10}}})
    first = durable(stomp_client, proc, "c1", "mix", "one")
    first.disconnect()
    second = stomp_client(proc, client_id="c2")
    sub_id = second.subscribe("/topic/mix", ack="client-individual",
                              headers={"durable-subscription-name": "two", "activemq.prefetchSize": 0})
    send_all(stomp_client(proc), "/topic/mix", numbered("m", 10))
    assert len(proc.address("mix")["queues"]) == 2
    second.unsubscribe(sub_id, headers={"durable-subscription-name": "two"})
    second.disconnect()
    wait_until(lambda: len(proc.address("mix")["queues"]) == 1, what="subscription two gone")
    first = stomp_client(proc, client_id="c1")
    first.subscribe("/topic/mix", ack="client-individual",
                    headers={"durable-subscription-name": "one", "activemq.prefetchSize": 1})
    for n in range(5):
        first.ack(first.wait_for(n + 1)[n], receipt=True)
    first.disconnect()
    wait_until(lambda: proc.address("mix")["limits"]["paging"]["used_messages"] == 5, what="five free")
    more, _error, _receipt = send_until_error(stomp_client(proc), "/topic/mix", 20, prefix="n")
    assert more == numbered("n", 5)
    proc.restart()
    info = proc.address("mix")
    assert info["limits"]["paging"]["used_messages"] == 10
    assert proc.queue(info["queues"][0])["messages"] == 10


def test_page_limit_refuses_a_transaction_larger_than_the_limit_on_an_address_never_paged(
    start_broker, stomp_client
):
    """Found by a breaker: before the address had paged once, a COMMIT of 23 sends stored all
    23 under page-limit-messages 20 (the limit was only asked of an address with page files)."""
    proc = start_broker({"address-settings": {"#": {"max-size-bytes": 0, "page-limit-messages": 20}}})
    producer = stomp_client(proc)
    producer.begin("big", receipt=False)
    for label in numbered("t", 23):
        producer.send("/queue/fresh", body(label, 1024),
                      headers={"persistent": "true", "transaction": "big"}, receipt=False)
    producer.commit("big", receipt=False)
    error = producer.listener.wait_for_error()
    assert "page limit" in error.headers.get("message", ""), error.headers
    assert proc.queue("fresh")["messages"] == 0
    more, _error, _receipt = send_until_error(stomp_client(proc), "/queue/fresh", 30, prefix="n")
    assert more == numbered("n", 20)


def test_page_limit_messages_with_drop_policy_drops_the_rest(broker, stomp_client, queue_name):
    address = f"pldrop.{queue_name}"
    send_all(stomp_client(broker), f"/queue/{address}", numbered("m", PAGE_LIMIT + 10))
    info = assert_paging(broker, address, paged=PAGE_LIMIT)
    assert info["dropped_messages"] == 10, info
    assert consume(stomp_client(broker), f"/queue/{address}", PAGE_LIMIT) == numbered("m", PAGE_LIMIT)
    wait_no_page_files(broker, address)


def test_a_commit_refused_as_a_whole_counts_none_of_its_sends_as_dropped(broker, stomp_client, queue_name):
    """(Before: the sends to a DROP address routed ahead of the refusing FAIL address counted
    in its `dropped_messages`, although nothing of the COMMIT happened.)"""
    dropping, failing = f"drop.{queue_name}", f"fail.{queue_name}"
    send_all(stomp_client(broker), f"/queue/{dropping}", numbered("d", 40))
    _sent, error, _receipt = send_until_error(stomp_client(broker), f"/queue/{failing}", 40, prefix="f")
    assert error is not None
    before = broker.address(dropping)["dropped_messages"]
    assert before > 0
    producer = stomp_client(broker)
    producer.begin("both", receipt=False)
    for _n in range(5):
        producer.send(f"/queue/{dropping}", "x", headers={"transaction": "both"}, receipt=False)
    producer.send(f"/queue/{failing}", body("y", 1024), headers={"transaction": "both"}, receipt=False)
    producer.commit("both", receipt=False)
    assert "is full" in producer.listener.wait_for_error().headers["message"]
    assert broker.address(dropping)["dropped_messages"] == before


# -- global-max-messages ----------------------------------------------------------------------

GLOBAL_MAX = 20
GLOBAL_CONFIG = {
    "broker": {"global-max-messages": GLOBAL_MAX},
    "address-settings": {"#": {"page-size-bytes": "16KiB"}},
}


def test_global_max_messages_makes_an_address_without_limit_page(start_broker, stomp_client):
    proc = start_broker(GLOBAL_CONFIG)
    address = unique("global")
    sent = send_all(stomp_client(proc), f"/queue/{address}", numbered("m", 50))
    info = assert_paging(proc, address, paged=50 - GLOBAL_MAX)
    assert info["messages_in_memory"] == GLOBAL_MAX, info
    assert consume(stomp_client(proc), f"/queue/{address}", 50) == sent
    wait_address(proc, address, paging=False, messages=0)
    wait_no_page_files(proc, address)


def test_global_max_messages_is_shared_by_all_addresses(start_broker, stomp_client):
    proc = start_broker(GLOBAL_CONFIG)
    first, second = unique("first"), unique("second")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{first}", numbered("a", 12))
    send_all(producer, f"/queue/{second}", numbered("b", 12))
    assert proc.address(first)["paging"] is False
    assert_paging(proc, second, paged=12 - (GLOBAL_MAX - 12))
    send_all(producer, f"/queue/{first}", numbered("a", 3, start=12))
    assert_paging(proc, first, paged=3)

    assert consume(stomp_client(proc), f"/queue/{first}", 15) == numbered("a", 15)
    assert consume(stomp_client(proc), f"/queue/{second}", 12) == numbered("b", 12)
    for address in (first, second):
        wait_address(proc, address, paging=False, messages=0)
        wait_no_page_files(proc, address)


def test_global_max_messages_lets_a_client_ack_consumer_take_more_before_acking(start_broker, stomp_client):
    """The count decides when sends page; it does not stop reading back (as an address's
    max-size-messages does not, nor Artemis' global-max-messages): a consumer that acks in
    client mode once it has all 200 gets them. (Before: it got 21 and waited for ever.)"""
    proc = start_broker({"broker": {"global-max-messages": GLOBAL_MAX}})
    address, other = unique("global"), unique("other")
    sent = send_all(stomp_client(proc), f"/queue/{address}", numbered("m", 200))
    assert_paging(proc, address, paged=200 - GLOBAL_MAX)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{address}", ack="client", headers={"activemq.prefetchSize": 1000})
    frames = consumer.wait_for(200, timeout=10)
    assert labels(frames) == sent
    memory = proc.http_get("/api/broker")[1]["memory"]
    assert (memory["used_messages"], memory["read_back_messages"]) == (200, 200 - GLOBAL_MAX), memory
    send_all(stomp_client(proc), f"/queue/{other}", numbered("o", 2))  # 20 not read back: at the limit
    assert_paging(proc, other, paged=2)
    consumer.ack(frames[-1], receipt=True)  # client mode: every message up to the last
    wait_address(proc, address, paging=False, messages=0)
    wait_no_page_files(proc, address)
    assert consume(stomp_client(proc), f"/queue/{other}", 2) == numbered("o", 2)


def test_a_blocked_producer_goes_on_while_another_address_reads_back_its_pages(start_broker, stomp_client):
    """Messages read back from page files do not count when a send is admitted against
    global-max-messages (as in Artemis). (Before: each ACK on the draining address freed a
    place its page reading took back at once, and the BLOCK producer on the other address
    waited until every page was read.) Helper 42."""
    proc = start_broker({"broker": {"global-max-messages": GLOBAL_MAX},
                         "address-settings": {"blocking.#": {"address-full-policy": "BLOCK"}}})
    deep, blocking = unique("deep"), f"blocking.{unique()}"
    sent = send_all(stomp_client(proc), f"/queue/{deep}", numbered("d", 300))
    producer = stomp_client(proc)
    for n in range(3):  # the budget is full of the deep queue's messages: these wait
        producer.conn.send(f"/queue/{blocking}", f"b{n}", headers={"receipt": f"b-{n}", "persistent": "true"})
    time.sleep(0.5)
    assert producer.listener.receipts == [], producer.listener.receipts
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{deep}", ack="client-individual", headers={"activemq.prefetchSize": 1})
    for n in range(150):  # half of it, acked one by one
        frame = consumer.wait_for(n + 1)[n]
        assert labels([frame]) == sent[n:n + 1]
        consumer.ack(frame)
    producer.listener.wait_for_receipt("b-2", timeout=10)
    assert proc.queue(blocking)["messages"] == 3
    assert proc.queue(deep)["messages"] == 150  # before the drain's end


def test_blocked_producer_resumes_from_a_consumer_on_another_thread(broker, stomp_client, queue_name):
    """BLOCK with a producer that waits for each receipt: it stalls, then finishes when drained."""
    address = f"block.{queue_name}"
    producer = stomp_client(broker)
    done = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            for n in range(40):
                producer.send(f"/queue/{address}", body(f"m{n}"), receipt=True)
            done.set()
        except BaseException as exc:  # reported below
            failure.append(exc)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    assert not done.wait(1.5), "40 KiB sent to a 16 KiB BLOCK address without stalling"
    assert consume(stomp_client(broker), f"/queue/{address}", 40, ack="auto") == numbered("m", 40)
    thread.join(10)
    assert done.is_set(), f"producer did not finish after the drain: {failure}"

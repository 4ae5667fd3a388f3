"""Message selectors and queue filters over paged data, without starvation (black box over STOMP).

Artemis' selective consumers only see what has been depaged into the queue, so a consumer
with `color = 'red'` starves behind a million paged blue messages (seed 000, 1.); HornetQ
applies selectors and browsers in memory only (seed 002). pagemq's consumers with selectors
look ahead in the page files. These tests hold the broker to that: the red message behind
thousands of paged blues comes at once, filtered queues spread over many pages each get
exactly their messages, a selective consumer acking one page's messages deletes that page,
and the selector language reaches numeric headers and the JMS header names.

One broker for the module, 16 KiB pages: `zsel.` addresses page every message
(max-size-bytes 0), `sel.` ones page past 32 KiB. Page files are checked on disk
(`<data-dir>/paging/<folder>/*.page`) and through the HTTP fields.
"""

from __future__ import annotations

import re
import time

import pytest
from brokerproc import bodies, broker_still_serves, unique, wait_until
from test_paging_helpers import (
    KIB,
    assert_paging,
    body,
    durable,
    labels,
    numbered,
    page_files,
    send_all,
    take,
    wait_address,
    wait_frames,
    wait_no_page_files,
)
from test_selectors_helpers import browse, drain, send_each

BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "sel.#": {"max-size-bytes": "32KiB"},
        "zsel.#": {"max-size-bytes": 0},
    },
    "addresses": [
        {"name": "sel.regions", "routing-type": "multicast", "queues": [
            {"name": "regions.eu", "filter": "region = 'eu'"},
            {"name": "regions.us", "filter": "region = 'us'"},
        ]},
        {"name": "sel.nomatch", "routing-type": "multicast", "queues": [
            {"name": "nomatch.all"},
            {"name": "nomatch.asia", "filter": "region = 'asia'"},
        ]},
    ],
}

RED = {"color": "red"}
GREEN = {"color": "green"}
BLUE = {"color": "blue"}


# -- a selector over paged messages -----------------------------------------------------------


def test_red_consumer_takes_exactly_the_100_paged_reds_and_a_green_browser_sees_the_greens(
        broker, stomp_client, queue_name):
    address = f"zsel.{queue_name}"
    dest = f"/queue/{address}"
    producer = stomp_client(broker)
    reds = send_all(producer, dest, numbered("red", 100), headers=RED)
    greens = send_all(producer, dest, numbered("green", 100), headers=GREEN)
    info = assert_paging(broker, address, paged=200)
    assert info["messages_in_memory"] == 0, info
    pages_before = len(page_files(broker, address))
    assert pages_before >= 10, f"200 KiB in 16 KiB pages: only {pages_before} page files"

    assert browse(stomp_client(broker), dest, "color = 'green'") == greens
    queue = broker.queue(address)
    assert (queue["messages"], queue["messages_acknowledged"]) == (200, 0), (
        f"the browser consumed something: {queue}")

    assert drain(stomp_client(broker), dest, 100, headers={"selector": "color = 'red'"}) == reds
    broker.wait_queue(address, messages=100, messages_acknowledged=100, messages_delivering=0)
    # at least five pages held only red messages: acknowledged, they go
    wait_until(lambda: len(page_files(broker, address)) <= pages_before - 5,
               what="the all-red page files to be deleted")

    assert browse(stomp_client(broker), dest, "color = 'green'") == greens
    queue = broker.queue(address)
    assert (queue["messages"], queue["messages_acknowledged"]) == (100, 100), (
        f"the browser consumed something: {queue}")

    assert drain(stomp_client(broker), dest, 100) == greens
    wait_no_page_files(broker, address)


# -- no starvation --------------------------------------------------------------------------


def _blues_then_red(broker, stomp_client, address: str, blues: int = 3000) -> list[str]:
    dest = f"/queue/{address}"
    producer = stomp_client(broker)
    sent = send_all(producer, dest, numbered("blue", blues), size=256, headers=BLUE, timeout=30)
    send_all(producer, dest, ["red0"], size=256, headers=RED)
    producer.disconnect()
    info = assert_paging(broker, address)
    assert info["messages_paged"] > blues * 9 // 10, f"most blues should be paged: {info}"
    assert len(page_files(broker, address)) >= 20, "3,000 blues should span many page files"
    return sent


def test_a_red_consumer_gets_the_red_message_behind_3000_paged_blues_at_once(
        broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    blues = _blues_then_red(broker, stomp_client, address)

    red = stomp_client(broker)
    started = time.monotonic()
    red.subscribe(dest, ack="client-individual", headers={"selector": "color = 'red'"})
    frames = wait_frames(red, 1, timeout=5.0)
    elapsed = time.monotonic() - started
    assert labels(frames) == ["red0"]
    assert elapsed < 2.0, f"the red message took {elapsed:.2f}s to arrive behind 3,000 paged blues"
    red.ack(frames[0], receipt=True)
    red.listener.assert_no_more(1, within=0.3)
    queue = broker.wait_queue(address, messages=3000, messages_acknowledged=1, messages_delivering=0)
    assert queue["messages_added"] == 3001, queue

    # the queue's other, non-selective consumer still gets every blue, in order
    assert drain(stomp_client(broker), dest, 3000, timeout=30) == blues
    broker.wait_queue(address, messages=0)
    wait_no_page_files(broker, address)
    red.listener.assert_no_more(1, within=0)


def test_a_red_consumer_is_not_starved_while_a_plain_consumer_sits_on_unacked_blues(
        broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    blues = _blues_then_red(broker, stomp_client, address)

    plain = stomp_client(broker)
    plain.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 1})
    assert labels(wait_frames(plain, 1)) == ["blue0"]

    red = stomp_client(broker)
    started = time.monotonic()
    red.subscribe(dest, ack="client-individual", headers={"selector": "color = 'red'"})
    frames = wait_frames(red, 1, timeout=5.0)
    elapsed = time.monotonic() - started
    assert labels(frames) == ["red0"]
    assert elapsed < 2.0, f"the red message took {elapsed:.2f}s while a plain consumer held a blue"
    red.ack(frames[0], receipt=True)
    plain.listener.assert_no_more(1, within=0.2)  # prefetch 1: still only blue0

    assert take(plain, 3000, timeout=30) == blues
    broker.wait_queue(address, messages=0)
    wait_no_page_files(broker, address)
    red.listener.assert_no_more(1, within=0)


# -- queue filters on a paged multicast address ---------------------------------------------------


def test_filtered_queues_spread_over_many_pages_each_get_only_their_region_in_order(
        broker, stomp_client):
    topic = "sel.regions"
    regions = ["us" if n % 3 == 1 else "eu" for n in range(240)]
    sent = send_each(stomp_client(broker), f"/topic/{topic}",
                     [(f"{region}{n}", {"region": region}) for n, region in enumerate(regions)])
    assert_paging(broker, topic)
    assert len(page_files(broker, topic)) >= 10
    expected = {r: [name for name in sent if name.startswith(r)] for r in ("eu", "us")}
    assert broker.queue("regions.eu")["messages"] == 160
    assert broker.queue("regions.us")["messages"] == 80

    eu = durable(stomp_client, broker, "regions", topic, "eu", selector="region = 'eu'")
    assert broker.queue("regions.eu")["consumers"] == 1, "did not attach to the configured queue"
    assert take(eu, 160) == expected["eu"]
    broker.wait_queue("regions.eu", messages=0, messages_delivering=0)
    assert page_files(broker, topic), "page files deleted while regions.us still needs them"

    us = durable(stomp_client, broker, "regions", topic, "us", selector="region = 'us'")
    assert take(us, 80) == expected["us"]
    broker.wait_queue("regions.us", messages=0, messages_delivering=0)
    wait_no_page_files(broker, topic)
    wait_address(broker, topic, messages=0, messages_paged=0)


def test_a_filtered_queue_that_matches_nothing_gets_and_holds_nothing_and_pages_still_go(
        broker, stomp_client):
    topic = "sel.nomatch"
    sent = send_all(stomp_client(broker), f"/topic/{topic}", numbered("eu", 100),
                    headers={"region": "eu"})
    assert_paging(broker, topic)

    asia = durable(stomp_client, broker, "nomatch", topic, "asia", selector="region = 'asia'")
    asia.listener.assert_no_more(0, within=0.7)
    queue = broker.queue("nomatch.asia")
    assert queue["consumers"] == 1, f"did not attach to the configured queue: {queue}"
    assert (queue["messages"], queue["messages_delivering"], queue["messages_added"]) == (0, 0, 0), queue
    assert broker.queue("nomatch.all")["messages"] == 100, "messages left the other queue"

    everything = durable(stomp_client, broker, "nomatch", topic, "all")
    assert take(everything, 100) == sent
    wait_no_page_files(broker, topic)
    asia.listener.assert_no_more(0, within=0)


def test_a_selector_matching_nothing_takes_and_holds_nothing_of_a_paged_queue(
        broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    sent = send_all(stomp_client(broker), dest, numbered("blue", 100), headers=BLUE)
    before = assert_paging(broker, address)

    picky = stomp_client(broker)
    picky.subscribe(dest, ack="client-individual",
                    headers={"selector": "color = 'red'", "activemq.prefetchSize": 100_000})
    picky.listener.assert_no_more(0, within=0.7)
    queue = broker.queue(address)
    assert (queue["messages"], queue["messages_delivering"], queue["messages_acknowledged"]) == (
        100, 0, 0), queue
    after = broker.address(address)
    # a consumer attaching lets the queue read up to max-read-page-bytes (32 KiB) back in,
    # no more: looking ahead for a match keeps nothing in memory
    assert after["bytes_in_memory"] <= 34 * KIB, (
        f"a consumer that matches nothing read messages into memory: before {before}, after {after}")
    assert after["messages_paged"] >= 80, after
    assert after["page_files"] == before["page_files"]

    assert drain(stomp_client(broker), dest, 100) == sent
    broker.wait_queue(address, messages=0, messages_delivering=0)
    wait_no_page_files(broker, address)
    picky.listener.assert_no_more(0, within=0)


# -- a selective consumer deletes exactly the page it acknowledged ----------------------------------


def _send_marking_the_third_page(broker, producer, address: str, count: int) -> dict[str, list[str]]:
    """Send 5,000-byte messages one at a time (receipted, so each is on disk in the newest page
    file). Equal-sized records make every page hold as many as the first; once that number is
    known, the messages that will make up page 3 get `part = 'third'`, every other one
    `part = 'other'`. Returns page file name -> labels written into it."""
    pages: dict[str, list[str]] = {}
    per_page: int | None = None
    for n in range(count):
        part = "third" if per_page is not None and 2 * per_page <= n < 3 * per_page else "other"
        name = f"{part}{n:03d}"
        producer.send(f"/queue/{address}", body(name, 5000),
                      headers={"persistent": "true", "part": part}, receipt=True)
        newest = page_files(broker, address)[-1].name
        pages.setdefault(newest, []).append(name)
        if per_page is None and len(pages) == 2:
            per_page = n
    return pages


def test_a_selector_consumer_acking_page_3s_messages_deletes_exactly_that_page_file(
        broker, stomp_client, queue_name):
    address = f"zsel.{queue_name}"
    dest = f"/queue/{address}"
    pages = _send_marking_the_third_page(broker, stomp_client(broker), address, 18)
    names = list(pages)
    assert len(names) >= 5, f"18 messages of 5,000 bytes should fill 5 pages or more: {pages}"
    assert [p.name for p in page_files(broker, address)] == names
    third = pages[names[2]]
    marked = [name for page in pages.values() for name in page if name.startswith("third")]
    assert third == marked and third, f"test construction: page 3 should hold the marked ones: {pages}"

    consumer = stomp_client(broker)
    assert drain(consumer, dest, len(third), headers={"selector": "part = 'third'"}) == third
    deadline = time.monotonic() + 5
    while names[2] in [p.name for p in page_files(broker, address)] and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p.name for p in page_files(broker, address)]
    assert left == names[:2] + names[3:], (
        f"after acking page 3 ({names[2]}) only, expected exactly it gone: pages {names}, left {left}")
    wait_address(broker, address, page_files=len(names) - 1)
    time.sleep(0.3)
    assert [p.name for p in page_files(broker, address)] == left, "other pages went too"

    rest = [name for page in names if page != names[2] for name in pages[page]]
    assert drain(stomp_client(broker), dest, len(rest)) == rest
    wait_no_page_files(broker, address)


# -- bad selectors ------------------------------------------------------------------------------


@pytest.mark.parametrize(("selector", "problem", "position"), [
    ("color = 'red' AND AND size > 2", "AND", 18),
    ("color == 'red'", "=", 7),
    ("color = 'red", "unterminated", 8),
    ("weight >", "end", 8),
])
@pytest.mark.parametrize("browser", [False, True], ids=["consumer", "browser"])
def test_an_invalid_selector_on_subscribe_is_an_error_naming_the_problem_and_its_position(
        broker, stomp_client, raw_stomp, queue_name, selector, problem, position, browser):
    dest = f"/queue/{queue_name}"
    bystander = stomp_client(broker)
    bystander.subscribe(dest)

    raw = raw_stomp(broker)
    raw.connect("1.2")
    headers = {"id": "s1", "destination": dest, "selector": selector, "receipt": "sub-1"}
    if browser:
        headers["browser"] = "true"
    raw.send_frame("SUBSCRIBE", headers)
    error = raw.expect_error()
    message = error.headers.get("message", "")
    assert problem in message, f"ERROR message does not name the problem {problem!r}: {message!r}"
    found = [int(n) for n in re.findall(r"position (\d+)", message)]
    assert found == [position], f"ERROR message should give position {position}: {message!r}"
    assert error.headers.get("receipt-id") == "sub-1", error.headers

    bystander.send(dest, "still served", receipt=True)
    assert bodies(bystander.wait_for(1)) == ["still served"]
    broker_still_serves(broker.stomp_port)


def test_an_invalid_selector_on_an_existing_durable_subscription_leaves_it_and_its_messages(
        broker, stomp_client, raw_stomp, queue_name):
    topic = f"zsel.{queue_name}"
    client_id = unique("keep")
    durable(stomp_client, broker, client_id, topic, "sub", selector="color = 'red'").disconnect()
    sent = send_all(stomp_client(broker), f"/topic/{topic}", numbered("red", 5), headers=RED)
    broker.wait_queue(f"{client_id}.sub", messages=5)

    raw = raw_stomp(broker)
    raw.connect("1.2", headers={"client-id": client_id})
    raw.send_frame("SUBSCRIBE", {"id": "s1", "destination": f"/topic/{topic}",
                                 "durable-subscription-name": "sub", "selector": "color = = 'red'"})
    raw.expect_error()

    status, queue = broker.http_get(f"/api/queues/{client_id}.sub")
    assert status == 200, f"a rejected SUBSCRIBE deleted the durable subscription: {status} {queue}"
    assert (queue["filter"], queue["messages"]) == ("color = 'red'", 5), queue
    again = durable(stomp_client, broker, client_id, topic, "sub", selector="color = 'red'")
    assert take(again, 5) == sent


# -- durable subscriptions with a selector --------------------------------------------------------


def test_a_durable_subscription_with_a_selector_is_a_filtered_queue_also_after_a_restart(
        start_broker, stomp_client):
    broker = start_broker({"address-settings": {"#": {"page-size-bytes": "16KiB", "max-size-bytes": 0}}})
    topic, client_id = unique("dsel"), unique("dclient")
    queue_name = f"{client_id}.reds"
    selector = "color = 'red'"

    sub = durable(stomp_client, broker, client_id, topic, "reds", selector=selector)
    queue = broker.queue(queue_name)
    assert (queue["filter"], queue["durable"], queue["address"]) == (selector, True, topic), queue
    producer = stomp_client(broker)
    mixed = [(f"{c}{n}", {"color": c}) for n in range(30) for c in ("red", "green")]
    send_each(producer, f"/topic/{topic}", mixed[:20])
    assert take(sub, 10) == [f"red{n}" for n in range(10)]
    sub.disconnect()

    send_each(producer, f"/topic/{topic}", mixed[20:40])
    broker.wait_queue(queue_name, messages=10)
    producer.disconnect()
    broker.restart()

    queue = broker.queue(queue_name)
    assert (queue["filter"], queue["durable"], queue["messages"]) == (selector, True, 10), queue
    send_each(stomp_client(broker), f"/topic/{topic}", mixed[40:])
    broker.wait_queue(queue_name, messages=20)
    again = durable(stomp_client, broker, client_id, topic, "reds", selector=selector)
    assert take(again, 20) == [f"red{n}" for n in range(10, 30)]
    broker.wait_queue(queue_name, messages=0, messages_delivering=0)
    wait_no_page_files(broker, topic)


# -- what selectors see: numeric headers and JMS names -----------------------------------------------


ADDRESS_KINDS = pytest.mark.parametrize("prefix", ["", "zsel."], ids=["in-memory", "paged"])


def _selected(broker, stomp_client, address: str, selector: str, count: int) -> list[str]:
    return drain(stomp_client(broker), f"/queue/{address}", count, headers={"selector": selector})


@ADDRESS_KINDS
def test_a_numeric_header_compares_as_a_number_against_a_numeric_literal(
        broker, stomp_client, prefix, queue_name):
    address = f"{prefix}{queue_name}"
    weights = ["1.5"] * 20 + ["3.1", "2.4", "2.5", "10", "2.50001", "abc", "-7"] + ["0.5"] * 20
    send_each(stomp_client(broker), f"/queue/{address}",
              [(f"w{n}={w}", {"weight": w}) for n, w in enumerate(weights)])
    got = _selected(broker, stomp_client, address, "weight > 2.5", 3)
    assert got == ["w20=3.1", "w23=10", "w24=2.50001"]
    broker.wait_queue(address, messages=len(weights) - 3)


@ADDRESS_KINDS
def test_jms_priority_selects_the_high_priority_messages(broker, stomp_client, prefix, queue_name):
    address = f"{prefix}{queue_name}"
    priorities = [4] * 20 + [7, 5, 9, 6, 0] + [4] * 20
    send_each(stomp_client(broker), f"/queue/{address}",
              [(f"p{n}-{p}", {"priority": p}) for n, p in enumerate(priorities)])
    got = _selected(broker, stomp_client, address, "JMSPriority > 5", 3)
    assert sorted(got) == ["p20-7", "p22-9", "p23-6"]
    broker.wait_queue(address, messages=len(priorities) - 3)


@ADDRESS_KINDS
def test_jms_delivery_mode_tells_persistent_from_non_persistent(broker, stomp_client, prefix, queue_name):
    address = f"{prefix}{queue_name}"
    dest = f"/queue/{address}"
    producer = stomp_client(broker)
    persistent = send_all(producer, dest, numbered("p", 10))
    transient = send_all(producer, dest, numbered("t", 10), persistent=False)
    persistent += send_all(producer, dest, numbered("p", 10, start=10))
    assert _selected(broker, stomp_client, address, "JMSDeliveryMode = 'PERSISTENT'", 20) == persistent
    assert _selected(broker, stomp_client, address, "JMSDeliveryMode = 'NON_PERSISTENT'", 10) == transient
    broker.wait_queue(address, messages=0)


@ADDRESS_KINDS
def test_a_quoted_identifier_selects_on_a_dotted_header(broker, stomp_client, prefix, queue_name):
    # Artemis' quoted identifiers: "a.test" is the header `a.test`, not `a` and `test`.
    address = f"{prefix}{queue_name}"
    tests = ["other"] * 20 + ["value", "other", "value"] + ["other"] * 20
    send_each(stomp_client(broker), f"/queue/{address}",
              [(f"m{n}", {"a.test": t, "a": "value"}) for n, t in enumerate(tests)])
    got = _selected(broker, stomp_client, address, "\"a.test\" = 'value'", 2)
    assert got == ["m20", "m22"]
    broker.wait_queue(address, messages=len(tests) - 2)

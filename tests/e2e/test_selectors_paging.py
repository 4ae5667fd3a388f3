"""Selective consumers looking ahead in page files: what happens to what they take.

A consumer with a selector takes matching messages from far beyond the queue's read position
(test_selectors.py). These tests follow such messages afterwards: not acknowledged (the
consumer goes away) they come back in their place for everybody; acknowledged they never come
back, not after a restart either; several selective consumers share a paged queue, each in
order; a small prefetch still walks all the pages.

One broker for the module, 16 KiB pages, `sel.` addresses page past 32 KiB; the restart test
runs its own broker.
"""

from __future__ import annotations

import time

from brokerproc import unique
from test_paging_helpers import (
    assert_paging,
    labels,
    page_files,
    send_all,
    take,
    wait_frames,
    wait_no_page_files,
)
from test_selectors_helpers import browse, drain, send_each

BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "sel.#": {"max-size-bytes": "32KiB"},
    },
}


def _fill(broker, stomp_client, address: str, colors: list[str], size: int = 256) -> list[str]:
    """One message per color, labelled `<color><n>`, headers color=<color>; paging asserted."""
    names = [f"{c}{n}" for n, c in enumerate(colors)]
    send_each(stomp_client(broker), f"/queue/{address}",
              [(name, {"color": c}) for name, c in zip(names, colors, strict=True)], size=size, timeout=30)
    assert_paging(broker, address)
    return names


def test_a_late_message_a_selective_consumer_took_but_never_acked_comes_back_in_its_place(
        broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    names = _fill(broker, stomp_client, address, ["blue"] * 2000 + ["red"] + ["blue"] * 10)

    red = stomp_client(broker)
    red.subscribe(dest, ack="client-individual", headers={"selector": "color = 'red'"})
    assert labels(wait_frames(red, 1)) == ["red2000"]
    red.disconnect()  # never acked: back to the queue
    broker.wait_queue(address, messages=2011, messages_delivering=0, messages_acknowledged=0)

    plain = stomp_client(broker)
    assert drain(plain, dest, 2011, timeout=30) == names, "the returned red is not in its place"
    frame = next(f for f in plain.messages if f.body.startswith("red"))
    assert frame.headers.get("redelivered") == "true", frame.headers
    wait_no_page_files(broker, address)


def test_a_late_message_returned_by_a_selective_consumer_goes_to_the_next_one_with_the_selector(
        broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    _fill(broker, stomp_client, address, ["blue"] * 1500 + ["red"])
    first = stomp_client(broker)
    first.subscribe(dest, ack="client-individual", headers={"selector": "color = 'red'"})
    assert labels(wait_frames(first, 1)) == ["red1500"]
    first.nack(first.messages[0], receipt=True)

    second = stomp_client(broker)
    first.disconnect()
    started = time.monotonic()
    assert drain(second, dest, 1, headers={"selector": "color = 'red'"}) == ["red1500"]
    assert time.monotonic() - started < 2.5, "the returned red message was slow to come again"
    broker.wait_queue(address, messages=1500, messages_delivering=0, messages_acknowledged=1)


def test_two_selective_consumers_share_a_paged_queue_each_in_order_and_the_rest_stays(
        broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    colors = ["red" if n % 7 == 3 else "green" if n % 11 == 5 else "blue" for n in range(2000)]
    names = _fill(broker, stomp_client, address, colors)
    reds = [n for n in names if n.startswith("red")]
    greens = [n for n in names if n.startswith("green")]
    blues = [n for n in names if n.startswith("blue")]

    red, green = stomp_client(broker), stomp_client(broker)
    assert drain(red, dest, len(reds), headers={"selector": "color = 'red'"}, timeout=20) == reds
    assert drain(green, dest, len(greens), headers={"selector": "color = 'green'"}, timeout=20) == greens
    broker.wait_queue(address, messages=len(blues), messages_delivering=0)
    assert browse(stomp_client(broker), dest, timeout=20) == blues
    assert drain(stomp_client(broker), dest, len(blues), timeout=20) == blues
    wait_no_page_files(broker, address)


def test_a_selective_consumer_with_prefetch_one_still_walks_every_page(broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    colors = ["red" if n % 100 == 99 else "blue" for n in range(3000)]
    names = _fill(broker, stomp_client, address, colors)
    reds = [n for n in names if n.startswith("red")]
    assert len(page_files(broker, address)) >= 20

    consumer = stomp_client(broker)
    consumer.subscribe(dest, ack="client-individual",
                       headers={"selector": "color = 'red'", "activemq.prefetchSize": 1})
    assert take(consumer, len(reds), timeout=20) == reds
    queue = broker.wait_queue(address, messages=3000 - len(reds), messages_delivering=0)
    assert queue["messages_acknowledged"] == len(reds), queue


def test_paged_messages_a_selective_consumer_acked_stay_gone_after_a_restart(start_broker, stomp_client):
    settings = {"page-size-bytes": "16KiB", "max-size-bytes": "32KiB"}
    broker = start_broker({"address-settings": {"#": settings}})
    address = unique("restart")
    dest = f"/queue/{address}"
    colors = ["red" if n % 50 == 25 else "blue" for n in range(2000)]
    names = _fill(broker, stomp_client, address, colors)
    reds = [n for n in names if n.startswith("red")]
    blues = [n for n in names if n.startswith("blue")]
    pages_before = len(page_files(broker, address))

    red = stomp_client(broker)
    assert drain(red, dest, len(reds), headers={"selector": "color = 'red'"}, timeout=20) == reds
    broker.wait_queue(address, messages=len(blues), messages_delivering=0)
    red.disconnect()
    broker.restart()

    queue = broker.queue(address)
    assert (queue["messages"], queue["messages_delivering"]) == (len(blues), 0), (
        f"acknowledged reds came back after the restart: {queue}")
    assert len(page_files(broker, address)) <= pages_before
    nothing = stomp_client(broker)
    nothing.subscribe(dest, ack="client-individual", headers={"selector": "color = 'red'"})
    nothing.listener.assert_no_more(0, within=0.7)
    assert drain(stomp_client(broker), dest, len(blues), timeout=20) == blues
    wait_no_page_files(broker, address)


def test_a_selector_on_priority_and_a_property_over_paged_messages_of_mixed_priority(
        broker, stomp_client, queue_name):
    address = f"sel.{queue_name}"
    dest = f"/queue/{address}"
    messages = [(f"m{n}-p{n % 10}", {"priority": n % 10, "color": "red" if n % 3 == 0 else "blue"})
                for n in range(600)]
    send_all(stomp_client(broker), dest, ["warmup"], size=40 * 1024)  # pages everything after it
    send_each(stomp_client(broker), dest, messages)
    assert_paging(broker, address)
    wanted = sorted(name for (name, h) in messages if h["priority"] >= 8 and h["color"] == "red")
    got = drain(stomp_client(broker), dest, len(wanted),
                headers={"selector": "JMSPriority >= 8 AND color = 'red'"}, timeout=20)
    assert sorted(got) == wanted
    broker.wait_queue(address, messages=601 - len(wanted), messages_delivering=0)

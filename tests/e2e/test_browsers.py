"""Queue browsers (SUBSCRIBE browser:true) over in-memory and paged messages, black box over STOMP.

HornetQ browsed only what was in memory (seed 002); Artemis browses through the page cursor
(seed 000). pagemq's browser walks the queue in order, memory then page files, without
consuming anything, and ends with a MESSAGE carrying `browser:end` and an empty body (as
ActiveMQ). One broker for the module, 16 KiB pages: `zb.` addresses page every message
(max-size-bytes 0), `b.` ones page past 32 KiB.
"""

from __future__ import annotations

import socket
import time

from brokerproc import Frame, broker_still_serves
from test_paging_helpers import (
    assert_paging,
    label,
    labels,
    numbered,
    page_files,
    send_all,
    wait_frames,
    wait_no_page_files,
)
from test_selectors_helpers import browse, drain, is_browser_end, send_each

BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "b.#": {"max-size-bytes": "32KiB"},
        "zb.#": {"max-size-bytes": 0},
        "zbig.#": {"max-size-bytes": 0, "page-size-bytes": "256KiB"},
    },
}


def _unchanged(broker, address: str, messages: int, acknowledged: int = 0) -> None:
    queue = broker.queue(address)
    assert (queue["messages"], queue["messages_acknowledged"], queue["messages_delivering"]) == (
        messages, acknowledged, 0), f"the browser changed the queue: {queue}"


# -- empty results ----------------------------------------------------------------------------


def test_browsing_a_queue_never_used_gives_only_browser_end(broker, stomp_client, queue_name):
    client = stomp_client(broker)
    assert browse(client, f"/queue/{queue_name}") == []
    end = client.messages[-1]
    assert end.headers.get("subscription") and end.headers.get("destination") == f"/queue/{queue_name}", (
        end.headers)


def test_browsing_a_drained_paged_queue_gives_only_browser_end(broker, stomp_client, queue_name):
    address = f"zb.{queue_name}"
    dest = f"/queue/{address}"
    sent = send_all(stomp_client(broker), dest, numbered("m", 40))
    assert_paging(broker, address)
    assert drain(stomp_client(broker), dest, 40) == sent
    broker.wait_queue(address, messages=0, messages_delivering=0)
    assert browse(stomp_client(broker), dest) == []


def test_a_browse_with_a_selector_matching_nothing_gives_only_browser_end(
        broker, stomp_client, queue_name):
    address = f"b.{queue_name}"
    dest = f"/queue/{address}"
    send_all(stomp_client(broker), dest, numbered("blue", 100), headers={"color": "blue"})
    assert_paging(broker, address)
    client = stomp_client(broker)
    assert browse(client, dest, "color = 'red'") == []
    assert browse(client, dest, "color = 'blue' AND size > 3") == []
    _unchanged(broker, address, 100)


# -- everything, in order, once ----------------------------------------------------------------


def test_a_browser_sees_in_memory_then_paged_messages_all_in_order_none_twice(
        broker, stomp_client, queue_name):
    address = f"b.{queue_name}"
    dest = f"/queue/{address}"
    sent = send_all(stomp_client(broker), dest, numbered("m", 150))
    info = assert_paging(broker, address)
    assert info["messages_in_memory"] > 0 and info["messages_paged"] > 100, info
    pages = [p.name for p in page_files(broker, address)]

    client = stomp_client(broker)
    assert browse(client, dest) == sent
    assert browse(client, dest) == sent, "a second browse differs from the first"
    _unchanged(broker, address, 150)
    assert [p.name for p in page_files(broker, address)] == pages

    assert drain(stomp_client(broker), dest, 150) == sent, "browsing changed what consumers get"
    wait_no_page_files(broker, address)


def test_a_browser_sees_messages_a_consumer_holds_unacknowledged_in_order(
        broker, stomp_client, queue_name):
    address = f"b.{queue_name}"
    dest = f"/queue/{address}"
    sent = send_all(stomp_client(broker), dest, numbered("m", 120))
    assert_paging(broker, address)
    holder = stomp_client(broker)
    holder.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 5})
    assert labels(wait_frames(holder, 5)) == sent[:5]

    assert browse(stomp_client(broker), dest) == sent
    queue = broker.queue(address)
    assert (queue["messages"], queue["messages_delivering"]) == (120, 5), queue


def test_a_browser_sees_the_whole_queue_in_order_while_a_selective_consumer_holds_a_late_message(
        broker, stomp_client, queue_name):
    """The selective consumer took a message from a late page file ahead of the queue's read
    position; the browse still lists the queue in its order, that message once, in its place."""
    address = f"zb.{queue_name}"
    dest = f"/queue/{address}"
    names = numbered("m", 200)
    colors = {name: ("red" if n == 170 else "blue") for n, name in enumerate(names)}
    send_each(stomp_client(broker), dest, [(name, {"color": colors[name]}) for name in names])
    assert_paging(broker, address, paged=200)
    picky = stomp_client(broker)
    picky.subscribe(dest, ack="client-individual", headers={"selector": "color = 'red'"})
    assert labels(wait_frames(picky, 1)) == ["m170"]

    assert browse(stomp_client(broker), dest) == names
    assert browse(stomp_client(broker), dest, "color = 'blue'") == [n for n in names if n != "m170"]


def test_a_browser_over_a_deep_paged_queue_gets_everything_through_flow_control(
        broker, stomp_client, queue_name):
    """3 MiB of paged messages, more than the session's output buffer: the browse pauses on
    the slow reader and resumes, still complete and in order."""
    address = f"zb.{queue_name}"
    dest = f"/queue/{address}"
    sent = send_all(stomp_client(broker), dest, numbered("m", 1500), size=2048, timeout=20)
    assert_paging(broker, address, paged=1500)
    assert browse(stomp_client(broker), dest, timeout=20) == sent
    _unchanged(broker, address, 1500)


def test_a_stalled_browse_survives_its_page_files_being_consumed_and_deleted(
        broker, stomp_client, raw_stomp, queue_name):
    """A browser that stops reading part-way (20 MiB of paged messages, more than the socket
    buffers and the session's output buffer hold) keeps its place in the page files; a consumer
    then drains the queue and every page file goes. The browse, read at last, ends with
    browser:end: in order, nothing twice, nothing never sent, and the broker carries on."""
    address = f"zbig.{queue_name}"
    dest = f"/queue/{address}"
    sent = send_all(stomp_client(broker), dest, numbered("m", 2500), size=8192, timeout=30)
    assert_paging(broker, address, paged=2500)

    raw = raw_stomp(broker)
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    raw.connect("1.2")
    raw.send_frame("SUBSCRIBE", {"id": "b1", "destination": dest, "browser": "true", "ack": "auto"})
    time.sleep(0.5)  # the broker writes what the socket takes, then waits for the reader

    assert drain(stomp_client(broker), dest, 2500, timeout=30) == sent
    broker.wait_queue(address, messages=0, messages_delivering=0)
    wait_no_page_files(broker, address)

    frames: list[Frame] = []
    deadline = time.monotonic() + 10
    while not frames or (frames[-1].command == "MESSAGE" and not is_browser_end(frames[-1])):
        try:
            frame = raw.read_frame(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            frame = None
        if frame is None:
            seen = [label(f) for f in frames]
            raise AssertionError(f"the stalled browse never ended: {len(seen)} messages "
                                 f"({seen[:3]} ... {seen[-3:]}), then {'close' if raw.closed else 'silence'}")
        frames.append(frame)
    assert is_browser_end(frames[-1]), f"{frames[-1].command} {frames[-1].headers} {frames[-1].body[:200]!r}"
    seen = [label(f) for f in frames[:-1]]
    assert 0 < len(seen) < len(sent), f"test construction: the browse should have stalled, got {len(seen)}"
    assert len(set(seen)) == len(seen), "the stalled browse delivered a message twice"
    assert set(seen) <= set(sent), f"browsed messages never sent: {sorted(set(seen) - set(sent))[:5]}"
    assert seen == sorted(seen, key=sent.index), "the stalled browse is out of order"
    assert not broker.tracebacks(), broker.log_tail(40)
    broker_still_serves(broker.stomp_port)


def test_a_browse_with_a_selector_over_paged_messages_sees_only_the_matches_in_order(
        broker, stomp_client, queue_name):
    address = f"zb.{queue_name}"
    dest = f"/queue/{address}"
    messages = [(f"m{n}", {"tenth": "yes" if n % 10 == 0 else "no", "n": n}) for n in range(200)]
    send_each(stomp_client(broker), dest, messages)
    assert_paging(broker, address, paged=200)
    client = stomp_client(broker)
    assert browse(client, dest, "tenth = 'yes'") == [f"m{n}" for n in range(0, 200, 10)]
    assert browse(client, dest, "n >= 195") == [f"m{n}" for n in range(195, 200)]
    assert browse(client, dest, "n BETWEEN 40 AND 42 OR n = 199") == ["m40", "m41", "m42", "m199"]
    _unchanged(broker, address, 200)


def test_a_browser_consumes_nothing_from_a_queue_a_consumer_then_drains(broker, stomp_client, queue_name):
    address = f"b.{queue_name}"
    dest = f"/queue/{address}"
    sent = send_all(stomp_client(broker), dest, numbered("m", 80), size=512)
    browser = stomp_client(broker)
    assert browse(browser, dest) == sent
    # the browse is over at browser:end (as ActiveMQ): later messages do not reach it
    extra = send_all(stomp_client(broker), dest, ["late"], size=512)
    assert drain(stomp_client(broker), dest, 81) == sent + extra
    browser.listener.assert_no_more(81, within=0.3)

"""Hostile use of the page read path (byte ranges read two ahead in the page-I/O worker,
frames decoded on the loop, page summaries folding decimal headers inline).

Each test runs its own short broker: a damaged page met mid-drain with messages larger than
a range mixed with small ones; SIGTERM and kill -9 while a consumer drains through the
worker; numeric selectors over paged data whose summaries let a consumer skip pages
(compared with the same messages on an address that never pages); a browser while the queue
drains; tiny read limits and pages smaller than a message.
"""

from __future__ import annotations

import time
from pathlib import Path

from admin_http import ok, path_of
from brokerproc import unique
from test_paging_helpers import (
    ack_frames,
    consume,
    labels,
    numbered,
    page_files,
    send_all,
    wait_address,
    wait_frames,
)
from test_selectors_helpers import browse, drain, send_each

from pagemq.core.selector.runtime import read_number
from pagemq.storage.paging.page_format import FILE_HEADER, FRAME_HEADER

KIB = 1024
BIG = 300 * KIB  # larger than a read range (256 KiB)


def _frames(page: Path) -> list[tuple[int, int]]:
    data = page.read_bytes()
    at, out = FILE_HEADER.size, []
    while at + FRAME_HEADER.size <= len(data):
        end = at + FRAME_HEADER.size + FRAME_HEADER.unpack_from(data, at)[2]
        out.append((at, end))
        at = end
    return out


def _flip(path: Path, marker: bytes, skip: int) -> None:
    data = bytearray(path.read_bytes())
    at = data.find(marker)
    assert at >= 0, f"{marker!r} not in {path}"
    data[at + len(marker) + skip] ^= 0x41
    path.write_bytes(bytes(data))


def _take_acking(consumer, count: int, timeout: float = 30) -> list:
    """MESSAGE frames as they come, each acknowledged (the last of each batch with a
    receipt), until `count` came or `timeout`."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        more = consumer.listener.messages[len(got):count]
        if more:
            ack_frames(consumer, more)
            got.extend(more)
        else:
            time.sleep(0.02)
    return got


def _holding(pages: list[Path], marker: bytes) -> Path:
    return next(p for p in pages if marker in p.read_bytes())


def test_a_page_damaged_mid_drain_with_messages_larger_than_a_range_costs_only_the_damaged_ones(
        start_broker, stomp_client):
    """Big (300 KiB) and small messages mixed, several pages; while a consumer is draining,
    bytes flip inside one big message (its frame spans ranges) and one small one in a later
    page. Every other message comes, once, in order; the queue counts down to 0."""
    proc = start_broker({"address-settings": {"#": {"page-size-bytes": "1MiB", "max-size-bytes": 0}}})
    queue = unique("bigdmg")
    dest = f"/queue/{queue}"
    producer = stomp_client(proc)
    names = numbered("m", 40)
    for name in names:
        send_all(producer, dest, [name], size=BIG if int(name[1:]) % 3 == 0 else 2 * KIB)
    producer.disconnect()
    pages = page_files(proc, queue)
    assert len(pages) >= 4, pages

    consumer = stomp_client(proc)
    consumer.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 2})
    first = wait_frames(consumer, 2)
    # the consumer holds two unacknowledged: the reader is in the first page; damage later ones
    _flip(_holding(pages, b"m27|"), b"m27|", 100_000)  # a big one, inside its second range
    _flip(_holding(pages, b"m31|"), b"m31|", 10)  # a small one
    assert labels(first) == ["m0", "m1"]
    got = _take_acking(consumer, 38)
    expected = [n for n in names if n not in ("m27", "m31")]
    assert labels(got) == expected
    wait_address(proc, queue, 10.0, messages=0)
    time.sleep(0.3)
    assert len(consumer.listener.messages) == 38, "more came than were sent"
    damaged = [line for line in proc.current_log if "damaged bytes at offset" in line]
    assert len(damaged) == 2, proc.log_tail()


def _drain_interrupted(start_broker, stomp_client, *, kill: bool) -> None:
    proc = start_broker({"address-settings": {"#": {
        "page-size-bytes": "64KiB", "max-size-bytes": 0, "max-read-page-bytes": "32KiB"}}})
    queue = unique("midstop")
    dest = f"/queue/{queue}"
    producer = stomp_client(proc)
    names = numbered("m", 300)
    send_all(producer, dest, names, size=3 * KIB)
    producer.disconnect()
    consumer = stomp_client(proc)
    consumer.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 50})
    frames = _take_acking(consumer, 120)  # acked as they come, the last with a receipt
    assert labels(frames) == names[:120]
    if kill:
        proc.kill()
        proc.start()
    else:
        proc.stop()
        assert not proc.tracebacks(), proc.log_tail(80)
        proc.start()
    again = stomp_client(proc)
    assert consume(again, dest, 180, timeout=30) == names[120:]
    wait_address(proc, queue, 10.0, messages=0)


def test_sigterm_while_a_consumer_drains_through_the_worker_loses_and_repeats_nothing(
        start_broker, stomp_client):
    _drain_interrupted(start_broker, stomp_client, kill=False)


def test_kill_9_while_a_consumer_drains_through_the_worker_loses_and_repeats_nothing(
        start_broker, stomp_client):
    _drain_interrupted(start_broker, stomp_client, kill=True)


VALUES = ["0", "007", "7", "12345678901234567890", "-5", "1e3", "1000", "9" * 400, "abc",
          "18446744073709551617", "9007199254740993", "3.5", "", "٣", "+7"]
SELECTORS = ["n = 7", "n > 1e19", "n < 0", "n >= 1000", "n > 9007199254740992",
             "n = 9007199254740993", "n BETWEEN 1 AND 10", "n <> 0"]


def _numeric(value: str, selector: str) -> bool:
    number = read_number(value)
    if number is None:
        return False
    if selector == "n = 7":
        return number == 7
    if selector == "n > 1e19":
        return number > 1e19
    if selector == "n < 0":
        return number < 0
    if selector == "n >= 1000":
        return number >= 1000
    if selector == "n > 9007199254740992":
        return number > 9007199254740992
    if selector == "n = 9007199254740993":
        return number == 9007199254740993
    if selector == "n BETWEEN 1 AND 10":
        return 1 <= number <= 10
    return number != 0


def test_numeric_selectors_select_the_same_on_paged_and_unpaged_subscriptions(start_broker, stomp_client):
    """Durable subscribers with numeric selectors on a header whose values are "0", "007",
    20 and 400 digit integers, "-5", "1e3" ...; grouped so each 8 KiB page holds few distinct
    values (summaries that prune). What each selector gets is what it gets where nothing
    pages, and what the header's numbers say."""
    proc = start_broker({"address-settings": {
        "paged.#": {"page-size-bytes": "8KiB", "max-size-bytes": 0},
    }})
    plan: list[tuple[str, dict[str, str]]] = []
    for group, value in enumerate(VALUES):
        for k in range(12):
            plan.append((f"g{group}k{k}", {"n": value}))
    plan.append(("last", {"n": "7"}))
    results: dict[str, dict[str, list[str]]] = {}
    for kind in ("paged", "plain"):
        topic = f"{kind}.{unique('num')}"
        for index, selector in enumerate(SELECTORS):
            sub = stomp_client(proc, client_id=f"{topic}-c{index}")
            sub.subscribe(f"/topic/{topic}", headers={"durable-subscription-name": "s", "selector": selector})
            sub.disconnect()
        send_each(stomp_client(proc), f"/topic/{topic}", plan, size=512, timeout=30)
        if kind == "paged":
            assert len(page_files(proc, topic)) > 5
        results[kind] = {}
        for index, selector in enumerate(SELECTORS):
            expected = [name for name, headers in plan if _numeric(headers["n"], selector)]
            client = stomp_client(proc, client_id=f"{topic}-c{index}")
            got = drain(client, f"/topic/{topic}", len(expected),
                        headers={"durable-subscription-name": "s", "selector": selector}, settle=0.2)
            results[kind][selector] = got
            assert got == expected, (kind, selector)
            client.disconnect()
    assert results["paged"] == results["plain"]


def test_a_browser_while_the_queue_drains_sees_no_message_twice_and_the_drain_loses_none(
        start_broker, stomp_client):
    proc = start_broker({"address-settings": {"#": {
        "page-size-bytes": "16KiB", "max-size-bytes": 0, "max-read-page-messages": 3}}})
    queue = unique("brdrain")
    dest = f"/queue/{queue}"
    names = numbered("m", 200)
    send_all(stomp_client(proc), dest, names, size=2 * KIB)
    consumer = stomp_client(proc)
    consumer.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 5})
    browser = stomp_client(proc)
    seen = browse(browser, dest)
    assert seen == sorted(seen, key=lambda n: int(n[1:])) and set(seen) <= set(names)
    assert labels(_take_acking(consumer, 200)) == names
    wait_address(proc, queue, 10.0, messages=0)


def test_pages_smaller_than_a_message_and_a_tiny_budget_deliver_every_message_in_order(
        start_broker, stomp_client):
    proc = start_broker({"broker": {"global-max-size": "64KiB"}, "address-settings": {"#": {
        "page-size-bytes": "8KiB", "max-size-bytes": 0, "max-read-page-messages": 1,
        "max-read-page-bytes": "16KiB"}}})
    queue = unique("tiny")
    dest = f"/queue/{queue}"
    names = numbered("m", 30)
    producer = stomp_client(proc)
    for name in names:
        send_all(producer, dest, [name], size=100 * KIB if int(name[1:]) % 2 else 500)
    assert len(page_files(proc, queue)) >= 15
    consumer = stomp_client(proc)
    assert consume(consumer, dest, 30, timeout=30) == names
    wait_address(proc, queue, 10.0, messages=0)


def test_six_subscribers_draining_at_once_on_a_tiny_budget_each_get_every_message(
        start_broker, stomp_client):
    """Each reading queue charges its ranges in flight (one decoded, two read ahead, 16 KiB
    at least each) to the budget: six of them alone exceed a 64 KiB budget. Every subscriber
    still gets every message, in order."""
    proc = start_broker({"broker": {"global-max-size": "64KiB"}, "address-settings": {"#": {
        "page-size-bytes": "32KiB", "max-size-bytes": 0}}})
    topic = unique("tinytopic")
    clients = []
    for n in range(6):
        sub = stomp_client(proc, client_id=f"{topic}-c{n}")
        sub.subscribe(f"/topic/{topic}", ack="client-individual",
                      headers={"durable-subscription-name": "s", "activemq.prefetchSize": 1 + n * 7})
        clients.append(sub)
    names = numbered("m", 150)
    send_all(stomp_client(proc), f"/topic/{topic}", names, size=2 * KIB, timeout=30)
    deadline = time.monotonic() + 40
    got: list[list] = [[] for _ in clients]
    while time.monotonic() < deadline and any(len(g) < 150 for g in got):
        idle = True
        for sub, have in zip(clients, got, strict=True):
            more = sub.listener.messages[len(have):150]
            if more:
                idle = False
                ack_frames(sub, more)
                have.extend(more)
        if idle:
            time.sleep(0.02)
    for n, have in enumerate(got):
        assert labels(have) == names, f"subscriber {n}: {len(have)} of 150"
    wait_address(proc, topic, 10.0, messages=0)


def test_consumers_leaving_mid_read_and_a_selector_taking_ahead_lose_and_repeat_nothing(
        start_broker, stomp_client):
    """Big frames keep ranges in flight in the worker. A plain consumer takes a few, acks all
    but the last and disconnects, again and again, while a selective consumer takes every
    red message far ahead of the queue's read position (completing pages under the reader).
    Each message is acknowledged exactly once; nothing is left."""
    proc = start_broker({"address-settings": {"#": {"page-size-bytes": "1MiB", "max-size-bytes": 0}}})
    queue = unique("leave")
    dest = f"/queue/{queue}"
    plan = [(f"m{n}", {"color": "red" if n % 4 == 1 else "blue"}) for n in range(48)]
    producer = stomp_client(proc)
    for name, headers in plan:
        send_each(producer, dest, [(name, headers)], size=BIG if int(name[1:]) % 3 == 0 else 3 * KIB)
    red = stomp_client(proc)
    red.subscribe(dest, ack="client-individual", headers={"selector": "color = 'red'",
                                                          "activemq.prefetchSize": 3})
    acked: list[str] = []
    deadline = time.monotonic() + 40
    while len(acked) < 48 and time.monotonic() < deadline:
        plain = stomp_client(proc)
        plain.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 4})
        time.sleep(0.15)
        frames = plain.listener.messages[:]
        if len(frames) > 1:
            ack_frames(plain, frames[:-1])
            acked.extend(labels(frames[:-1]))
        plain.disconnect()
        reds = red.listener.messages[len([a for a in acked if a.startswith("r")]):]
        if reds:
            ack_frames(red, reds)
            acked.extend("r" + label for label in labels(reds))
        if len(frames) <= 1 and not reds:
            last = stomp_client(proc)
            last.subscribe(dest, ack="client-individual")
            time.sleep(0.3)
            ack_frames(last, last.listener.messages[:])
            acked.extend(labels(last.listener.messages))
            last.disconnect()
    plain_names = [a for a in acked if not a.startswith("r")]
    red_names = [a[1:] for a in acked if a.startswith("r")]
    everything = sorted(plain_names + red_names, key=lambda n: int(n[1:]))
    assert everything == [name for name, _h in plan], "a message was lost or acknowledged twice"
    wait_address(proc, queue, 10.0, messages=0)


def test_a_queue_deleted_while_its_pages_are_read_in_the_worker_leaves_the_broker_sound(
        start_broker, stomp_client):
    """A consumer and a browser are reading 300 KiB frames (ranges in flight) when the queue
    is deleted over HTTP: no traceback, no hang; a queue made again under the same name
    starts empty and delivers what is sent to it, and the stop is clean."""
    proc = start_broker({"address-settings": {"#": {"page-size-bytes": "1MiB", "max-size-bytes": 0}}})
    queue = unique("delread")
    dest = f"/queue/{queue}"
    producer = stomp_client(proc)
    send_all(producer, dest, numbered("m", 24), size=BIG)
    consumer = stomp_client(proc)
    consumer.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 1})
    wait_frames(consumer, 1)
    browser = stomp_client(proc)
    browser.subscribe(dest, headers={"browser": "true"})
    ok(proc, "DELETE", path_of("queues", queue))
    time.sleep(0.5)
    consumer.drop()
    browser.drop()
    assert not proc.tracebacks(), proc.log_tail(80)
    send_all(producer, dest, ["after"], size=BIG)
    again = stomp_client(proc)
    assert consume(again, dest, 1) == ["after"]
    wait_address(proc, queue, 10.0, messages=0)


def test_stopping_while_big_frames_are_being_read_exits_cleanly_and_keeps_every_message(
        start_broker, stomp_client):
    """Three consumers read 300 KiB frames (ranges in the worker) when SIGTERM comes: the
    broker exits 0 without a traceback; after the restart every unacknowledged message is
    there, in order."""
    proc = start_broker({"address-settings": {"#": {"page-size-bytes": "2MiB", "max-size-bytes": 0}}})
    queues = [unique(f"stopbig{n}") for n in range(3)]
    producer = stomp_client(proc)
    for queue in queues:
        send_all(producer, f"/queue/{queue}", numbered("m", 12), size=BIG)
    consumers = []
    for queue in queues:
        consumer = stomp_client(proc)
        consumer.subscribe(f"/queue/{queue}", ack="client-individual", headers={"activemq.prefetchSize": 1})
        consumers.append(consumer)
    for consumer in consumers:
        ack_frames(consumer, wait_frames(consumer, 1))
    proc.stop()
    assert not proc.tracebacks(), proc.log_tail(80)
    proc.start()
    for queue in queues:
        assert consume(stomp_client(proc), f"/queue/{queue}", 11, timeout=20) == numbered("m", 11, start=1)

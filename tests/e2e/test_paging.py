"""Paging scenarios ported from Artemis' PagingTest family, black box over STOMP.

One broker for the module. Small pages (16 KiB) and small address limits make every
scenario page within a few dozen 1 KiB messages; the address prefix picks the limit:
`zero.` pages everything (max-size-bytes 0), `small.` pages past 16 KiB, `k100.` past
100 KiB; `hold.`/`zhold.` are `small.`/`zero.` for consumers that hold everything
unacknowledged. Page files are checked on disk (`<data-dir>/paging/<folder>/*.page`, the folder
named by its `address.txt`) and through the HTTP fields `paging`, `messages_paged` and
`page_files`.
"""

from __future__ import annotations

import time

from brokerproc import RawStomp, encode_frame, unique
from test_paging_helpers import (
    ack_frames,
    assert_paging,
    body,
    consume,
    durable,
    labels,
    numbered,
    page_files,
    page_folder,
    send_all,
    take,
    wait_address,
    wait_frames,
    wait_no_page_files,
)

HOLD = {"max-read-page-bytes": "1MiB", "prefetch-page-bytes": "1MiB"}
BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "zero.#": {"max-size-bytes": 0},
        "small.#": {"max-size-bytes": "16KiB"},
        "k100.#": {"max-size-bytes": "100KiB"},
        # for consumers that hold every message unacknowledged at once: by default only
        # max-read-page-bytes (2 pages) of unacknowledged paged messages are read in
        "hold.#": {"max-size-bytes": "16KiB", **HOLD},
        "zhold.#": {"max-size-bytes": 0, **HOLD},
    },
    "addresses": [
        {"name": "small.nomatch", "routing-type": "multicast", "queues": [
            {"name": "nomatch.all"},
            {"name": "nomatch.none", "filter": "color = 'none'"},
        ]},
        {"name": "zero.holes", "routing-type": "multicast", "queues": [
            {"name": "holes.q1", "filter": "color = 'red'"},
            {"name": "holes.q2", "filter": "color = 'blue'"},
        ]},
    ],
}


# -- entering and leaving page mode ---------------------------------------------------------


def test_max_size_bytes_zero_pages_every_message_and_delivers_them_in_order(
        broker, stomp_client, queue_name):
    address = f"zero.{queue_name}"
    producer = stomp_client(broker)
    sent = send_all(producer, f"/queue/{address}", numbered("m", 10))

    info = assert_paging(broker, address, paged=10)
    assert info["messages"] == 10
    assert info["messages_in_memory"] == 0, info
    assert (page_folder(broker, address) / "address.txt").read_text() == address
    assert broker.queue(address)["messages_paged"] == 10

    assert consume(stomp_client(broker), f"/queue/{address}", 10) == sent
    broker.wait_queue(address, messages=0, messages_paged=0)
    wait_no_page_files(broker, address)


def test_only_the_address_over_its_limit_pages(broker, stomp_client, queue_name):
    paged, plain = f"small.{queue_name}", queue_name
    producer = stomp_client(broker)
    sent_paged = send_all(producer, f"/queue/{paged}", numbered("a", 40))
    sent_plain = send_all(producer, f"/queue/{plain}", numbered("b", 40))

    assert_paging(broker, paged)
    info = broker.address(plain)
    assert (info["paging"], info["messages_paged"], info["page_files"]) == (False, 0, 0), info
    assert info["messages_in_memory"] == 40, info
    assert page_files(broker, plain) == [], f"page files of non-paging {page_folder(broker, plain)}"

    assert consume(stomp_client(broker), f"/queue/{paged}", 40) == sent_paged
    assert consume(stomp_client(broker), f"/queue/{plain}", 40) == sent_plain
    wait_no_page_files(broker, paged)
    assert page_files(broker, plain) == []


def test_page_files_are_deleted_once_every_paged_message_is_consumed(broker, stomp_client, queue_name):
    address = f"k100.{queue_name}"
    sent = send_all(stomp_client(broker), f"/queue/{address}", numbered("m", 200))
    info = assert_paging(broker, address)
    assert info["messages_in_memory"] + info["messages_paged"] == 200, info
    assert info["messages_in_memory"] <= 100, f"more than 100 KiB held in memory: {info}"
    assert len(page_files(broker, address)) >= 3

    assert consume(stomp_client(broker), f"/queue/{address}", 200) == sent
    wait_address(broker, address, paging=False, messages=0, messages_paged=0)
    wait_no_page_files(broker, address)


def test_page_files_in_the_api_counts_the_files_still_on_disk(broker, stomp_client, queue_name):
    """`page_files` is ".page files on disk now": once it says 0 no file is left, also in the
    moment between the last acknowledgement and the file's removal (journal sync, then the
    page writer's delete)."""
    address = f"k100.{queue_name}"
    send_all(stomp_client(broker), f"/queue/{address}", numbered("m", 200))
    assert_paging(broker, address)
    consumer = stomp_client(broker)
    done = time.monotonic() + 30
    consumed = False
    while time.monotonic() < done:
        info = broker.address(address)
        if info["page_files"] == 0:
            assert page_files(broker, address) == [], "page_files said 0 with files on disk"
            return
        if not consumed:
            consume(consumer, f"/queue/{address}", 200)
            consumed = True
    raise AssertionError(f"page files never went: {broker.address(address)}")


def test_sends_in_one_burst_keep_each_page_file_within_page_size_bytes(broker, stomp_client, queue_name):
    """The SENDs of one socket read are appended together; a page still keeps to
    page-size-bytes (16 KiB here), as when they come one by one."""
    address = f"zero.{queue_name}"
    names = numbered("m", 200)
    with RawStomp(broker.stomp_port) as raw:
        raw.connect()
        raw.send(b"".join(encode_frame("SEND", {"destination": f"/queue/{address}", "persistent": "true",
                                                "receipt": name}, body(name)) for name in names))
        raw.read_until_receipt(names[-1])
    sizes = [path.stat().st_size for path in page_files(broker, address)]
    assert len(sizes) >= 12 and max(sizes) <= 16 * 1024, sizes
    assert consume(stomp_client(broker), f"/queue/{address}", 200) == names


def test_paging_starts_and_ends_again_five_times_in_a_row(broker, stomp_client, queue_name):
    address = f"small.{queue_name}"
    for round_no in range(5):
        producer = stomp_client(broker)
        sent = send_all(producer, f"/queue/{address}", numbered(f"r{round_no}-", 50))
        producer.disconnect()
        assert_paging(broker, address)

        consumer = stomp_client(broker)
        got = consume(consumer, f"/queue/{address}", 50)
        assert got == sent, f"round {round_no}: out of order or wrong messages"
        consumer.disconnect()
        wait_address(broker, address, paging=False, messages=0, messages_paged=0)
        wait_no_page_files(broker, address)


def test_unacknowledged_paged_messages_are_read_in_only_up_to_max_read_page_bytes(
        broker, stomp_client, queue_name):
    """PagingMaxReadLimitTest: a consumer sitting on unacked paged messages gets about
    max-read-page-bytes (default two pages, 32 KiB here) of them; acking lets the rest in."""
    address = f"small.{queue_name}"
    sent = send_all(stomp_client(broker), f"/queue/{address}", numbered("m", 80))
    assert_paging(broker, address)
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{address}", ack="client-individual",
                       headers={"activemq.prefetchSize": 100_000})
    time.sleep(1.0)
    held = len(consumer.messages)
    assert 0 < held < 80, f"{held} of 80 paged messages delivered with none acknowledged"
    time.sleep(0.3)
    assert len(consumer.messages) == held, "deliveries went on past the read limit"
    held_kib = held * 1.0
    assert held_kib <= 16 + 32 + 8, f"{held} KiB in memory unacknowledged: read limit ignored"

    assert take(consumer, 80) == sent
    wait_no_page_files(broker, address)


# -- transactions ---------------------------------------------------------------------------


def test_paged_messages_keep_their_order_over_a_rolled_back_transacted_ack(
        broker, stomp_client, queue_name):
    address = f"hold.{queue_name}"
    sent = send_all(stomp_client(broker), f"/queue/{address}", numbered("m", 100))
    assert_paging(broker, address)

    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{address}", ack="client-individual",
                       headers={"activemq.prefetchSize": 100_000})
    first = wait_frames(consumer, 100)
    assert labels(first) == sent
    consumer.begin("tx-rollback")
    for frame in first:
        consumer.ack(frame, transaction="tx-rollback")
    consumer.abort("tx-rollback")

    again = wait_frames(consumer, 200)[100:]
    assert labels(again) == sent, "redelivery after ABORT is out of order"
    assert all(f.headers.get("redelivered") == "true" for f in again)
    consumer.begin("tx-commit")
    for frame in again:
        consumer.ack(frame, transaction="tx-commit")
    consumer.commit("tx-commit")
    consumer.listener.assert_no_more(200)
    broker.wait_queue(address, messages=0, messages_delivering=0)
    wait_no_page_files(broker, address)


def test_rolled_back_transacted_send_to_a_paging_address_delivers_nothing(
        broker, stomp_client, queue_name):
    address = f"zero.{queue_name}"
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{address}", ack="auto")
    producer = stomp_client(broker)
    producer.begin("tx-send")
    send_all(producer, f"/queue/{address}", numbered("aborted", 20), transaction="tx-send")
    producer.abort("tx-send")

    consumer.listener.assert_no_more(0, within=0.5)
    queue = broker.queue(address)
    assert (queue["messages"], queue["messages_added"], queue["messages_paged"]) == (0, 0, 0), queue
    info = broker.address(address)
    assert (info["messages_paged"], info["page_files"]) == (0, 0), info
    assert page_files(broker, address) == []

    # the same with COMMIT does page and deliver, so the test above can fail
    producer.begin("tx-kept")
    kept = send_all(producer, f"/queue/{address}", numbered("kept", 5), transaction="tx-kept")
    producer.commit("tx-kept")
    assert labels(wait_frames(consumer, 5)) == kept
    consumer.listener.assert_no_more(5)


# -- several queues on one address ------------------------------------------------------------


def test_page_files_stay_until_the_second_durable_subscription_is_drained(
        broker, stomp_client, queue_name):
    topic = f"small.{queue_name}"
    first_id, second_id = unique("first"), unique("second")
    for client_id in (first_id, second_id):
        durable(stomp_client, broker, client_id, topic, "sub").disconnect()
    sent = send_all(stomp_client(broker), f"/topic/{topic}", numbered("m", 60))
    assert_paging(broker, topic)

    first = durable(stomp_client, broker, first_id, topic, "sub")
    assert take(first, 60) == sent
    broker.wait_queue(f"{first_id}.sub", messages=0)
    time.sleep(0.5)  # time for any cleanup to run
    assert page_files(broker, topic), "page files deleted while the second subscription still needs them"
    assert broker.address(topic)["page_files"] > 0
    assert broker.queue(f"{second_id}.sub")["messages"] == 60

    second = durable(stomp_client, broker, second_id, topic, "sub")
    assert take(second, 60) == sent
    wait_no_page_files(broker, topic)


def test_a_queue_whose_filter_matches_nothing_holds_no_page_files(broker, stomp_client):
    topic = "small.nomatch"
    sent = send_all(stomp_client(broker), f"/topic/{topic}", numbered("red", 100),
                    headers={"color": "red"})
    assert_paging(broker, topic)
    assert broker.queue("nomatch.none")["messages"] == 0

    consumer = durable(stomp_client, broker, "nomatch", topic, "all")
    assert broker.queue("nomatch.all")["consumers"] == 1, "did not attach to the configured queue"
    assert take(consumer, 100) == sent
    wait_no_page_files(broker, topic)
    assert broker.queue("nomatch.none")["messages"] == 0


def test_page_holes_each_filtered_queue_gets_exactly_its_messages_in_order(broker, stomp_client):
    topic = "zero.holes"
    producer = stomp_client(broker)
    red = {"color": "red"}
    blue = {"color": "blue"}
    send_all(producer, f"/topic/{topic}", ["r0"], headers=red)
    send_all(producer, f"/topic/{topic}", numbered("b", 60), headers=blue)
    send_all(producer, f"/topic/{topic}", ["r1"], headers=red)
    send_all(producer, f"/topic/{topic}", numbered("b", 40, start=60), headers=blue)
    send_all(producer, f"/topic/{topic}", ["r2"], headers=red)
    assert_paging(broker, topic)
    assert len(page_files(broker, topic)) >= 3
    assert broker.queue("holes.q1")["messages"] == 3
    assert broker.queue("holes.q2")["messages"] == 100

    reds = durable(stomp_client, broker, "holes", topic, "q1", selector="color = 'red'")
    assert broker.queue("holes.q1")["consumers"] == 1, "did not attach to the configured queue"
    assert take(reds, 3) == ["r0", "r1", "r2"]
    assert page_files(broker, topic), "pages deleted while holes.q2 still needs them"
    blues = durable(stomp_client, broker, "holes", topic, "q2", selector="color = 'blue'")
    assert take(blues, 100) == numbered("b", 100)
    wait_no_page_files(broker, topic)


# -- deleting pages in the middle --------------------------------------------------------------


def _send_mapping_pages(broker, producer, address: str, count: int) -> dict[str, list[str]]:
    """Send one receipted message at a time; page file name -> labels written into it.

    A RECEIPT means the message is on disk, so it is in the newest page file at that moment.
    """
    pages: dict[str, list[str]] = {}
    for n in range(count):
        producer.send(f"/queue/{address}", body(f"m{n}"), headers={"persistent": "true"}, receipt=True)
        newest = page_files(broker, address)[-1].name
        pages.setdefault(newest, []).append(f"m{n}")
    return pages


def test_a_middle_page_is_deleted_when_its_messages_are_acked_out_of_order(
        broker, stomp_client, queue_name):
    address = f"zhold.{queue_name}"
    pages = _send_mapping_pages(broker, stomp_client(broker), address, 60)
    names = list(pages)
    assert len(names) >= 3, f"60 messages should span 3 pages or more: {pages}"
    assert [p.name for p in page_files(broker, address)] == names

    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{address}", ack="client-individual",
                       headers={"activemq.prefetchSize": 100_000})
    frames = wait_frames(consumer, 60)
    by_label = {f"m{n}": frame for n, frame in enumerate(frames)}
    assert labels(frames) == numbered("m", 60)

    middle = names[1]
    ack_frames(consumer, [by_label[name] for name in pages[middle]])
    deadline = time.monotonic() + 5
    while middle in [p.name for p in page_files(broker, address)] and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p.name for p in page_files(broker, address)]
    assert middle not in left, f"page {middle} still on disk after all its messages were acked: {left}"
    assert names[0] in left and names[2] in left, f"pages with unacked messages deleted: {left}"
    wait_address(broker, address, page_files=len(names) - 1)

    rest = [by_label[name] for page in names if page != middle for name in pages[page]]
    ack_frames(consumer, rest)
    broker.wait_queue(address, messages=0)
    wait_no_page_files(broker, address)

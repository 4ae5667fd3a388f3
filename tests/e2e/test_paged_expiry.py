"""Messages that expire while they are in page files, in queues nobody consumes, move to the
expiry address (core/paged_expiry.py: the expiry scan over page files, every
`message-expiry-scan-period`), as Artemis' expiry reaper expires paged messages.

(Before: only messages in memory expired; a paged one stayed on disk, counted in its queue,
until a consumer came and read it back.)
"""

from __future__ import annotations

import time

from brokerproc import now_ms, unique

SCAN = "200ms"
PAGE_ALL = {"broker": {"message-expiry-scan-period": SCAN},
            "address-settings": {"#": {"page-size-bytes": "16KiB", "max-size-bytes": 0}}}


def _expiry_queue(proc) -> int:
    status, body = proc.http_get("/api/queues/ExpiryQueue")
    return int(body["messages"]) if status == 200 else 0


def test_paged_messages_expire_to_the_expiry_queue_without_a_consumer(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL)
    name = unique("pexp")
    producer = stomp_client(proc)
    at = now_ms()
    for n in range(40):  # several pages: 40 x 1 KiB in 16 KiB pages
        headers = {"persistent": "true", "n": str(n)}
        if n % 2 == 0:
            headers["expires"] = str(at + 400)
        producer.send(f"/queue/{name}", "x" * 1000, headers=headers, receipt=True)
    assert proc.queue(name)["messages_paged"] == 40
    proc.wait_queue(name, timeout=10, messages=20, messages_expired=20, messages_paged=20)
    assert _expiry_queue(proc) == 20
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{name}")
    frames = consumer.wait_for(20)
    assert [int(f.headers["n"]) for f in frames] == list(range(1, 40, 2))  # the rest, in order
    expired = stomp_client(proc)
    expired.subscribe("/queue/ExpiryQueue")
    copies = expired.wait_for(20)
    assert sorted(int(f.headers["n"]) for f in copies) == list(range(0, 40, 2))
    assert all(f.headers["expires"] == "0" and f.headers["original-destination"] == f"/queue/{name}"
               for f in copies)


def test_each_subscription_of_a_multicast_address_expires_its_own_paged_copy(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL)
    topic = unique("ptopic")
    subscribers = []
    for sub in ("a", "b"):
        client = stomp_client(proc, client_id=unique(f"sub-{sub}"))
        client.subscribe(f"/topic/{topic}", headers={"durable-subscription-name": sub}, ack="client")
        subscribers.append(client)
    for client in subscribers:
        client.disconnect()  # durable subscriptions, nobody consuming
    producer = stomp_client(proc)
    for _n in range(10):
        producer.send(f"/topic/{topic}", "y" * 1000,
                      headers={"persistent": "true", "expires": str(now_ms() + 300)}, receipt=True)
    address = proc.wait_api(f"/api/addresses/{topic}", topic, 10, {"messages": 0})
    assert address["paging"] is False or address["messages_paged"] == 0
    assert _expiry_queue(proc) == 20  # one copy per subscription, as expiry in memory moves


def test_paged_messages_of_an_earlier_run_expire_after_a_restart(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL)
    name = unique("pexp-restart")
    producer = stomp_client(proc)
    for n in range(30):
        producer.send(f"/queue/{name}", "z" * 1000,
                      headers={"persistent": "true", "expires": str(now_ms() + 3000), "n": str(n)},
                      receipt=True)
    producer.send(f"/queue/{name}", "keeps", headers={"persistent": "true"}, receipt=True)
    proc.restart(kill=True)
    assert proc.queue(name)["messages"] == 31
    proc.wait_queue(name, timeout=15, messages=1, messages_paged=1)
    assert _expiry_queue(proc) == 30
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{name}")
    (kept,) = consumer.wait_for(1)
    assert kept.body == "keeps"


def test_a_paged_message_that_expires_later_stays_until_then(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL)
    name = unique("pexp-later")
    producer = stomp_client(proc)
    producer.send(f"/queue/{name}", "soon", headers={"persistent": "true", "expires": str(now_ms() + 300)},
                  receipt=True)
    later = now_ms() + 2500
    producer.send(f"/queue/{name}", "later", headers={"persistent": "true", "expires": str(later)},
                  receipt=True)
    proc.wait_queue(name, timeout=10, messages=1, messages_expired=1)
    time.sleep(0.6)  # several scans: the later one is still there
    assert proc.queue(name)["messages"] == 1
    proc.wait_queue(name, timeout=10, messages=0, messages_expired=2)
    assert now_ms() >= later


def test_an_address_whose_paged_messages_all_expired_leaves_page_mode(start_broker, stomp_client):
    """(Before: it held nothing and had no page file, yet stayed in page mode: the next sends
    went straight to page files, and page-limit-messages refused them early.) Helper 42."""
    proc = start_broker({"broker": {"message-expiry-scan-period": SCAN},
                         "address-settings": {"#": {"max-size-messages": 2, "page-limit-messages": 5,
                                                    "page-full-policy": "FAIL"}}})
    name = unique("pexp-leave")
    producer = stomp_client(proc)
    headers = {"persistent": "true", "expires": str(now_ms() + 500)}
    for n in range(7):  # two held in memory, five paged
        producer.send(f"/queue/{name}", f"e{n}", headers=headers, receipt=True)
    assert proc.address(name)["messages_paged"] == 5
    proc.wait_api(f"/api/addresses/{name}", name, 10, {"messages": 0, "page_files": 0, "paging": False})
    for n in range(7):  # two in memory again, then five paged, each with its RECEIPT
        producer.send(f"/queue/{name}", f"m{n}", headers={"persistent": "true"}, receipt=True)
    address = proc.address(name)
    assert (address["messages_in_memory"], address["messages_paged"]) == (2, 5), address

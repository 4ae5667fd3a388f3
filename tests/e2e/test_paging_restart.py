"""Paged messages across restarts and crashes: durable subscriptions, individual acks, SIGKILL
while paging, non-persistent paged messages, and `pagemq data print` on the page folders.

Ported from Artemis' testPageMultipleDestinations, IndividualAckPagingTest,
testTwoQueuesConsumeOneRestart and PageCounterRebuildTest, over STOMP. Each test has its own
broker (restarts), paging everything (max-size-bytes 0) into 16 KiB pages unless told.
"""

from __future__ import annotations

import re
import threading
import time

from brokerproc import WAIT, RawStomp, StompClient, encode_frame, run_cli, unique
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
    wait_frames,
    wait_no_page_files,
)

PAGE_ALL = {"address-settings": {"#": {"page-size-bytes": "16KiB", "max-size-bytes": 0}}}
SMALL_LIMIT = {"address-settings": {"#": {"page-size-bytes": "16KiB", "max-size-bytes": "16KiB"}}}
# for consumers holding every message unacknowledged at once (by default only
# max-read-page-bytes, two pages, of unacknowledged paged messages are read in)
HOLD = {"max-read-page-bytes": "1MiB", "prefetch-page-bytes": "1MiB"}
PAGE_ALL_HOLD = {"address-settings": {"#": {**PAGE_ALL["address-settings"]["#"], **HOLD}}}
SMALL_LIMIT_HOLD = {"address-settings": {"#": {**SMALL_LIMIT["address-settings"]["#"],
                                              "max-read-page-bytes": "16MiB",
                                              "prefetch-page-bytes": "16MiB"}}}


def test_ten_durable_subscriptions_get_every_paged_message_after_a_restart(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL)
    topic = unique("topic")
    client_ids = [unique(f"c{n}") for n in range(10)]
    for client_id in client_ids:
        durable(stomp_client, proc, client_id, topic, "sub").disconnect()
    producer = stomp_client(proc)
    sent = send_all(producer, f"/topic/{topic}", numbered("m", 30))
    producer.disconnect()
    assert_paging(proc, topic)
    for client_id in client_ids:
        assert proc.queue(f"{client_id}.sub")["messages_paged"] == 30

    proc.restart()
    assert_paging(proc, topic)
    for client_id in client_ids:
        assert proc.queue(f"{client_id}.sub")["messages"] == 30, f"{client_id}.sub after restart"
    for client_id in client_ids:
        subscriber = durable(stomp_client, proc, client_id, topic, "sub")
        assert take(subscriber, 30) == sent, f"subscription {client_id}.sub"
        subscriber.disconnect()
    wait_no_page_files(proc, topic)


def test_individually_acked_paged_message_stays_acked_after_a_restart(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL_HOLD)
    queue = unique("individual")
    sent = send_all(stomp_client(proc), f"/queue/{queue}", numbered("m", 100))
    assert_paging(proc, queue, paged=100)

    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual",
                       headers={"activemq.prefetchSize": 1000})
    frames = wait_frames(consumer, 100)
    assert labels(frames) == sent
    consumer.ack(frames[77], receipt=True)
    proc.wait_queue(queue, messages=99, messages_acknowledged=1)
    consumer.drop()

    proc.restart()
    assert proc.queue(queue)["messages"] == 99, "count right after restart"
    rest = [name for name in sent if name != "m77"]
    assert consume(stomp_client(proc), f"/queue/{queue}", 99) == rest
    wait_no_page_files(proc, queue)


def test_second_durable_subscription_keeps_its_paged_messages_over_a_restart(start_broker, stomp_client):
    proc = start_broker(SMALL_LIMIT)
    topic = unique("two")
    first_id, second_id = unique("first"), unique("second")
    for client_id in (first_id, second_id):
        durable(stomp_client, proc, client_id, topic, "sub").disconnect()
    sent = send_all(stomp_client(proc), f"/topic/{topic}", numbered("m", 60))
    assert_paging(proc, topic)
    first = durable(stomp_client, proc, first_id, topic, "sub")
    assert take(first, 60) == sent
    first.disconnect()

    proc.restart()
    assert proc.queue(f"{first_id}.sub")["messages"] == 0
    assert proc.queue(f"{second_id}.sub")["messages"] == 60
    assert page_files(proc, topic), "page files gone while the second subscription needs them"
    second = durable(stomp_client, proc, second_id, topic, "sub")
    assert take(second, 60) == sent
    wait_no_page_files(proc, topic)


def test_non_persistent_paged_messages_are_not_delivered_after_a_restart(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL)
    queue = unique("nonpersistent")
    producer = stomp_client(proc)
    for n in range(20):
        send_all(producer, f"/queue/{queue}", [f"p{n}"], persistent=True)
        send_all(producer, f"/queue/{queue}", [f"t{n}"], persistent=False)
    assert_paging(proc, queue, paged=40)
    producer.disconnect()

    proc.restart()
    assert proc.queue(queue)["messages"] == 20, "non-persistent messages counted after restart"
    assert consume(stomp_client(proc), f"/queue/{queue}", 20) == numbered("p", 20)
    wait_no_page_files(proc, queue)


# -- SIGKILL while paging ---------------------------------------------------------------------


class PipelinedProducer(threading.Thread):
    """Persistent sends with pipelined receipts until stopped or the broker dies."""

    IN_FLIGHT = 100
    LIMIT = 5000  # the consumer after the restart holds them all unacknowledged

    def __init__(self, port: int, destination: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.client = StompClient(port).connect()
        self.destination, self.prefix = destination, prefix
        self.sent: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        listener = self.client.listener
        try:
            while not self.stopping.is_set() and self.client.is_connected and len(self.sent) < self.LIMIT:
                name = f"{self.prefix}{len(self.sent)}"
                self.sent.append(name)
                self.client.conn.send(self.destination, body(name),
                                      headers={"persistent": "true", "receipt": name})
                count = len(self.sent)
                listener.wait_quietly(
                    lambda count=count: count - len(listener.receipts) < self.IN_FLIGHT
                    or listener.disconnected, 1.0)
        except Exception:  # the broker was killed under us: expected
            pass

    def finish(self) -> set[str]:
        self.stopping.set()
        self.join(WAIT)
        assert not self.is_alive(), "producer thread did not stop"
        self.client.drop()
        return set(self.client.listener.receipts)


def _order(name: str) -> tuple[int, int]:
    match = re.fullmatch(r"([a-z]+)(\d+)", name)
    assert match, name
    return (0 if match.group(1) == "pre" else 1, int(match.group(2)))


def test_sigkill_while_paging_loses_no_receipted_message_and_redelivers_no_acked_one(
        start_broker, stomp_client):
    proc = start_broker(SMALL_LIMIT_HOLD)
    queue = unique("killed")
    destination = f"/queue/{queue}"
    prefill = send_all(stomp_client(proc), destination, numbered("pre", 40))
    assert_paging(proc, queue)

    producer = PipelinedProducer(proc.stomp_port, destination, "live")
    producer.start()
    time.sleep(0.8)
    proc.kill()
    receipted = producer.finish() | set(prefill)
    sent = set(producer.sent) | set(prefill)
    assert len(receipted) > 60, f"only {len(receipted)} receipts before the kill"

    proc.start()
    count = proc.queue(queue)["messages"]
    assert len(receipted) <= count <= len(sent), f"{count} messages after restart, {len(receipted)} receipted"
    consumer = stomp_client(proc)
    consumer.subscribe(destination, ack="client-individual", headers={"activemq.prefetchSize": 100_000})
    frames = wait_frames(consumer, count)
    consumer.listener.assert_no_more(count, within=0.3)
    got = labels(frames)
    assert len(set(got)) == len(got), "a message delivered twice"
    assert receipted <= set(got), f"receipted messages lost: {sorted(receipted - set(got))[:10]}"
    assert set(got) <= sent, "a message that was never sent"
    assert got == sorted(got, key=_order), "delivered out of order after the crash"

    acked = frames[: len(frames) // 2]
    ack_frames(consumer, acked)
    proc.kill()
    proc.start()
    acked_names = set(labels(acked))
    left = [name for name in got if name not in acked_names]
    count = proc.queue(queue)["messages"]
    again = stomp_client(proc)
    again.subscribe(destination, ack="auto", headers={"activemq.prefetchSize": 100_000})
    again.listener.wait_quietly(lambda: len(again.messages) >= max(count, len(left)), 10)
    time.sleep(0.3)
    got_again = labels(again.messages)
    back = [name for name in got_again if name in acked_names]
    assert not back, (f"{len(back)} messages acknowledged (ACK receipted) before the SIGKILL were "
                      f"delivered again: {back[:5]} ... {back[-5:]}")
    assert got_again == left, f"{len(got_again)} delivered after the second restart, {len(left)} expected"
    assert count == len(left), f"count right after the second restart: {count}, expected {len(left)}"
    wait_no_page_files(proc, queue)


def test_paged_messages_acked_just_before_a_sigkill_are_not_delivered_again(start_broker, stomp_client):
    """The ACK receipt means the ack is durable: the pages it completed must not come back."""
    proc = start_broker(SMALL_LIMIT_HOLD)
    queue = unique("ackkill")
    sent = send_all(stomp_client(proc), f"/queue/{queue}", numbered("m", 200))
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual",
                       headers={"activemq.prefetchSize": 100_000})
    frames = wait_frames(consumer, 200)
    ack_frames(consumer, frames[:100])  # the last ACK waits for its receipt
    proc.kill()
    proc.start()
    again = stomp_client(proc)
    again.subscribe(f"/queue/{queue}", ack="auto", headers={"activemq.prefetchSize": 100_000})
    again.listener.wait_quietly(lambda: len(again.messages) >= 100, 5)
    time.sleep(0.3)
    got = labels(again.messages)
    back = [name for name in got if name in set(sent[:100])]
    assert not back, f"{len(back)} acknowledged messages delivered again after SIGKILL: {back[:20]}"
    assert got == sent[100:]


def test_sends_written_in_one_burst_survive_a_sigkill_once_receipted(start_broker, stomp_client):
    """A producer's frames arriving in one read are appended to the page file together (one
    batch per address): once each RECEIPT is out, a SIGKILL loses none of them, on a topic
    with two durable subscribers and a queue written in the same burst, in order."""
    proc = start_broker(PAGE_ALL_HOLD)
    topic, queue = unique("burst"), unique("burstq")
    for name in ("s1", "s2"):
        durable(stomp_client, proc, f"c-{name}", topic, name).disconnect()
    burst = []
    for n in range(300):
        destination = f"/queue/{queue}" if n % 3 == 2 else f"/topic/{topic}"
        burst.append(encode_frame("SEND", {"destination": destination, "persistent": "true",
                                           "receipt": f"r{n}"}, body(f"m{n}")))
    with RawStomp(proc.stomp_port) as raw:
        raw.connect()
        raw.send(b"".join(burst))
        frames = raw.read_until_receipt("r299")
    receipts = [f.headers["receipt-id"] for f in frames if f.command == "RECEIPT"]
    assert receipts == [f"r{n}" for n in range(300)]
    proc.kill()
    proc.start()
    on_topic = [f"m{n}" for n in range(300) if n % 3 != 2]
    for name in ("s1", "s2"):
        client = durable(stomp_client, proc, f"c-{name}", topic, name)
        assert labels(wait_frames(client, len(on_topic))) == on_topic
        client.listener.assert_no_more(len(on_topic), within=0.3)
    assert consume(stomp_client(proc), f"/queue/{queue}", 100) == [f"m{n}" for n in range(2, 300, 3)]


# -- pagemq data print -----------------------------------------------------------------------


def test_data_print_shows_page_folders_files_and_record_counts(start_broker, stomp_client):
    proc = start_broker(PAGE_ALL)
    address, other = unique("printed"), unique("other")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{address}", numbered("m", 40))
    send_all(producer, f"/queue/{other}", numbered("o", 3))
    producer.disconnect()
    files = [p.name for p in page_files(proc, address)]
    folder = page_folder(proc, address)
    assert len(files) >= 2, files
    proc.stop()

    result = run_cli("data", "print", "--data-dir", str(proc.data_dir))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert address in out and folder.name in out, out
    assert other in out, out

    narrowed = run_cli("data", "print", "--data-dir", str(proc.data_dir), "--address", address)
    assert narrowed.returncode == 0, narrowed.stderr
    out = narrowed.stdout
    assert address in out and other not in out, out
    counts = []
    for name in files:
        line = next((ln for ln in out.splitlines() if name in ln), None)
        assert line is not None, f"page file {name} not listed:\n{out}"
        match = re.search(r"(\d+) (?:records|messages)", line)
        assert match, f"no record count on the line for {name}: {line!r}"
        counts.append(int(match.group(1)))
    assert sum(counts) == 40, f"record counts {counts} do not add up to the 40 messages:\n{out}"


def test_counts_after_restart_match_a_partly_consumed_paged_queue(start_broker, stomp_client):
    """PageCounterRebuildTest: after a restart the counters are rebuilt from what is on disk."""
    proc = start_broker(PAGE_ALL_HOLD)
    queue = unique("counted")
    sent = send_all(stomp_client(proc), f"/queue/{queue}", numbered("m", 90))
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual",
                       headers={"activemq.prefetchSize": 1000})
    frames = wait_frames(consumer, 90)
    ack_frames(consumer, frames[:25] + frames[50:60])
    consumer.drop()
    proc.restart()
    queue_info = proc.queue(queue)
    assert queue_info["messages"] == 55, queue_info
    address_info = proc.address(queue)
    assert address_info["messages"] == 55, address_info
    expected = sent[25:50] + sent[60:]
    assert consume(stomp_client(proc), f"/queue/{queue}", 55) == expected
    wait_no_page_files(proc, queue)


def test_a_queue_that_acknowledged_a_live_page_before_a_restart_leaves_no_records_behind(
        start_broker, stomp_client):
    """Queue A acknowledges all of the live page (so no page-complete record), the broker
    restarts, then queue B finishes it. (Before: A's ack records were not deleted with the
    page, and `data check` after a clean stop blamed "a crash" for them.)"""
    proc = start_broker({
        "address-settings": {"#": {"max-size-messages": 5, "page-size-bytes": "2KiB"}},
        "addresses": [{"name": "t", "routing-type": "multicast",
                       "queues": [{"name": "A"}, {"name": "B"}]}],
    })
    send_all(stomp_client(proc), "/topic/t", numbered("m", 60), size=100)
    assert proc.address("t")["page_files"] >= 2
    assert len(consume(stomp_client(proc), "/queue/A", 60)) == 60
    proc.wait_queue("A", messages=0)
    proc.restart()
    assert len(consume(stomp_client(proc), "/queue/B", 60)) == 60
    wait_no_page_files(proc, "t")
    proc.stop()
    check = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "note:" not in check.stdout and "0 note(s)" in check.stdout, check.stdout

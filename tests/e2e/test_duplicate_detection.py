"""Duplicate detection (`_AMQ_DUPL_ID`, Artemis' `id-cache-size`): a send whose id its address
has seen lately is dropped and still receipted, across restarts, transactions and paging."""

from __future__ import annotations

import time

from admin_http import call
from brokerproc import bodies, to_toml, unique

DUP = "_AMQ_DUPL_ID"
PERSISTENT = {"persistent": "true"}


def _send(client, queue, body, dup_id, **headers):
    client.send(f"/queue/{queue}", body, headers={**PERSISTENT, DUP: dup_id, **headers}, receipt=True)


def _drain(proc, stomp_client, queue, expected, ack="client-individual"):
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack=ack)
    frames = consumer.wait_for(expected) if expected else []
    consumer.listener.assert_no_more(expected)
    if ack != "auto":
        for frame in frames:
            consumer.ack(frame, receipt=True)
    return frames


def test_a_resent_duplicate_id_is_receipted_but_stored_once(start_broker, stomp_client):
    proc, queue = start_broker(), unique("dup")
    producer = stomp_client(proc)
    for n in range(5):
        _send(producer, queue, f"m{n}", f"id-{n}")
    for n in range(5):  # the producer retries every send: each gets its RECEIPT
        _send(producer, queue, f"retry{n}", f"id-{n}")
    assert proc.queue(queue)["messages"] == 5
    frames = _drain(proc, stomp_client, queue, 5)
    assert bodies(frames) == [f"m{n}" for n in range(5)]
    assert frames[0].headers[DUP] == "id-0"  # the id stays a property of the message


def test_duplicate_ids_survive_sigkill(start_broker, stomp_client):
    proc, queue = start_broker(), unique("dup")
    producer = stomp_client(proc)
    for n in range(10):
        _send(producer, queue, f"m{n}", f"id-{n}")
    proc.restart(kill=True)
    producer = stomp_client(proc)
    for n in range(10):
        _send(producer, queue, f"again{n}", f"id-{n}")
    _send(producer, queue, "new", "id-new")
    frames = _drain(proc, stomp_client, queue, 11)
    assert bodies(frames) == [*(f"m{n}" for n in range(10)), "new"]


def test_ids_are_remembered_after_their_messages_are_consumed_and_a_restart(start_broker, stomp_client):
    proc, queue = start_broker(), unique("dup")
    producer = stomp_client(proc)
    for n in range(3):
        _send(producer, queue, f"m{n}", f"id-{n}")
    frames = _drain(proc, stomp_client, queue, 3)
    assert bodies(frames) == ["m0", "m1", "m2"]
    proc.restart()
    producer = stomp_client(proc)
    for n in range(3):
        _send(producer, queue, f"late{n}", f"id-{n}")
    assert proc.queue(queue)["messages"] == 0


def test_duplicate_ids_are_per_address(start_broker, stomp_client):
    proc = start_broker()
    first, second = unique("dupa"), unique("dupb")
    producer = stomp_client(proc)
    _send(producer, first, "a", "same-id")
    _send(producer, second, "b", "same-id")
    assert proc.queue(first)["messages"] == 1
    assert proc.queue(second)["messages"] == 1


def test_id_cache_size_bounds_what_is_remembered(start_broker, stomp_client):
    queue = unique("dupsmall")
    proc = start_broker({"address-settings": {queue: {"id-cache-size": 3}}})
    producer = stomp_client(proc)
    for n in range(5):
        _send(producer, queue, f"m{n}", f"id-{n}")
    _send(producer, queue, "old-again", "id-0")  # fell out of the cache of 3: stored
    _send(producer, queue, "recent-again", "id-4")  # still remembered: dropped
    assert proc.queue(queue)["messages"] == 6
    proc.restart(kill=True)
    producer = stomp_client(proc)
    _send(producer, queue, "after-restart", "id-1")  # evicted before the restart: stored
    _send(producer, queue, "after-restart-dup", "id-0")  # remembered again since its resend
    assert proc.queue(queue)["messages"] == 7


def test_id_cache_size_zero_turns_detection_off(start_broker, stomp_client):
    queue = unique("dupoff")
    proc = start_broker({"address-settings": {queue: {"id-cache-size": 0}}})
    producer = stomp_client(proc)
    _send(producer, queue, "a", "x")
    _send(producer, queue, "b", "x")
    assert proc.queue(queue)["messages"] == 2


def test_duplicates_are_dropped_on_a_paging_address_across_restart(start_broker, stomp_client):
    queue = unique("duppaged")
    proc = start_broker({"address-settings": {queue: {"max-size-bytes": 0, "page-size-bytes": "8KiB"}}})
    producer = stomp_client(proc)
    for n in range(30):
        _send(producer, queue, f"m{n}" + "x" * 500, f"id-{n}")
    assert proc.address(queue)["paging"]
    proc.restart(kill=True)
    producer = stomp_client(proc)
    for n in range(30):
        _send(producer, queue, f"dup{n}", f"id-{n}")
    frames = _drain(proc, stomp_client, queue, 30, ack="auto")  # paged: read limits want acks
    assert [b.rstrip("x") for b in bodies(frames)] == [f"m{n}" for n in range(30)]


def test_a_committed_transaction_drops_duplicates_inside_and_across(start_broker, stomp_client):
    proc, queue = start_broker(), unique("duptx")
    producer = stomp_client(proc)
    _send(producer, queue, "before", "id-a")
    producer.begin("tx1")
    for body, dup_id in [("t1", "id-a"), ("t2", "id-b"), ("t3", "id-b"), ("t4", "id-c")]:
        producer.send(f"/queue/{queue}", body, headers={**PERSISTENT, DUP: dup_id, "transaction": "tx1"})
    producer.commit("tx1")
    proc.restart(kill=True)
    producer = stomp_client(proc)
    _send(producer, queue, "after", "id-c")
    frames = _drain(proc, stomp_client, queue, 3)
    assert bodies(frames) == ["before", "t2", "t4"]


def test_an_aborted_transaction_remembers_nothing(start_broker, stomp_client):
    proc, queue = start_broker(), unique("dupabort")
    producer = stomp_client(proc)
    producer.begin("tx1")
    producer.send(f"/queue/{queue}", "t1", headers={**PERSISTENT, DUP: "id-a", "transaction": "tx1"})
    producer.abort("tx1")
    _send(producer, queue, "again", "id-a")
    frames = _drain(proc, stomp_client, queue, 1)
    assert bodies(frames) == ["again"]


def test_a_topic_duplicate_reaches_no_subscriber_twice(start_broker, stomp_client):
    destination = "topic"
    proc, topic = start_broker(), unique("duptopic")
    subscribers = []
    for n in range(2):
        client = stomp_client(proc, client_id=f"c{n}")
        client.subscribe(f"/{destination}/{topic}", ack="client-individual",
                         headers={"durable-subscription-name": "s"})
        subscribers.append(client)
    producer = stomp_client(proc)
    for body in ("one", "one-again"):
        producer.send(f"/{destination}/{topic}", body, headers={**PERSISTENT, DUP: "k"}, receipt=True)
    for client in subscribers:
        assert bodies(client.wait_for(1)) == ["one"]
        client.listener.assert_no_more(1)


def test_a_commit_held_by_block_keeps_its_duplicate_ids_and_commits_once_there_is_room(
        start_broker, stomp_client):
    """A COMMIT refused for now (BLOCK: the address fills up part-way through its sends)
    forgets the ids it had begun to remember without touching the journal (their records
    were never written), and goes through once a consumer makes room: every message once,
    and the ids remembered."""
    queue = unique("dupblock")
    proc = start_broker({"address-settings": {
        queue: {"max-size-bytes": "8KiB", "address-full-policy": "BLOCK"}}})
    producer = stomp_client(proc)
    for n in range(3):
        _send(producer, queue, f"p{n}|" + "x" * 1000, f"id-p{n}")
    producer.begin("tx1")
    for n in range(4):
        producer.send(f"/queue/{queue}", f"t{n}|" + "x" * 1000,
                      headers={**PERSISTENT, DUP: f"id-t{n}", "transaction": "tx1"})
    producer.commit("tx1", receipt=False)
    producer.send(f"/queue/{queue}", "after", headers={**PERSISTENT, DUP: "id-after"})
    time.sleep(0.5)  # the COMMIT meets the full address and waits
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="auto")
    frames = consumer.wait_for(8)
    consumer.listener.assert_no_more(8)
    assert [frame.body.split("|")[0] for frame in frames] == [
        *(f"p{n}" for n in range(3)), *(f"t{n}" for n in range(4)), "after"]
    _send(producer, queue, "dup", "id-t2")  # remembered by the COMMIT that went through
    assert proc.queue(queue)["messages"] == 0


def _tx_send(client, queue, body, dup_id, tx):
    client.send(f"/queue/{queue}", body, headers={**PERSISTENT, DUP: dup_id, "transaction": tx})


def test_a_commit_with_more_ids_than_the_cache_holds_stores_all_and_keeps_the_last(
        start_broker, stomp_client):
    """(Before: the COMMIT evicted ids of its own sends whose records it had not written yet,
    and failed with an internal error.)"""
    for paged in (False, True):
        queue = unique("dupmany")
        settings = {"id-cache-size": 3, **({"max-size-bytes": 0} if paged else {})}
        proc = start_broker({"address-settings": {queue: settings}})
        producer = stomp_client(proc)
        producer.begin("tx1")
        for n in range(5):
            _tx_send(producer, queue, f"t{n}", f"id-{n}", "tx1")
        producer.commit("tx1")
        for n in range(2, 5):  # the last three are remembered
            _send(producer, queue, f"again{n}", f"id-{n}")
        assert proc.queue(queue)["messages"] == 5
        proc.restart(kill=True)
        producer = stomp_client(proc)
        _send(producer, queue, "again4", "id-4")
        _send(producer, queue, "again0", "id-0")  # fell out with the COMMIT itself: stored
        assert proc.queue(queue)["messages"] == 6
        assert not proc.tracebacks()


def test_plain_sends_may_evict_the_ids_of_a_paged_commit_still_being_written(start_broker, stomp_client):
    """A paged COMMIT journals its id records only once its page files are written; a send
    evicting one of them meanwhile deletes it after that write, not before (which was an
    internal error, and left the cache pointing at a record that was never written)."""
    queue = unique("duprace")
    proc = start_broker({"address-settings": {queue: {"id-cache-size": 3, "max-size-bytes": 0}}})
    committer, sender = stomp_client(proc), stomp_client(proc)
    for round_ in range(20):
        committer.begin(f"tx{round_}")
        for n in range(3):
            _tx_send(committer, queue, "t", f"t{round_}-{n}", f"tx{round_}")
        committer.commit(f"tx{round_}", receipt=False)
        _send(sender, queue, "p", f"p{round_}")
    _send(committer, queue, "last", "last")  # behind every COMMIT of its connection
    assert proc.queue(queue)["messages"] == 20 * 4 + 1
    assert not committer.listener.errors and not sender.listener.errors


def test_a_commit_refused_on_the_way_leaves_the_remembered_ids_as_they_were(start_broker, stomp_client):
    queue = unique("dupfail")
    proc = start_broker({"address-settings": {queue: {
        "id-cache-size": 3, "max-size-bytes": "20KiB", "address-full-policy": "FAIL"}}})
    producer = stomp_client(proc)
    for n in range(3):
        _send(producer, queue, f"p{n}", f"p{n}")
    producer.begin("tx1")
    _tx_send(producer, queue, "small", "t0", "tx1")
    _tx_send(producer, queue, "x" * 30_000, "t1", "tx1")  # more than the address takes: FAIL
    producer.commit("tx1", receipt=False)
    producer.listener.wait_for_error()
    producer = stomp_client(proc)
    for n in range(3):  # still the last three ids: dropped
        _send(producer, queue, f"again{n}", f"p{n}")
    _send(producer, queue, "t0-again", "t0")  # its COMMIT stored nothing: stored now
    assert proc.queue(queue)["messages"] == 4


def test_an_id_repeated_in_a_transaction_is_left_out_however_many_ids_come_between(
        start_broker, stomp_client):
    queue = unique("duprepeat")
    proc = start_broker({"address-settings": {queue: {"id-cache-size": 3}}})
    producer = stomp_client(proc)
    producer.begin("tx1")
    for dup_id in "abcda":
        _tx_send(producer, queue, dup_id, dup_id, "tx1")
    producer.commit("tx1")
    frames = _drain(proc, stomp_client, queue, 4)
    assert bodies(frames) == ["a", "b", "c", "d"]


def test_a_commit_of_a_duplicate_is_receipted_only_once_the_original_is_durable(
        start_broker, stomp_client):
    """A COMMIT whose sends are all duplicates of a send still being written answers once
    that write is durable, as a plain duplicate SEND does: killed right after its RECEIPT,
    the broker still has the original."""
    queue = unique("dupwait")
    proc = start_broker()
    writer, retrier = stomp_client(proc), stomp_client(proc)
    for _ in range(6):  # a long journal write ahead of the original
        writer.send(f"/queue/{queue}", "x" * (12 << 20), headers=PERSISTENT)
    writer.send(f"/queue/{queue}", "original", headers={**PERSISTENT, DUP: "X"})
    deadline = time.monotonic() + 30
    while proc.queue(queue)["messages"] < 7 and time.monotonic() < deadline:
        time.sleep(0.005)  # the original is routed (its write may still be under way)
    retrier.begin("tx1")
    _tx_send(retrier, queue, "retry", "X", "tx1")
    retrier.commit("tx1")
    proc.restart(kill=True)
    frames = _drain(proc, stomp_client, queue, 7, ack="auto")
    assert bodies(frames)[-1] == "original"


def test_a_paged_send_retried_after_sigkill_is_stored_exactly_once(start_broker, stomp_client):
    """A paged send's id record is in the journal transaction that commits its page write:
    a crash keeps both or neither, so a retry is dropped only when the message is stored.
    (tests/faults/test_paged_duplicate_id_crash.py tears the journal write in between.)"""
    queue = unique("dupkill")
    proc = start_broker({"address-settings": {queue: {"max-size-bytes": 0}}})
    producer = stomp_client(proc)
    for n in range(400):
        producer.send(f"/queue/{queue}", f"m{n}", headers={**PERSISTENT, DUP: f"id-{n}"})
    proc.restart(kill=True)
    producer = stomp_client(proc)
    for n in range(400):
        _send(producer, queue, f"m{n}", f"id-{n}")
    frames = _drain_any(proc, stomp_client, queue)
    assert sorted(bodies(frames)) == sorted(f"m{n}" for n in range(400))


def _drain_any(proc, stomp_client, queue):
    count = proc.queue(queue)["messages"]
    return _drain(proc, stomp_client, queue, count, ack="auto")


def test_lowering_id_cache_size_between_restarts_forgets_the_oldest_ids(start_broker, stomp_client):
    """(Before: the start-up deleted the records of the ids past the new size before the
    journal ran, and the broker refused to start.)"""
    queue = unique("duplower")
    proc = start_broker({"address-settings": {queue: {"id-cache-size": 10}}})
    producer = stomp_client(proc)
    for n in range(6):
        _send(producer, queue, f"m{n}", f"id-{n}")
    for size, kill in ((3, False), (0, True), (10, False)):
        proc.stop()
        proc.config_path.write_text(to_toml({"address-settings": {queue: {"id-cache-size": size}}}))
        proc.start()
        assert not proc.tracebacks()
        if size == 3:
            producer = stomp_client(proc)
            _send(producer, queue, "again5", "id-5")  # among the last three: dropped
            _send(producer, queue, "again2", "id-2")  # forgotten at start-up: stored
            assert proc.queue(queue)["messages"] == 7
        if kill:
            proc.restart(kill=True)
    producer = stomp_client(proc)  # detection was off for a run: every id was forgotten
    _send(producer, queue, "again5", "id-5")
    assert proc.queue(queue)["messages"] == 8


def test_a_restart_does_not_bring_back_ids_that_were_pushed_out(start_broker, stomp_client):
    """The ids of a COMMIT share one journal record; the ones pushed out before a restart
    (by non-persistent sends, or before a larger id-cache-size) stay forgotten after it.
    (Before: the record brought all of its ids back, and a send of a forgotten id was
    dropped, its message lost.)"""
    queue = unique("dupgone")
    proc = start_broker({"address-settings": {queue: {"id-cache-size": 5}}})
    producer = stomp_client(proc)
    producer.begin("tx1")
    for n in range(5):
        producer.send(f"/queue/{queue}", f"a{n}", headers={**PERSISTENT, DUP: f"a{n}", "transaction": "tx1"})
    producer.commit("tx1", receipt=True)
    for n in range(2):  # non-persistent: push a0 and a1 out, and are not remembered by a restart
        producer.send(f"/queue/{queue}", f"b{n}", headers={DUP: f"b{n}"}, receipt=True)
    proc.stop()
    proc.config_path.write_text(to_toml({"address-settings": {queue: {"id-cache-size": 10}}}))
    proc.start()
    producer = stomp_client(proc)
    _send(producer, queue, "a0 again", "a0")  # forgotten before the restart: stored
    _send(producer, queue, "a2 again", "a2")  # still remembered: dropped
    frames = _drain(proc, stomp_client, queue, 6)  # (the non-persistent ones did not survive)
    assert bodies(frames) == [*(f"a{n}" for n in range(5)), "a0 again"]


def test_a_crash_before_newer_ids_are_durable_forgets_none_of_the_older_ones(start_broker, stomp_client):
    """A COMMIT that pushes out a receipted COMMIT's ids, killed before its page write is
    durable (page-sync-timeout keeps it waiting): the retry of the receipted COMMIT is still
    dropped after the restart. (Before: the older ids' records were deleted at once, and the
    retry was stored a second time.)"""
    queue = unique("dupcrash")
    proc = start_broker({"broker": {"page-sync-timeout": "3s"},
                         "address-settings": {queue: {"id-cache-size": 5, "max-size-bytes": 0}}})
    producer = stomp_client(proc)
    producer.begin("tx1")
    for n in range(5):
        producer.send(f"/queue/{queue}", f"a{n}", headers={**PERSISTENT, DUP: f"a{n}", "transaction": "tx1"})
    producer.commit("tx1", receipt=True)
    producer.begin("tx2")
    for n in range(5):
        producer.send(f"/queue/{queue}", f"b{n}", headers={**PERSISTENT, DUP: f"b{n}", "transaction": "tx2"})
    producer.commit("tx2", receipt=False)  # no receipt awaited: its page fsync waits for page-sync-timeout
    time.sleep(0.5)
    proc.restart(kill=True)
    producer = stomp_client(proc)
    producer.begin("tx3")  # the producer retries the receipted COMMIT
    for n in range(5):
        producer.send(f"/queue/{queue}", f"a{n}", headers={**PERSISTENT, DUP: f"a{n}", "transaction": "tx3"})
    producer.commit("tx3", receipt=True)
    frames = _drain_any(proc, stomp_client, queue)
    assert sorted(bodies(frames))[:5] == [f"a{n}" for n in range(5)]
    assert sum(body.startswith("a") for body in bodies(frames)) == 5


def test_deleting_an_address_forgets_its_duplicate_ids(start_broker, stomp_client):
    queue = unique("dupdel")
    proc = start_broker()
    producer = stomp_client(proc)
    for n in range(3):
        _send(producer, queue, f"m{n}", f"id-{n}")
    assert call(proc, "DELETE", f"/api/addresses/{queue}")[0] == 200
    producer = stomp_client(proc)
    for n in range(3):
        _send(producer, queue, f"new{n}", f"id-{n}")  # the name came back empty
    proc.restart(kill=True)
    producer = stomp_client(proc)
    _send(producer, queue, "dup", "id-0")  # remembered since the address came back
    frames = _drain(proc, stomp_client, queue, 3)
    assert bodies(frames) == [f"new{n}" for n in range(3)]

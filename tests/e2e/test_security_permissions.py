"""Authorization over real sockets: `[security-settings."match"]` roles per permission, the
most specific match replacing the others, checked before anything is stored or created
(docs/security.md, the worked example)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess, RawStomp, StompClient, unique
from security_helpers import DEFAULT_SETTINGS, USERS, admin_get, login, start_secured

from pagemq.protocol.stomp.batch import encode_batch

SETTINGS: dict[str, Any] = {
    **DEFAULT_SETTINGS,
    "orders.#": {
        "send": ["producers", "admin"],
        "consume": ["order-readers", "admin"],
        "browse": ["order-readers", "admin"],
        "create-address": ["admin"],
        "create-durable-queue": ["admin"],
    },
    # more specific than "orders.#": replaces it entirely (no `consume` inherited)
    "orders.secret": {"send": ["admin"]},
}
ADDRESSES = [
    {"name": "jobs"},
    {"name": "orders.eu"},
    {"name": "orders.secret"},
    {"name": "events", "routing-type": "multicast"},
    {"name": "orders.feed", "routing-type": "multicast", "queues": [{"name": "jobs.feed"}]},
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    users = {**USERS, "subscriber": ("consumers", "builders")}
    proc = start_secured(tmp_path_factory.mktemp("perms"), SETTINGS, users=users,
                         extra={"addresses": ADDRESSES})  # configured: not auto-created
    yield proc
    proc.stop()
    assert not proc.tracebacks(), proc.log_tail(80)


def _client(proc: BrokerProcess, user: str, **kwargs: Any) -> StompClient:
    return StompClient(proc.stomp_port, connect_headers=login(user), **kwargs).connect()


def _denied(client: StompClient) -> str:
    error = client.listener.wait_for_error(10)
    client.listener.wait_for_disconnect(10)
    client.drop()
    return str(error.headers["message"])


def _messages(proc: BrokerProcess, queue: str) -> int:
    status, body = admin_get(proc, f"/api/queues/{queue}")
    assert status == 200, body
    return int(body["messages"])


def test_producer_can_send_but_not_consume(secured: BrokerProcess) -> None:
    before = _messages(secured, "jobs")
    producer = _client(secured, "producer")
    producer.send("/queue/jobs", "work", receipt=True)
    assert _messages(secured, "jobs") == before + 1
    producer.subscribe("/queue/jobs", receipt=False)
    assert _denied(producer) == "User producer lacks permission consume on address jobs"
    assert _messages(secured, "jobs") == before + 1  # nothing was delivered to it


def test_consumer_can_consume_and_browse_only_where_allowed(secured: BrokerProcess) -> None:
    producer = _client(secured, "alice")
    producer.send("/queue/jobs", "for consumers", receipt=True)
    producer.send("/queue/orders.eu", "for order readers", receipt=True)
    producer.disconnect()

    browser = _client(secured, "consumer")
    browser.subscribe("/queue/jobs", headers={"browser": "true"})
    frames = browser.wait_for(1)
    assert frames[0].headers.get("browser") != "end"
    browser.disconnect()

    consumer = _client(secured, "consumer")
    consumer.subscribe("/queue/jobs", ack="client-individual")
    consumer.ack(consumer.wait_for(1)[0], receipt=True)
    consumer.disconnect()

    stranger = _client(secured, "consumer")
    stranger.subscribe("/queue/orders.eu", receipt=False)
    assert _denied(stranger) == "User consumer lacks permission consume on address orders.eu"
    peeker = _client(secured, "consumer")
    peeker.subscribe("/queue/orders.eu", headers={"browser": "true"}, receipt=False)
    assert _denied(peeker) == "User consumer lacks permission browse on address orders.eu"

    reader = _client(secured, "orders-reader")
    reader.subscribe("/queue/orders.eu")
    assert "for order readers" in [m.body for m in reader.wait_for(1)]
    reader.disconnect()
    reader = _client(secured, "orders-reader")
    reader.subscribe("/queue/jobs", headers={"browser": "true"}, receipt=False)
    assert _denied(reader) == "User orders-reader lacks permission browse on address jobs"


def test_a_queue_read_by_its_name_needs_the_permission_on_its_own_address(secured: BrokerProcess) -> None:
    """`/queue/jobs.feed` reads the queue jobs.feed of the address orders.feed: its
    permissions are orders.feed's, not those a name like jobs.feed would match."""
    stranger = _client(secured, "consumer")
    stranger.subscribe("/queue/jobs.feed", receipt=False)
    assert _denied(stranger) == "User consumer lacks permission consume on address orders.feed"
    peeker = _client(secured, "consumer")
    peeker.subscribe("orders.feed::jobs.feed", headers={"browser": "true"}, receipt=False)
    assert _denied(peeker) == "User consumer lacks permission browse on address orders.feed"
    reader = _client(secured, "orders-reader")
    reader.subscribe("/queue/jobs.feed")
    reader.disconnect()


def test_auto_create_is_denied_without_create_address(secured: BrokerProcess) -> None:
    name = unique("fresh")
    producer = _client(secured, "producer")
    producer.send(f"/queue/{name}", "x", headers={"receipt": "want-it"})
    error = producer.listener.wait_for_error(10)
    assert error.headers["message"] == f"User producer lacks permission create-address on address {name}"
    assert error.headers.get("receipt-id") == "want-it"
    producer.drop()
    assert admin_get(secured, f"/api/addresses/{name}")[0] == 404
    builder = _client(secured, "builder")  # builders may create addresses and queues
    builder.send(f"/queue/{name}", "x", receipt=True)
    builder.disconnect()
    assert _messages(secured, name) == 1


def test_durable_subscription_is_denied_without_create_durable_queue(secured: BrokerProcess) -> None:
    consumer = _client(secured, "consumer", client_id=unique("c"))
    consumer.subscribe("/topic/events")  # a plain subscription: create-non-durable-queue
    consumer.subscribe("/topic/events", headers={"durable-subscription-name": "keep"}, receipt=False)
    assert _denied(consumer) == "User consumer lacks permission create-durable-queue on address events"
    status, body = admin_get(secured, "/api/addresses/events")
    assert status == 200 and not any(q.endswith(".keep") for q in body["queues"]), body


def test_removing_a_durable_subscription_needs_delete_durable_queue(secured: BrokerProcess) -> None:
    client_id = unique("sub")
    subscriber = _client(secured, "subscriber", client_id=client_id)
    sub_id = subscriber.subscribe("/topic/events", headers={"durable-subscription-name": "mine"})
    assert admin_get(secured, f"/api/queues/{client_id}.mine")[0] == 200
    subscriber.unsubscribe(sub_id, headers={"durable-subscription-name": "mine"}, receipt=False)
    assert _denied(subscriber) == "User subscriber lacks permission delete-durable-queue on address events"
    assert admin_get(secured, f"/api/queues/{client_id}.mine")[0] == 200
    admin = _client(secured, "alice", client_id=client_id)
    sub_id = admin.subscribe("/topic/events", headers={"durable-subscription-name": "mine"})
    admin.unsubscribe(sub_id, headers={"durable-subscription-name": "mine"})
    admin.disconnect()
    assert admin_get(secured, f"/api/queues/{client_id}.mine")[0] == 404


def test_moving_a_durable_subscription_to_another_topic_needs_delete_durable_queue_on_the_old(
        secured: BrokerProcess) -> None:
    """Re-subscribing on another topic deletes the old subscription and its messages, as an
    UNSUBSCRIBE does. (Before: no permission was checked on the old topic.)"""
    client_id = unique("mover")
    subscriber = _client(secured, "subscriber", client_id=client_id)
    sub_id = subscriber.subscribe("/topic/events", headers={"durable-subscription-name": "kept"})
    subscriber.unsubscribe(sub_id)  # away: the subscription stays
    subscriber.subscribe(f"/topic/{unique('elsewhere')}", headers={"durable-subscription-name": "kept"},
                         receipt=False)
    assert _denied(subscriber) == "User subscriber lacks permission delete-durable-queue on address events"
    status, body = admin_get(secured, f"/api/queues/{client_id}.kept")
    assert status == 200 and body["address"] == "events", body


def test_a_durable_subscription_name_never_reaches_another_kind_of_queue(secured: BrokerProcess) -> None:
    """client-id `work` + subscription name `eu` names the anycast queue `work.eu`, and
    `events.<session>.<n>` another connection's temporary subscription queue: an UNSUBSCRIBE
    or a new selector of that "durable subscription" must delete neither."""
    prefix = unique("work")
    admin = _client(secured, "alice")
    admin.send(f"/queue/{prefix}.eu", "keep me", receipt=True)
    admin.disconnect()
    unsubscriber = _client(secured, "alice", client_id=prefix)  # may delete-durable-queue on "#"
    unsubscriber.unsubscribe("x", headers={"durable-subscription-name": "eu"}, receipt=False)
    assert _denied(unsubscriber) == (f"'{prefix}.eu' is not a durable subscription: it is the anycast "
                                     f"queue of address '{prefix}.eu'")
    assert _messages(secured, f"{prefix}.eu") == 1

    listener = _client(secured, "consumer")
    listener.subscribe("/topic/events", receipt=True)
    status, body = admin_get(secured, "/api/addresses/events")
    assert status == 200, body
    temporary = next(q for q in body["queues"] if ".pagemq-" in q)
    client_id, _, name = temporary.rpartition(".")
    thief = _client(secured, "alice", client_id=client_id)
    thief.subscribe("/topic/events", headers={"durable-subscription-name": name, "selector": "a = 1"},
                    receipt=False)
    assert "is not a durable subscription: it is the temporary subscription queue" in _denied(thief)
    status, body = admin_get(secured, "/api/addresses/events")
    assert status == 200 and temporary in body["queues"], body
    listener.disconnect()


def test_most_specific_match_wins_and_replaces(secured: BrokerProcess) -> None:
    producer = _client(secured, "producer")
    producer.send("/queue/orders.eu", "ok", receipt=True)  # orders.# grants producers send
    producer.send("/queue/orders.secret", "no", receipt=False)  # orders.secret does not
    assert _denied(producer) == "User producer lacks permission send on address orders.secret"
    reader = _client(secured, "orders-reader")  # orders.# grants consume; orders.secret replaces it
    reader.subscribe("/queue/orders.secret", receipt=False)
    assert _denied(reader) == "User orders-reader lacks permission consume on address orders.secret"
    admin = _client(secured, "alice")
    admin.send("/queue/orders.secret", "yes", receipt=True)
    admin.disconnect()


def test_denied_send_in_a_transaction_is_refused_at_send_and_nothing_is_stored(
    secured: BrokerProcess
) -> None:
    before_jobs, before_secret = _messages(secured, "jobs"), _messages(secured, "orders.secret")
    producer = _client(secured, "producer")
    producer.begin("tx1")
    producer.send("/queue/jobs", "staged", headers={"transaction": "tx1"}, receipt=True)
    producer.send("/queue/orders.secret", "refused", headers={"transaction": "tx1"}, receipt=False)
    assert _denied(producer) == "User producer lacks permission send on address orders.secret"
    assert (_messages(secured, "jobs"), _messages(secured, "orders.secret")) == (before_jobs, before_secret)


def test_a_denied_batch_send_is_refused_and_nothing_of_its_transaction_is_stored(
    secured: BrokerProcess
) -> None:
    before_jobs, before_secret = _messages(secured, "jobs"), _messages(secured, "orders.secret")
    with RawStomp(secured.stomp_port) as raw:
        raw.connect(headers={**login("producer"), "pagemq-batch": "1"})
        raw.send_frame("BEGIN", {"transaction": "t"})
        raw.send(encode_batch("/queue/jobs", "t", [([], b"allowed")] * 3))
        raw.send(encode_batch("/queue/orders.secret", "t", [([], b"refused")] * 3, receipt="r"))
        raw.send_frame("COMMIT", {"transaction": "t"})
        error = raw.expect_error()
    assert error.headers["message"] == "User producer lacks permission send on address orders.secret"
    assert (_messages(secured, "jobs"), _messages(secured, "orders.secret")) == (before_jobs, before_secret)


def test_roles_taken_away_in_the_users_file_apply_to_open_connections(secured: BrokerProcess) -> None:
    from brokerproc import wait_until

    from pagemq.security.users import User, load_users, write_users

    users_file = secured.workdir / "users.toml"
    original = load_users(users_file)
    demoted = dict(original.by_name)
    demoted["builder"] = User("builder", demoted["builder"].password_hash, frozenset({"builders"}))
    producer = _client(secured, "builder")
    producer.send("/queue/jobs", "still allowed", receipt=True)
    write_users(users_file, demoted.values())
    try:
        wait_until(lambda: sum("reloaded" in line for line in secured.log_lines) > 0, timeout=10,
                   what="the users file to be reloaded")
        producer.send("/queue/jobs", "not any more", receipt=False)
        assert _denied(producer) == "User builder lacks permission send on address jobs"
    finally:
        write_users(users_file, original.by_name.values())
    assert set(USERS) <= set(original.by_name)

"""The management address `activemq.management` over STOMP, as an Artemis client script uses
it: `_AMQ_ResourceName` + `_AMQ_Attribute` (or `_AMQ_OperationName` with a JSON array of
parameters in the body), the answer on `reply-to` as a JSON array with
`_AMQ_OperationSucceeded` (issue 16, part 3). Real broker, stomp.py."""

from __future__ import annotations

import json
from typing import Any

from brokerproc import StompClient, unique
from security_helpers import login, start_secured
from test_paging_helpers import numbered, send_all

BROKER_CONFIG = {"address-settings": {"paged.#": {"max-size-bytes": 0, "page-size-bytes": "16KiB"}}}


def ask(client: StompClient, replies: str, resource: str, *, attribute: str | None = None,
        operation: str | None = None, params: list[Any] | None = None,
        extra: dict[str, str] | None = None) -> Any:
    """One request; (succeeded, the decoded JSON array, the reply frame)."""
    headers = {"_AMQ_ResourceName": resource, "reply-to": replies, **(extra or {})}
    if attribute is not None:
        headers["_AMQ_Attribute"] = attribute
    if operation is not None:
        headers["_AMQ_OperationName"] = operation
    before = len(client.listener.messages)
    body = json.dumps(params) if params is not None else ""
    client.send("activemq.management", body, headers=headers, receipt=True)
    frame = client.wait_for(before + 1)[before]
    return frame.headers["_AMQ_OperationSucceeded"] == "true", json.loads(frame.body), frame


def with_messages(broker: Any, stomp_client: Any, prefix: str, count: int) -> tuple[str, StompClient, str]:
    """A new queue holding `count` messages, and a client subscribed to a replies queue:
    (queue, client, replies destination)."""
    queue = unique(prefix)
    send_all(stomp_client(broker), f"/queue/{queue}", numbered("m", count))
    client = stomp_client(broker)
    replies = f"/queue/{queue}-replies"
    client.subscribe(replies)
    return queue, client, replies


def test_queue_attributes_answer_on_reply_to_as_a_json_array(broker, stomp_client):
    queue, client, replies = with_messages(broker, stomp_client, "mgmt", 3)
    ok, result, frame = ask(client, replies, f"queue.{queue}", attribute="messageCount",
                            extra={"correlation-id": "c-42"})
    assert (ok, result) == (True, [3])
    assert frame.headers["correlation-id"] == "c-42"
    assert ask(client, replies, f"queue.{queue}", attribute="consumerCount")[:2] == (True, [0])
    assert ask(client, replies, f"queue.{queue}", attribute="messagesAdded")[:2] == (True, [3])
    assert ask(client, replies, f"queue.{queue}", attribute="routingType")[:2] == (True, ["ANYCAST"])
    # A getter's name as an operation (Artemis accepts both)
    assert ask(client, replies, f"queue.{queue}", operation="getMessageCount")[:2] == (True, [3])
    # The request itself is answered, never stored: no such address appears.
    assert broker.http_get("/api/addresses/activemq.management")[0] == 404


def test_count_messages_takes_a_filter_and_sees_paged_messages(broker, stomp_client):
    address = f"paged.{unique('count')}"
    producer = stomp_client(broker)
    for n in range(30):
        producer.send(f"/queue/{address}", f"m{n}" + "x" * 1000,
                      headers={"color": "red" if n % 3 == 0 else "blue", "persistent": "true"},
                      receipt=True)
    client = stomp_client(broker)
    replies = f"/queue/{unique('replies')}"
    client.subscribe(replies)
    assert ask(client, replies, f"address.{address}", attribute="paging")[:2] == (True, [True])
    assert ask(client, replies, f"address.{address}", attribute="isPaging")[:2] == (True, [True])
    ok, pages, _ = ask(client, replies, f"address.{address}", attribute="numberOfPages")
    assert ok and pages[0] >= 1
    assert ask(client, replies, f"address.{address}", attribute="queueNames")[:2] == (True, [[address]])
    assert ask(client, replies, f"queue.{address}", operation="countMessages", params=[])[:2] == (True, [30])
    assert ask(client, replies, f"queue.{address}", operation="countMessages",
               params=["color = 'red'"])[:2] == (True, [10])


def test_broker_operations_and_attributes(broker, stomp_client):
    queue, client, replies = with_messages(broker, stomp_client, "brk", 1)
    ok, names, _ = ask(client, replies, "broker", operation="getQueueNames", params=["ANYCAST"])
    assert ok and queue in names[0]
    ok, names, _ = ask(client, replies, "broker", attribute="addressNames")
    assert ok and queue in names[0]
    ok, size, _ = ask(client, replies, "broker", attribute="globalMaxSize")
    assert ok and size[0] > 0
    ok, full, _ = ask(client, replies, "broker", attribute="diskFull")
    assert (ok, full) == (True, [False])


def test_a_bad_request_is_answered_with_operation_succeeded_false(broker, stomp_client):
    client = stomp_client(broker)
    replies = f"/queue/{unique('bad')}"
    client.subscribe(replies)
    ok, result, _ = ask(client, replies, "queue.no-such-queue", attribute="messageCount")
    assert not ok and "Cannot find resource" in result[0]
    ok, result, _ = ask(client, replies, "broker", attribute="noSuchThing")
    assert not ok and "noSuchThing" in result[0]
    ok, result, _ = ask(client, replies, "broker", operation="noSuchOperation", params=[1, 2])
    assert not ok and "noSuchOperation" in result[0]
    ok, result, _ = ask(client, replies, "broker", operation="getQueueNames", params=[5])
    assert not ok and "bad parameters" in result[0]
    replies_queue = f"queue.{replies.removeprefix('/queue/')}"
    ok, result, _ = ask(client, replies, replies_queue, operation="countMessages", params=["a ==="])
    assert not ok and "invalid selector" in result[0]
    before = len(client.listener.messages)  # parameters nested 100,000 deep (a breaker's)
    client.send("activemq.management", "[" * 100_000 + "]" * 100_000, receipt=True,
                headers={"_AMQ_ResourceName": "broker", "_AMQ_OperationName": "getQueueNames",
                         "reply-to": replies})
    frame = client.wait_for(before + 1)[before]
    assert frame.headers["_AMQ_OperationSucceeded"] == "false"
    assert "nested too deeply" in json.loads(frame.body)[0]
    # The connection stays usable: a failed request is an answer, not an ERROR.
    ok, _, _ = ask(client, replies, "broker", attribute="version")
    assert ok


def test_with_security_a_request_needs_manage_and_may_answer_only_where_the_user_may_send(
    tmp_path,
):
    """As Artemis: `manage` on the management address. The answer goes only where the user
    could send itself (no address made for someone who may not create one)."""
    proc = start_secured(tmp_path / "secured", extra={"addresses": [{"name": "replies"}]})
    try:
        admin = StompClient(proc.stomp_port, connect_headers=login("alice")).connect()
        admin.subscribe("/queue/replies")
        assert ask(admin, "/queue/replies", "broker", attribute="version")[0]
        producer = StompClient(proc.stomp_port, connect_headers=login("producer")).connect()
        producer.send("activemq.management", "", headers={
            "_AMQ_ResourceName": "broker", "_AMQ_Attribute": "version", "reply-to": "/queue/replies"})
        error = producer.listener.wait_for_error()
        assert "lacks permission manage" in error.headers["message"]
        assert "activemq.management" in error.headers["message"]
        admin.disconnect()
    finally:
        proc.stop()
    assert not proc.tracebacks()

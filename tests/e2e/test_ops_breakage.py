"""Operations features attacked as a user would (issue 18): what broke, kept as tests.

Each test here failed against the first merge of the management API, the metrics and the
logs; they start a real broker and talk to it over HTTP and STOMP."""

from __future__ import annotations

import subprocess
import time

import test_paging_helpers as paging
from admin_http import call, path_of
from brokerproc import HOST, PAGEMQ, cli_into_head, unique
from security_helpers import start_secured


def test_a_move_body_that_is_not_utf8_is_a_400_not_a_500(broker, stomp_client):
    name = unique("badbody")
    client = stomp_client(broker)
    client.send(f"/queue/{name}", "kept", receipt=True)

    status, answer, _ = call(broker, "POST", path_of("queues", name, "move"), raw=b"\xff\xfe{")

    assert status == 400, answer
    assert "JSON" in answer["error"]
    assert broker.queue(name)["messages"] == 1


def test_broker_view_names_version_uptime_connections_and_rates(broker, stomp_client):
    status, before, _ = call(broker, "GET", "/api/broker")
    assert status == 200
    version = subprocess.run([PAGEMQ, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.strip() == f"pagemq {before['version']}"
    assert before["uptime_seconds"] > 0 and before["started_at"] < time.time()
    client = stomp_client(broker)
    name = unique("rates")
    for i in range(20):
        client.send(f"/queue/{name}", f"m{i}", receipt=i == 19)
    time.sleep(1.1)  # a rate is measured over a second at least

    after = call(broker, "GET", "/api/broker")[1]

    assert after["uptime_seconds"] > before["uptime_seconds"]
    assert after["connections"] >= 1
    assert after["connections_opened"] >= before["connections_opened"] + 1
    assert after["rates"]["messages_added"] >= before["rates"]["messages_added"] + 20
    assert after["rates"]["in_per_second"] > 0
    for section in ("memory", "disk", "store"):
        assert section in after


def test_queue_list_piped_into_head_ends_quietly(broker, stomp_client):
    producer = stomp_client(broker)
    prefix = unique("piped")
    for n in range(400):  # --json: some 200 KB, more than a pipe holds
        producer.send(f"/queue/{prefix}.{n:04d}", "m", receipt=n == 399)
    first, code, stderr = cli_into_head("queue", "list", "--json", "--url", f"http://{HOST}:{broker.http_port}")
    assert first.strip() == b"{"
    assert code == 0, stderr
    assert stderr == "", stderr


def test_health_checks_answer_without_credentials_when_security_is_on(tmp_path):
    proc = start_secured(tmp_path / "secured")
    try:
        for path in ("/health", "/health/ready", "/health/live"):
            status, answer, _ = call(proc, "GET", path)  # a Kubernetes httpGet probe: no credentials
            assert (status, answer["status"]) == (200, "ready"), (path, answer)
        # everything else still needs them
        for path in ("/api/broker", "/metrics", "/api/queues", "/health/../api/broker"):
            assert call(proc, "GET", path)[0] == 401, path
        assert call(proc, "DELETE", "/health")[0] == 401
    finally:
        proc.stop()


def test_browsing_with_after_goes_on_when_that_message_was_consumed_meanwhile(broker, stomp_client):
    name = unique("browse-after")
    producer = stomp_client(broker)
    for i in range(30):
        producer.send(f"/queue/{name}", f"m{i}", headers={"persistent": "true", "i": i}, receipt=i == 29)
    first = call(broker, "GET", path_of("queues", name, "messages") + "?limit=10")[1]
    assert [m["headers"]["i"] for m in first["messages"]] == [str(i) for i in range(10)]
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{name}", ack="client-individual")
    for frame in paging.wait_frames(consumer, 30)[:15]:  # the first page and five more, gone
        consumer.ack(frame)
    consumer.disconnect()
    broker.wait_queue(name, messages=15)

    query = f"?limit=100&after={first['next_after']}"
    rest = call(broker, "GET", path_of("queues", name, "messages") + query)[1]

    assert [m["headers"]["i"] for m in rest["messages"]] == [str(i) for i in range(15, 30)]
    assert rest["more"] is False

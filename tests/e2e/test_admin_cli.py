"""`pagemq queue list|purge|delete|move|retry --url ...` against a live broker."""

from __future__ import annotations

from admin_http import call, path_of
from brokerproc import HOST, free_port, run_cli, unique, wait_until
from test_paging_helpers import assert_paging, numbered, send_all, take, wait_frames, wait_no_page_files

BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "zero.#": {"max-size-bytes": 0},
        "dead.#": {"max-delivery-attempts": 1, "dead-letter-address": "dead.DLQ"},
    },
}


def _queue(broker, *args: str):
    return run_cli("queue", *args, "--url", f"http://{HOST}:{broker.http_port}")


def test_queue_list_prints_a_table_of_the_matching_queues(broker, stomp_client):
    prefix = unique("clilist")
    send_all(stomp_client(broker), f"/queue/{prefix}.a", ["x", "y"])
    send_all(stomp_client(broker), f"/queue/{prefix}.b", ["z"])
    result = _queue(broker, "list", "--filter", prefix)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:5] == ["NAME", "ADDRESS", "TYPE", "CONSUMERS", "MESSAGES"]
    assert [line.split()[0] for line in lines[1:3]] == [f"{prefix}.a", f"{prefix}.b"]
    assert lines[1].split()[4] == "2" and lines[2].split()[4] == "1"
    assert lines[-1] == "2 of 2 queue(s)"


def test_queue_purge_delete_and_move_act_on_the_broker(broker, stomp_client):
    paged, moved, gone = "zero." + unique("clipurge"), "zero." + unique("climove"), "a b " + unique("cli")
    producer = stomp_client(broker)
    send_all(producer, f"/queue/{paged}", numbered("p", 80))
    send_all(producer, f"/queue/{moved}", numbered("m", 30))
    producer.send(f"/queue/{gone}", "typo", receipt=True)
    assert_paging(broker, paged)

    result = _queue(broker, "purge", paged)
    assert result.returncode == 0 and result.stdout.strip() == f"queue {paged}: 80 message(s) purged"
    wait_no_page_files(broker, paged)

    target = unique("clitarget")
    result = _queue(broker, "move", moved, "--to", target)
    assert result.returncode == 0 and "30 message(s) moved" in result.stdout, result.stderr
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{target}", ack="client-individual")
    assert take(consumer, 30) == numbered("m", 30)

    result = _queue(broker, "delete", gone)
    assert result.returncode == 0, result.stderr
    assert call(broker, "GET", path_of("queues", gone))[0] == 404


def test_queue_retry_sends_dead_letters_back(broker, stomp_client):
    name = "dead." + unique("cliretry")
    send_all(stomp_client(broker), f"/queue/{name}", ["d"])
    nacker = stomp_client(broker)
    nacker.subscribe(f"/queue/{name}", ack="client-individual")
    nacker.nack(wait_frames(nacker, 1)[0], receipt=True)
    nacker.disconnect()
    wait_until(lambda: broker.queue(name)["messages"] == 0)
    result = _queue(broker, "retry", "dead.DLQ", "--json")
    assert result.returncode == 0, result.stderr
    assert '"retried"' in result.stdout
    broker.wait_queue(name, messages=1)


def test_errors_exit_1_with_the_brokers_message(broker):
    missing = unique("climissing")
    result = _queue(broker, "purge", missing)
    assert result.returncode == 1
    assert "404" in result.stderr and missing in result.stderr
    result = _queue(broker, "move", missing, "--to", "x", "--selector", "a = = 1")
    assert result.returncode == 1 and "404" in result.stderr
    result = run_cli("queue", "list", "--url", f"http://{HOST}:{free_port()}")
    assert result.returncode == 1 and "cannot reach the broker" in result.stderr
    result = run_cli("queue", "move", "q")  # --to is required
    assert result.returncode == 2

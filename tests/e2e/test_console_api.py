"""The endpoints the console added, over HTTP against a live broker: page files with their
message-id ranges, the history ring, the console's own files (public, nothing else is), and
the 401 the console's scripts get without a browser password dialog (docs/console.md)."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

import test_paging_helpers as paging
from admin_http import call, ok, path_of
from brokerproc import HOST, unique
from security_helpers import start_secured

BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "zero.#": {"max-size-bytes": 0},
    },
}


def test_queue_pages_list_each_page_file_with_its_message_id_range(broker, stomp_client):
    name = "zero." + unique("pages")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 100))
    on_disk = [path.name for path in paging.page_files(broker, name)]
    answer = ok(broker, "GET", path_of("queues", name, "pages"))
    pages = answer["pages"]
    assert answer["queue"] == name and answer["address"] == name and answer["total"] == len(on_disk)
    assert [p["file"] for p in pages] == on_disk
    assert set(pages[0]) == {"page", "file", "first_id", "last_id", "records", "bytes", "live",
                             "queues_holding", "queue_records", "queue_acknowledged"}
    ids = [m["message_id"] for m in _browse_all(broker, name)]
    assert pages[0]["first_id"] == ids[0] and pages[-1]["last_id"] == ids[-1]
    assert sum(p["queue_records"] for p in pages) == 100 == sum(p["records"] for p in pages)
    assert [p["live"] for p in pages] == [False] * (len(pages) - 1) + [True]
    window = ok(broker, "GET", path_of("queues", name, "pages") + "?offset=1&limit=2")
    assert window["pages"] == pages[1:3] and window["total"] == len(pages)
    status, body, _ = call(broker, "GET", path_of("queues", name, "pages") + "?limit=x")
    assert status == 400 and "limit" in body["error"]
    assert ok(broker, "GET", path_of("addresses", name, "pages"))["pages"][0]["queues_holding"] == 1

    ok(broker, "POST", path_of("queues", name, "purge"))
    paging.wait_no_page_files(broker, name)
    assert ok(broker, "GET", path_of("queues", name, "pages"))["pages"] == []


def test_page_records_after_a_restart_count_the_persistent_messages_only(start_broker, stomp_client):
    broker = start_broker(BROKER_CONFIG)
    name = "zero." + unique("mixed")
    client = stomp_client(broker)
    paging.send_all(client, f"/queue/{name}", paging.numbered("p", 30))
    paging.send_all(client, f"/queue/{name}", paging.numbered("n", 20), persistent=False)
    paging.send_all(client, f"/queue/{name}", paging.numbered("q", 30))
    before = ok(broker, "GET", path_of("addresses", name, "pages"))["pages"]
    assert sum(p["records"] for p in before) == 80
    client.drop()
    broker.restart()
    pages = ok(broker, "GET", path_of("addresses", name, "pages"))["pages"]
    assert sum(p["records"] for p in pages) == 60  # docs/http-api.md: non-persistent ones are gone
    assert sum(p["queue_records"] for p in ok(broker, "GET", path_of("queues", name, "pages"))["pages"]) == 60
    assert ok(broker, "GET", path_of("queues", name))["messages"] == 60


def _browse_all(broker, name):
    return ok(broker, "GET", path_of("queues", name, "messages") + "?limit=1000")["messages"]


def test_pages_of_an_unknown_name_are_404_and_other_methods_405(broker):
    assert call(broker, "GET", path_of("queues", "nope", "pages"))[0] == 404
    assert call(broker, "GET", path_of("addresses", "nope", "pages"))[0] == 404
    status, body, headers = call(broker, "POST", "/api/broker/history", {})
    assert status == 405 and headers["Allow"] == "GET, HEAD" and "not allowed" in body["error"]


def test_history_answers_the_ring_with_its_limits(broker):
    history = ok(broker, "GET", "/api/broker/history")
    assert history["interval_seconds"] == 5.0 and history["capacity"] == 180
    assert set(history["limits"]) == {"global_max_size", "global_max_messages", "max_disk_usage",
                                      "min_disk_free"}
    sample = history["samples"][0]
    for key in ("time", "memory_used_bytes", "disk_used_percent", "connections", "in_per_second",
                "out_per_second", "journal_bytes", "page_bytes", "messages_added"):
        assert key in sample


def test_the_console_files_are_served_and_nothing_outside_them(broker):
    status, content_type, text = broker.http_get_text("/console/")
    assert status == 200 and content_type.startswith("text/html") and 'src="js/app.js"' in text
    status, content_type, text = broker.http_get_text("/console/js/app.js")
    assert status == 200 and content_type.startswith("text/javascript")
    for path in ("/console/js/nope.js", "/console/.hidden", "/console/js/%2E%2E/index.html",
                 "/console/..%2F..%2Fpyproject.toml"):
        assert broker.http_get_text(path)[0] == 404, path
    request = urllib.request.Request(f"http://{HOST}:{broker.http_port}/console")
    with urllib.request.urlopen(request) as response:  # follows the redirect to /console/
        assert response.url.endswith("/console/")


def test_with_security_the_console_is_public_but_its_data_is_not(tmp_path):
    proc = start_secured(tmp_path / "secured")
    try:
        assert proc.http_get_text("/console/")[0] == 200
        assert proc.http_get_text("/console/js/api.js")[0] == 200
        for path in ("/api/broker/history", "/api/queues/x/pages", "/api/addresses/x/pages"):
            assert proc.http_get(path)[0] == 401, path
        url = f"http://{HOST}:{proc.http_port}/api/broker/history"
        plain = _status_and_challenge(urllib.request.Request(url))
        asking = urllib.request.Request(url, headers={"X-Requested-With": "XMLHttpRequest"})
        quiet = _status_and_challenge(asking)
        assert plain == (401, True) and quiet == (401, False)
        for sneaky in ("/console/../api/broker/history", "/console/%2E%2E/api/broker/history",
                       "/console/..%2Fapi%2Fbroker%2Fhistory"):  # out of the console: no data
            connection = http.client.HTTPConnection(HOST, proc.http_port, timeout=5)
            connection.request("GET", sneaky)
            answer = connection.getresponse()
            assert answer.status in (401, 404) and b"samples" not in answer.read(), sneaky
            connection.close()
    finally:
        proc.stop()
    assert not proc.tracebacks()


def _status_and_challenge(request: urllib.request.Request) -> tuple[int, bool]:
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, "WWW-Authenticate" in response.headers
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, "WWW-Authenticate" in exc.headers

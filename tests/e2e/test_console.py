"""The web console in a real headless browser (chromium through Selenium) against a real
broker: a paging address flagged with its counts and page files, a paged message browsed,
a purge from the queue's page, the overview's figures, and the console with security on
(issue 18 §2; docs/console.md). Skipped, saying what to install, without chromium."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import test_paging_helpers as paging
from admin_http import ok, path_of
from brokerproc import BrokerProcess, unique, wait_until
from console_browser import Console, console_driver
from security_helpers import login, password, start_secured

BROKER_CONFIG = {
    "address-settings": {
        "#": {"page-size-bytes": "16KiB"},
        "zero.#": {"max-size-bytes": 0},  # everything sent pages at once
        "dead.#": {"max-delivery-attempts": 1, "dead-letter-address": "dead.DLQ"},
    },
}


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    browser = console_driver()
    yield browser
    browser.quit()


@pytest.fixture
def console(driver: Any, broker: BrokerProcess) -> Console:
    driver.delete_all_cookies()
    return Console(driver, broker)


def _cell(console: Console, row_css: str, field: str) -> str | None:
    return console.text_of(f"{row_css} [data-field={field}]")


def test_a_paging_address_is_flagged_with_its_counts_and_page_files(console, broker, stomp_client):
    name = "zero." + unique("flag")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 300))
    info = paging.assert_paging(broker, name, paged=300)
    files = [path.name for path in paging.page_files(broker, name)]
    assert len(files) > 5

    console.open(f"addresses?filter={name}")
    row = f'tr[data-name="{name}"]'
    console.element(row)
    assert "paging" in console.find(row).get_attribute("class").split()
    assert console.text_of(f"{row} [data-field=paging]") == "PAGING"
    assert _cell(console, row, "messages") == "300"
    assert _cell(console, row, "messages_paged") == "300"
    assert _cell(console, row, "messages_in_memory") == "0"
    assert _cell(console, row, "page_files") == str(info["page_files"]) == str(len(files))

    console.click(f"{row} a.queue-link")
    console.wait_text("#queue-name", name)
    console.wait_text("#queue-counters [data-field=messages_paged]", "300")
    console.element("#pages-table")
    shown = console.texts("#pages-table [data-field=file]")  # the live page has a "live" badge
    assert [text.split()[0] for text in shown] == files
    pages = ok(broker, "GET", path_of("queues", name, "pages"))["pages"]
    first_ids = [int(text) for text in console.texts("#pages-table [data-field=first_id]")]
    last_ids = [int(text) for text in console.texts("#pages-table [data-field=last_id]")]
    assert first_ids == [p["first_id"] for p in pages] and last_ids == [p["last_id"] for p in pages]
    assert all(a <= b for a, b in zip(first_ids, last_ids, strict=True))
    assert all(last_ids[i] < first_ids[i + 1] for i in range(len(first_ids) - 1))  # ranges in order
    assert sum(int(text) for text in console.texts("#pages-table [data-field=queue_records]")) == 300


def test_the_address_table_is_sorted_filtered_and_paged_by_the_broker(console, broker, stomp_client):
    prefix = unique("table")
    producer = stomp_client(broker)
    names = [f"{prefix}.a{n:02d}" for n in range(30)]
    for n, name in enumerate(names):
        paging.send_all(producer, f"/queue/{name}", paging.numbered("m", n % 4 + 1), size=16)
    console.open(f"addresses?filter={prefix}&limit=25")
    console.wait_text("#range", "1\N{EN DASH}25 of 30")

    def shown() -> list[str]:
        return console.wait(lambda _d: [e.get_attribute("data-name") for e in console.find_all(
            "#addresses-table tbody tr")], "the table's rows")
    assert shown() == names[:25]
    console.click("#next-page")
    console.wait_text("#range", "26\N{EN DASH}30 of 30")
    assert shown() == names[25:]

    console.click("th a[data-sort=messages]")  # ascending, back to the first page
    console.wait_text("#addresses-table th.sorted", "Messages ▲")
    counts = [int(text) for text in console.texts("#addresses-table tbody [data-field=messages]")]
    assert counts == sorted(counts) and counts[0] == 1 and len(counts) == 25
    console.click("th a[data-sort=messages]")
    console.wait_text("#addresses-table th.sorted", "Messages ▼")
    counts = [int(text) for text in console.texts("#addresses-table tbody [data-field=messages]")]
    assert counts == sorted(counts, reverse=True) and counts[0] == 4

    console.find("#filter").send_keys(".a1")  # typed: the broker filters (names containing it)
    console.wait_text("#range", "of 10")
    assert sorted(shown()) == names[10:20]
    console.go("addresses?filter=no-such-address-anywhere")
    console.wait_text("#empty", "No addresses match")
    assert "null" not in console.find("#view").text


def test_a_paged_message_is_browsed_and_the_queue_purged_from_its_page(console, broker, stomp_client):
    name = "zero." + unique("purge")
    paging.send_all(stomp_client(broker), f"/queue/{name}", paging.numbered("m", 120),
                    headers={"color": "red"})
    paging.assert_paging(broker, name, paged=120)

    console.open(f"queue/{name}")
    first = console.element("#messages-table tr.message")
    cells = first.find_elements("css selector", "td")
    first_id = cells[0].text
    assert cells[1].text.startswith("paged")
    first.click()
    detail = console.element("#messages-table tr.detail-row")
    assert "color" in detail.text and "red" in detail.text
    assert paging.body("m0")[:40] in detail.find_element("css selector", "pre.body").text
    console.click("#browse-next")
    console.wait(lambda _d: console.text_of("#messages-table tr.message td") not in (None, first_id),
                 "the second page of messages")

    console.click("button[data-action=purge]")
    assert "120" in console.text_of("#confirm-text")
    console.confirm()
    console.wait_text("#notice", f"Purged 120 message(s) from {name}")
    console.wait_text("#queue-counters [data-field=messages]", "0")
    console.element("#no-pages")
    console.element("#no-messages")
    paging.wait_no_page_files(broker, name)
    assert broker.queue(name)["messages"] == 0


def test_move_retry_and_delete_from_the_queue_page_even_for_an_odd_name(console, broker, stomp_client):
    odd = f"odd name #{unique('q')}?"  # a space, '#' and '?': one encoded path segment
    paging.send_all(stomp_client(broker), f"/queue/{odd}", paging.numbered("o", 3), size=64)
    console.open("queue/" + urllib.parse.quote(odd, safe=""))
    console.wait_text("#queue-name", odd)
    console.wait_text("#queue-counters [data-field=messages]", "3")

    console.click("button[data-action=purge]")
    console.cancel()  # a cancelled action does nothing
    assert broker.queue(urllib.parse.quote(odd, safe=""))["messages"] == 3

    target = unique("moved")
    console.click("button[data-action=move]")
    console.confirm({"to": target})
    console.wait_text("#notice", f"Moved 3 message(s) from {odd} to {target}")
    console.wait_text("#queue-counters [data-field=messages]", "0")
    assert broker.queue(target)["messages"] == 3

    dead = "dead." + unique("retry")
    paging.send_all(stomp_client(broker), f"/queue/{dead}", ["d0", "d1"], size=64)
    paging.nack_all(stomp_client(broker), f"/queue/{dead}", 2)
    wait_until(lambda: broker.queue("dead.DLQ")["messages"] >= 2)
    console.go("queue/dead.DLQ")
    console.wait_text("#queue-name", "dead.DLQ")
    console.click("button[data-action=retry]")
    console.confirm()
    console.wait_text("#notice", "back to their original destination")
    broker.wait_queue(dead, messages=2)

    console.go("queue/" + urllib.parse.quote(odd, safe=""))
    console.wait_text("#queue-name", odd)
    console.click("button[data-action=delete]")
    console.confirm()
    console.wait_text("#notice", f"Deleted queue {odd}")
    console.wait(lambda d: d.execute_script("return location.hash").startswith("#/queues"), "the queue list")
    assert broker.http_get(path_of("queues", odd))[0] == 404


def test_a_failed_action_shows_the_api_error_text(console, broker, stomp_client):
    name = unique("movefail")
    paging.send_all(stomp_client(broker), f"/queue/{name}", ["a"])
    console.open(f"queue/{name}")
    console.element("#messages-table")
    console.click("button[data-action=move]")
    console.confirm({"to": "elsewhere", "selector": "color = "})
    text = console.wait_text("#error", "Move of")
    assert "400:" in text and "selector" in text.lower()
    assert broker.queue(name)["messages"] == 1


def test_the_overview_shows_memory_against_global_max_size_and_its_history(console, broker, stomp_client):
    console.open()
    console.wait_text("#overview-cards [data-field=memory]", "global-max-size")
    assert console.texts("#overview-charts figcaption") == [
        "Memory", "Disk (fullest filesystem)", "Messages per second", "Connections"]
    console.wait(lambda _d: console.find_all("#overview-charts svg line.limit"), "the global-max-size line")
    history = ok(broker, "GET", "/api/broker/history")
    assert history["samples"] and history["interval_seconds"] == 5.0


# -- security on ---------------------------------------------------------------------------------

VIEWER_SETTINGS = {"#": {"send": ["admin"], "consume": ["admin"], "browse": ["admin"],
                         "create-address": ["admin"], "create-durable-queue": ["admin"],
                         "manage": ["admin"], "view": ["admin", "viewers"]}}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_secured(tmp_path_factory.mktemp("console-secured"), VIEWER_SETTINGS,
                         users={"alice": ("admin",), "victor": ("viewers",)})
    yield proc
    proc.stop()
    assert not proc.tracebacks(), proc.log_tail(80)


def test_with_security_on_the_console_asks_for_a_login_and_actions_need_manage(driver, secured, stomp_client):
    name = unique("secured")
    producer = stomp_client(secured, connect_headers=login("alice"))
    paging.send_all(producer, f"/queue/{name}", paging.numbered("s", 3))
    status, body = secured.http_get(f"/api/queues/{name}")
    assert status == 401 and "authentication" in body["error"].lower()
    assert secured.http_get_text("/console/")[0] == 200  # the page itself holds no data

    driver.delete_all_cookies()
    console = Console(driver, secured)
    console.open(f"queue/{name}")
    console.driver.execute_script("sessionStorage.clear(); location.reload();")
    console.wait(lambda _d: console.dialog_open("login-dialog"), "the login form")
    assert "authentication required" in console.text_of("#login-reason").lower()
    console.log_in("victor", "wrong")
    console.wait_text("#login-reason", "Authentication failed")
    console.log_in("victor", password("victor"))
    console.wait_text("#queue-counters [data-field=messages]", "3")
    console.wait_text("#who", "victor")

    console.click("button[data-action=purge]")
    console.confirm()
    text = console.wait_text("#error", "Purge of")
    assert "403: User victor lacks permission manage" in text
    assert secured.http_get_text(path_of("queues", name))[0] == 401  # still guarded
    console.click("#logout")
    console.log_in("alice", password("alice"))
    console.wait_text("#who", "alice")
    console.wait_text("#queue-counters [data-field=messages]", "3")
    console.click("button[data-action=purge]")
    console.confirm()
    console.wait_text("#notice", "Purged 3 message(s)")
    console.wait_text("#queue-counters [data-field=messages]", "0")

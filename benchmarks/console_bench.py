"""How long the web console takes to draw its overview and its address table with 10,000
queues (issue 18: within 1 s), in a real headless chromium driven by Selenium.

    .venv/bin/python benchmarks/console_bench.py [--queues 10000] [--rounds 5]

Starts `pagemq serve` on a fresh data directory with N anycast addresses configured (each
with its queue), sends one message to every 100th (those addresses page: `max-size-bytes =
0` under `bench.#`, so the table has paging rows to highlight), then, in chromium:

- cold: load `/console/#/` and `/console/#/addresses` from scratch (navigation start to
  the page drawn: HTML, the ES modules, the API calls, the DOM);
- warm: switch route inside the loaded console (the route change to the page drawn):
  overview, the address table sorted by name (the default: only one page of rows built
  by the broker), sorted by messages descending (the broker builds every row to sort),
  and filtered.

Times are the console's own Performance API measures (`pagemq:render`, from its start to
the page drawn; for a cold load, navigation start to the same end), checked against
Selenium's wall clock (from the call to the element being found, polling every 10 ms).
Prints min / median / max per case over `--rounds`. Needs /usr/bin/chromium and
/usr/bin/chromedriver (`apt-get install chromium chromium-driver`) and selenium.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import metrics_bench
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

PAGEMQ = str(Path(sys.executable).with_name("pagemq"))
TARGET_MS = 1000.0


def _config(queues: int) -> str:
    settings = '[address-settings."bench.#"]\nmax-size-bytes = 0\npage-size-bytes = "64KiB"\n'
    return settings + metrics_bench._config(queues)


def _driver() -> Any:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1000", "--no-first-run"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def _last_render(driver: Any, hash_route: str) -> dict[str, float]:
    """The console's last `pagemq:render` measure for `hash_route`: its duration and end."""
    entry = driver.execute_script(
        "const all = performance.getEntriesByName('pagemq:render')"
        "  .filter((e) => e.detail === arguments[0]);"
        "const e = all[all.length - 1];"
        "return e ? {duration: e.duration, end: e.startTime + e.duration} : null;", hash_route)
    assert entry is not None, f"no render measure for {hash_route}"
    return {"duration": float(entry["duration"]), "end": float(entry["end"])}


def _wait_drawn(driver: Any, hash_route: str, css: str) -> float:
    """Wall seconds until the route is drawn and `css` is in it (polled every 10 ms)."""
    started = time.perf_counter()
    WebDriverWait(driver, 30, poll_frequency=0.01).until(
        lambda d: d.execute_script("return document.body.dataset.loaded") == hash_route
        and d.find_elements(By.CSS_SELECTOR, css))
    return time.perf_counter() - started


def _cold(driver: Any, base: str, hash_route: str, css: str) -> tuple[float, float]:
    driver.get("about:blank")
    started = time.perf_counter()
    driver.get(base + hash_route)
    _wait_drawn(driver, hash_route, css)
    wall = time.perf_counter() - started
    return _last_render(driver, hash_route)["end"], wall * 1000


def _warm(driver: Any, hash_route: str, css: str) -> tuple[float, float]:
    driver.execute_script("location.hash = '#/connections';")
    _wait_drawn(driver, "#/connections", "#connections-table")
    started = time.perf_counter()
    driver.execute_script("location.hash = arguments[0];", hash_route)
    _wait_drawn(driver, hash_route, css)
    wall = time.perf_counter() - started
    return _last_render(driver, hash_route)["duration"], wall * 1000


def _report(label: str, runs: list[tuple[float, float]]) -> bool:
    browser = [b for b, _ in runs]
    wall = [w for _, w in runs]
    ok = max(browser) < TARGET_MS
    print(f"{label:<44} browser ms min {min(browser):7.1f} median {statistics.median(browser):7.1f} "
          f"max {max(browser):7.1f} | selenium wall ms median {statistics.median(wall):7.1f}"
          f"  {'ok' if ok else 'OVER 1 s'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="console-bench-"))
    (work / "pagemq.toml").write_text(_config(args.queues))
    stomp, http = metrics_bench._free_port(), metrics_bench._free_port()
    log = (work / "broker.log").open("wb")
    proc = subprocess.Popen(
        [PAGEMQ, "serve", "--config", str(work / "pagemq.toml"), "--data-dir", str(work / "data"),
         "--stomp", f"127.0.0.1:{stomp}", "--http", f"127.0.0.1:{http}", "--log-level", "WARNING"],
        stdout=log, stderr=log,
    )
    driver = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"broker did not start; see {work / 'broker.log'}") from None
                time.sleep(0.2)
        metrics_bench._send(stomp, [f"bench.q{n:05d}" for n in range(0, args.queues, 100)])
        driver = _driver()
        base = f"http://127.0.0.1:{http}/console/"
        print(f"{args.queues} addresses and queues, {len(range(0, args.queues, 100))} of them paging; "
              f"{args.rounds} rounds each; target {TARGET_MS:.0f} ms")
        by_name = "#/addresses"
        by_messages = "#/addresses?sort=messages&order=desc"
        filtered = "#/addresses?filter=q0999"
        cases: list[tuple[str, Callable[[], tuple[float, float]]]] = [
            ("overview, cold load", lambda: _cold(driver, base, "#/", "#overview-charts svg")),
            ("addresses by name, cold load",
             lambda: _cold(driver, base, by_name, "#addresses-table tbody tr")),
            ("overview, route change", lambda: _warm(driver, "#/", "#overview-charts svg")),
            ("addresses by name, route change", lambda: _warm(driver, by_name, "#addresses-table tbody tr")),
            ("addresses by messages desc, route change",
             lambda: _warm(driver, by_messages, "#addresses-table tbody tr.paging")),
            ("addresses filtered, route change",
             lambda: _warm(driver, filtered, "#addresses-table tbody tr")),
        ]
        results = [_report(label, [run() for _ in range(args.rounds)]) for label, run in cases]
        rows = driver.find_elements(By.CSS_SELECTOR, "#addresses-table tbody tr")
        print(f"(last table: {len(rows)} rows drawn; {driver.find_element(By.ID, 'range').text})")
        if not all(results):
            raise SystemExit(1)
    finally:
        if driver is not None:
            driver.quit()
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()

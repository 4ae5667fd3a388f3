"""A real headless browser for the console tests: Debian's `chromium` driven by Selenium
through `/usr/bin/chromedriver` (packages `chromium` and `chromium-driver`; `make test`
installs them when run as root). This module holds no tests.

`console_driver()` skips the calling test, saying what to install, when selenium, the
browser or the driver is missing, so the rest of the suite runs on a machine without them.
`Console` wraps a driver pointed at one broker's `/console/` with bounded waits.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brokerproc import HOST, BrokerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 10.0
INSTALL_HINT = ("the console's browser tests need Debian's chromium and chromium-driver "
                "(`apt-get install -y chromium chromium-driver`, or `make test` as root) "
                "and selenium (`pip install -e '.[test]'`)")


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists() and shutil.which(Path(path).name) is None:
            return f"{path} is not installed"
    return None


def console_driver() -> Any:
    """A headless chromium (skips the test, naming what to install, when it cannot run)."""
    missing = _missing()
    if missing is not None:
        pytest.skip(f"{missing}: {INSTALL_HINT}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if Path(CHROMIUM).exists() else str(shutil.which("chromium"))
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    driver_path = CHROMEDRIVER if Path(CHROMEDRIVER).exists() else str(shutil.which("chromedriver"))
    return webdriver.Chrome(service=Service(driver_path), options=options)


class Console:
    """One browser tab on a broker's console."""

    def __init__(self, driver: Any, broker: BrokerProcess) -> None:
        self.driver = driver
        self.broker = broker
        self.base = f"http://{HOST}:{broker.http_port}/console/"

    def open(self, route: str = "") -> None:
        """Load the console at `route` (a hash route such as `queue/<name>`)."""
        self.driver.get(self.base + (f"#/{route}" if route else ""))

    def go(self, route: str) -> None:
        """Change the hash route inside the loaded console."""
        self.driver.execute_script("location.hash = arguments[0];", f"#/{route}")

    def wait(self, condition: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        def guarded(driver: Any) -> Any:
            try:
                return condition(driver)
            except StaleElementReferenceException:
                return False  # redrawn meanwhile: look again

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(guarded)
        except TimeoutException as exc:
            error = self.text_of("#error")
            raise AssertionError(f"timed out waiting for {what}; error banner: {error!r}; "
                                 f"browser log: {self.browser_log()}") from exc

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def element(self, css: str, timeout: float = WAIT) -> Any:
        """The first element matching `css` once it is displayed."""
        return self.wait(lambda _d: next((e for e in self.find_all(css) if e.is_displayed()), None),
                         f"element {css}", timeout)

    def text_of(self, css: str) -> str | None:
        """The text of the first element matching `css` now (None: none, or redrawn while read)."""
        from selenium.common.exceptions import StaleElementReferenceException

        try:
            found = self.find_all(css)
            return str(found[0].get_attribute("textContent")).strip() if found else None
        except StaleElementReferenceException:
            return None

    def wait_text(self, css: str, expected: str, timeout: float = WAIT) -> str:
        """Wait until the text of `css` contains `expected`; returns the text."""
        return self.wait(lambda _d: (text := self.text_of(css)) is not None and expected in text and text,
                         f"{css} to contain {expected!r}", timeout)

    def click(self, css: str) -> None:
        """Click the first displayed element matching `css` (found again if it is redrawn
        between being found and clicked)."""

        def clicked(_driver: Any) -> bool:
            target = next((e for e in self.find_all(css) if e.is_displayed()), None)
            if target is None:
                return False
            target.click()
            return True

        self.wait(clicked, f"{css} to click")

    def texts(self, css: str) -> list[str]:
        """The text of every element matching `css` (waiting for one at least), read in one go
        (again if redrawn meanwhile)."""
        return list(self.wait(lambda _d: [e.text for e in self.find_all(css)], f"texts of {css}"))

    def dialog_open(self, dialog_id: str) -> bool:
        return bool(self.driver.execute_script(
            "const d = document.getElementById(arguments[0]); return d !== null && d.open;", dialog_id))

    def browser_log(self) -> list[str]:
        from selenium.common.exceptions import WebDriverException

        try:
            return [entry["message"] for entry in self.driver.get_log("browser")][-10:]
        except WebDriverException:  # not every driver keeps a log
            return []

    def log_in(self, user: str, password: str) -> None:
        """Fill the console's login form (it must be open)."""
        self.wait(lambda _d: self.dialog_open("login-dialog"), "the login form")
        user_field = self.find("#login-user")
        user_field.clear()
        user_field.send_keys(user)
        self.find("#login-password").send_keys(password)
        self.find("#login-submit").click()
        self.wait(lambda _d: not self.dialog_open("login-dialog"), "the login form to close")

    def confirm(self, fields: dict[str, str] | None = None) -> None:
        """Confirm the open action dialog, filling its fields first."""
        self.wait(lambda _d: self.dialog_open("confirm-dialog"), "the confirmation dialog")
        for name, value in (fields or {}).items():
            self.find(f"#confirm-field-{name}").send_keys(value)
        self.find("#confirm-ok").click()
        self.wait(lambda _d: not self.dialog_open("confirm-dialog"), "the confirmation dialog to close")

    def cancel(self) -> None:
        """Cancel the open action dialog."""
        self.wait(lambda _d: self.dialog_open("confirm-dialog"), "the confirmation dialog")
        self.find("#confirm-cancel").click()
        self.wait(lambda _d: not self.dialog_open("confirm-dialog"), "the confirmation dialog to close")

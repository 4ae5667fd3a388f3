"""Shared helpers for the selector and browser tests (test_selectors*.py, test_browsers*.py).

This module holds no tests. On top of brokerproc and test_paging_helpers: a browse that
collects MESSAGE frames up to the one carrying `browser:end`, pipelined sends where every
message gets its own headers, and a drain that acknowledges as it goes. Every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from brokerproc import StompClient
from test_paging_helpers import KIB, label, labels, send_receipted


def is_browser_end(frame: Any) -> bool:
    return frame.headers.get("browser") == "end"


def browse(client: StompClient, destination: str, selector: str | None = None, *,
           timeout: float = 10.0, settle: float = 0.3) -> list[str]:
    """SUBSCRIBE with browser:true (and `selector`), wait for the `browser:end` MESSAGE.

    Returns the labels of the browsed messages before it. Asserted: exactly one end marker,
    it comes last (nothing after it within `settle`), its body is empty, and no message id
    is seen twice.
    """
    listener = client.listener
    start = len(listener.messages)
    headers: dict[str, Any] = {"browser": "true"}
    if selector is not None:
        headers["selector"] = selector
    client.subscribe(destination, headers=headers)

    def ended() -> bool:
        return any(is_browser_end(f) for f in listener.messages[start:])

    if not listener.wait_quietly(ended, timeout):
        got = listener.messages[start:]
        raise AssertionError(
            f"no browser:end within {timeout}s; {len(got)} messages browsed "
            f"({labels(got)[:10]} ...), errors {[(e.headers, e.body) for e in listener.errors]}"
        )
    time.sleep(settle)
    frames = list(listener.messages[start:])
    ends = [n for n, f in enumerate(frames) if is_browser_end(f)]
    assert len(ends) == 1, f"{len(ends)} browser:end markers"
    assert ends[0] == len(frames) - 1, (
        f"{len(frames) - 1 - ends[0]} messages came after browser:end: {labels(frames[ends[0] + 1:])[:10]}"
    )
    end = frames[-1]
    assert end.body in ("", b""), f"browser:end carries a body: {end.body!r}"
    browsed = frames[:-1]
    ids = [f.headers.get("message-id") for f in browsed]
    assert len(set(ids)) == len(ids), "a browser saw the same message id twice"
    return labels(browsed)


def send_each(client: StompClient, destination: str,
              messages: Iterable[tuple[str, Mapping[str, Any]]], *, size: int = KIB,
              persistent: bool = True, timeout: float = 10.0) -> list[str]:
    """Send (label, headers) pairs with pipelined receipts; wait for all (no ERROR)."""
    prepared = []
    for name, headers in messages:
        hdrs = {k: str(v) for k, v in headers.items()}
        if persistent:
            hdrs["persistent"] = "true"
        prepared.append((name, hdrs))
    send_receipted(client, destination, prepared, size=size, timeout=timeout)
    return [name for name, _ in prepared]


def drain(client: StompClient, destination: str, count: int, *, headers: Mapping[str, Any] | None = None,
          timeout: float = 10.0, settle: float = 0.3) -> list[str]:
    """Subscribe (client-individual), ack every message as it comes, until `count` came;
    then check no more come within `settle`. The labels, in arrival order."""
    listener = client.listener
    start = len(listener.messages)
    hdrs = {"activemq.prefetchSize": 100_000, **(headers or {})}
    client.subscribe(destination, ack="client-individual", headers=hdrs)
    deadline = time.monotonic() + timeout
    for n in range(start, start + count):
        if not listener.wait_quietly(lambda n=n: len(listener.messages) > n,
                                     max(0.0, deadline - time.monotonic())):
            got = labels(listener.messages[start:])
            raise AssertionError(f"timed out after {timeout}s: {len(got)} of {count} messages "
                                 f"({got[:5]} ... {got[-5:]})")
        client.ack(listener.messages[n], receipt=(n == start + count - 1))
    time.sleep(settle)
    extra = labels(listener.messages[start + count:])
    assert not extra, f"expected {count} messages, {len(extra)} more came: {extra[:20]}"
    return labels(listener.messages[start:start + count])


__all__ = ["KIB", "browse", "drain", "is_browser_end", "label", "labels", "send_each"]

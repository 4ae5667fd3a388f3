"""Shared helpers for the paging tests (test_paging*.py); this module holds no tests.

What the paging tests need on top of brokerproc: numbered 1 KiB bodies, pipelined
receipted sends, drains with acknowledgements, address polling, and the page files of an
address as they are on disk (`<data-dir>/paging/<folder>/*.page`, the folder found by its
`address.txt`). Every wait is bounded.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from brokerproc import WAIT, BrokerProcess, StompClient

KIB = 1024
SEP = "|"


# -- bodies -------------------------------------------------------------------------------


def body(label: str, size: int = KIB) -> str:
    """`label|xxxx...` padded to `size` bytes, so a message's label survives in its body."""
    head = f"{label}{SEP}"
    return head + "x" * max(0, size - len(head))


def label(frame: Any) -> str:
    """The label of a MESSAGE frame sent with `body()`."""
    text = frame.body if isinstance(frame.body, str) else frame.body.decode()
    return text.split(SEP, 1)[0]


def labels(frames: Iterable[Any]) -> list[str]:
    return [label(f) for f in frames]


def numbered(prefix: str, count: int, start: int = 0) -> list[str]:
    return [f"{prefix}{n}" for n in range(start, start + count)]


# -- sending ------------------------------------------------------------------------------


def send_all(client: StompClient, destination: str, names: Iterable[str], *, size: int = KIB,
             persistent: bool = True, headers: Mapping[str, Any] | None = None,
             transaction: str | None = None, timeout: float = 10.0) -> list[str]:
    """Send one message per label, receipts pipelined; wait for every receipt (no ERROR)."""
    names = list(names)
    hdrs = {k: str(v) for k, v in (headers or {}).items()}
    if persistent:
        hdrs["persistent"] = "true"
    if transaction is not None:
        hdrs["transaction"] = transaction
    send_receipted(client, destination, [(name, hdrs) for name in names], size=size, timeout=timeout)
    return names


def send_receipted(client: StompClient, destination: str, messages: list[tuple[str, dict[str, str]]],
                   *, size: int, timeout: float) -> None:
    """Send (label, headers) pairs, receipts pipelined; wait for every receipt (no ERROR)."""
    tag = uuid.uuid4().hex[:8]
    receipt_ids = [f"send-{tag}-{n}" for n in range(len(messages))]
    for (name, hdrs), receipt_id in zip(messages, receipt_ids, strict=True):
        client.conn.send(destination, body(name, size), headers={**hdrs, "receipt": receipt_id})
    listener = client.listener
    wanted = set(receipt_ids)
    listener.wait(lambda: wanted <= set(listener.receipts) or bool(listener.errors), timeout,
                  f"{len(messages)} send receipts")
    assert not listener.errors, f"ERROR while sending: {[(e.headers, e.body) for e in listener.errors]}"


def send_until_error(client: StompClient, destination: str, limit: int, *, size: int = KIB,
                     persistent: bool = True, prefix: str = "m") -> tuple[list[str], Any, str]:
    """Send receipted messages one at a time until an ERROR comes (at most `limit`).

    Returns (labels receipted, the ERROR frame, the receipt id of the send it answered).
    """
    listener = client.listener
    receipted: list[str] = []
    for n in range(limit):
        name, receipt_id = f"{prefix}{n}", f"r-{uuid.uuid4().hex[:10]}"
        hdrs = {"receipt": receipt_id, **({"persistent": "true"} if persistent else {})}
        client.conn.send(destination, body(name, size), headers=hdrs)
        listener.wait(lambda rid=receipt_id: rid in listener.receipts or bool(listener.errors),
                      WAIT, f"RECEIPT or ERROR for {name}")
        if listener.errors:
            return receipted, listener.errors[0], receipt_id
        receipted.append(name)
    raise AssertionError(f"no ERROR after {limit} sends to {destination}")


# -- consuming ----------------------------------------------------------------------------


def consume(client: StompClient, destination: str, count: int, *, ack: str = "client-individual",
            headers: Mapping[str, Any] | None = None, timeout: float = 10.0,
            settle: float = 0.3) -> list[str]:
    """Subscribe, take `count` messages, ack them, check no more come; their labels."""
    hdrs = {"activemq.prefetchSize": 100_000, **(headers or {})}
    client.subscribe(destination, ack=ack, headers=hdrs)
    return take(client, count, ack=ack, timeout=timeout, settle=settle)


def take(client: StompClient, count: int, *, ack: str = "client-individual", timeout: float = 10.0,
         settle: float = 0.3) -> list[str]:
    """On a subscribed client: take `count` messages, acking each as it comes (as a real
    consumer does: paged messages are read in only while the unacknowledged ones stay under
    max-read-page-bytes), then check no more come. The last ACK waits for its receipt."""
    listener = client.listener
    deadline = time.monotonic() + timeout
    for n in range(count):
        if not listener.wait_quietly(lambda n=n: len(listener.messages) > n,
                                     max(0.0, deadline - time.monotonic())):
            wait_frames(client, count, 0)  # raises, showing what came
        if ack != "auto":
            client.ack(listener.messages[n], receipt=(n == count - 1))
    time.sleep(settle)
    extra = labels(client.messages[count:])
    assert not extra, f"expected {count} messages, {len(extra)} more came: {extra[:20]}"
    return labels(client.messages[:count])


def wait_frames(client: StompClient, count: int, timeout: float = 10.0) -> list[Any]:
    """The first `count` MESSAGE frames; on timeout the failure shows labels, not 1 KiB bodies."""
    listener = client.listener
    if not listener.wait_quietly(lambda: len(listener.messages) >= count, timeout):
        got = labels(listener.messages)
        errors = [(e.headers, e.body) for e in listener.errors]
        raise AssertionError(
            f"timed out after {timeout}s waiting for {count} messages; got {len(got)}: "
            f"{_summary(got)}; errors {errors}"
        )
    return list(listener.messages[:count])


def _summary(names: list[str], edge: int = 8) -> str:
    if len(names) <= 2 * edge:
        return repr(names)
    return f"{names[:edge]} ... {names[-edge:]}"


def ack_frames(client: StompClient, frames: list[Any], ack: str = "client-individual") -> None:
    """Acknowledge frames (client-individual: each; client: the last), the last with a receipt."""
    if not frames or ack == "auto":
        return
    if ack == "client":
        client.ack(frames[-1], receipt=True)
        return
    for frame in frames[:-1]:
        client.ack(frame)
    client.ack(frames[-1], receipt=True)


def nack_all(client: StompClient, destination: str, count: int) -> None:
    """Subscribe, NACK the first `count` messages (each receipted) and disconnect: under
    `max-delivery-attempts = 1` they go to the dead-letter address."""
    client.subscribe(destination, ack="client-individual")
    for frame in wait_frames(client, count):
        client.nack(frame, receipt=True)
    client.disconnect()


# -- HTTP ---------------------------------------------------------------------------------


def wait_address(proc: BrokerProcess, name: str, timeout: float = WAIT, **expected: Any) -> dict[str, Any]:
    """Poll an address until every given field has the expected value; returns the address."""
    return proc.wait_api(f"/api/addresses/{name}", f"address {name}", timeout, expected,
                         shown=("paging", "messages"))


# -- disk ---------------------------------------------------------------------------------


def paging_dir(proc: BrokerProcess) -> Path:
    return proc.data_dir / "paging"


def page_folder(proc: BrokerProcess, address: str) -> Path | None:
    """The folder under the paging directory whose address.txt names `address`."""
    root = paging_dir(proc)
    if not root.is_dir():
        return None
    for folder in root.iterdir():
        marker = folder / "address.txt"
        if folder.is_dir() and marker.is_file() and marker.read_text("utf-8").strip() == address:
            return folder
    return None


def _page_key(path: Path) -> tuple[int, str]:
    digits = re.findall(r"\d+", path.stem)
    return (int(digits[-1]) if digits else -1, path.name)


def page_files(proc: BrokerProcess, address: str) -> list[Path]:
    """The *.page files of `address` on disk now, in page order."""
    folder = page_folder(proc, address)
    if folder is None:
        return []
    return sorted(folder.glob("*.page"), key=_page_key)


def wait_no_page_files(proc: BrokerProcess, address: str, timeout: float = 10.0) -> None:
    """Wait until no *.page file of `address` is on disk and HTTP page_files is 0."""
    deadline = time.monotonic() + timeout
    while True:
        on_disk = [p.name for p in page_files(proc, address)]
        info = proc.address(address)
        if not on_disk and info["page_files"] == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"address {address}: page files still there after {timeout}s: on disk {on_disk}, "
                f"HTTP page_files {info['page_files']}, paging {info['paging']}, "
                f"messages {info['messages']}"
            )
        time.sleep(0.05)


def assert_paging(proc: BrokerProcess, address: str, paged: int | None = None) -> dict[str, Any]:
    """The address pages now: HTTP paging true, page_files > 0, *.page files on disk."""
    info = proc.address(address)
    assert info["paging"] is True, f"address {address} not paging: {info}"
    if paged is not None:
        assert info["messages_paged"] == paged, f"messages_paged {info['messages_paged']}, expected {paged}"
    else:
        assert info["messages_paged"] > 0, f"nothing paged: {info}"
    files = page_files(proc, address)
    assert files, f"no *.page file on disk for {address} (folder {page_folder(proc, address)})"
    assert info["page_files"] == len(files), f"HTTP page_files {info['page_files']}, on disk {files}"
    return info


def durable(connect: Callable[..., StompClient], proc: BrokerProcess, client_id: str, topic: str,
            sub_name: str, *, selector: str | None = None, ack: str = "client-individual") -> StompClient:
    """A connection (from the `stomp_client` fixture) holding a durable subscription to a topic."""
    client = connect(proc, client_id=client_id)
    hdrs: dict[str, Any] = {"durable-subscription-name": sub_name, "activemq.prefetchSize": 100_000}
    if selector is not None:
        hdrs["selector"] = selector
    client.subscribe(f"/topic/{topic}", ack=ack, headers=hdrs)
    return client

"""HTTP calls for the management-action tests (test_admin_*.py); this module holds no tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from brokerproc import HOST, WAIT, BrokerProcess


def path_of(kind: str, name: str, action: str = "") -> str:
    """`/api/{kind}/{name}[/action]` with the name URL-encoded ('/', '#' and spaces too)."""
    encoded = urllib.parse.quote(name, safe="")
    return f"/api/{kind}/{encoded}" + (f"/{action}" if action else "")


def call(proc: BrokerProcess, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
         timeout: float = WAIT) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON, headers) of one request to the broker's HTTP acceptor."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(f"http://{HOST}:{proc.http_port}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            status, headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            text = exc.read().decode()
            status, headers = exc.code, dict(exc.headers)
    return status, (json.loads(text) if text else None), headers


def ok(proc: BrokerProcess, method: str, path: str, body: Any = None, timeout: float = WAIT) -> Any:
    status, answer, _ = call(proc, method, path, body, timeout=timeout)
    assert status == 200, f"{method} {path} -> {status} {answer}"
    return answer


def browse(proc: BrokerProcess, queue: str, **params: Any) -> dict[str, Any]:
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    return ok(proc, "GET", path_of("queues", queue, "messages") + (f"?{query}" if query else ""))

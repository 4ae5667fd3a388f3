"""`pagemq queue list|purge|delete|move|retry`: queue management over the HTTP API, as
`artemis queue stat|purge|delete` and `artemis queue move`... do over Artemis' management.

A thin client of docs/http-api.md (urllib, no aiohttp: the command starts fast and needs no
broker code): every command is one request to the broker at `--url`. Exit 0 on success, 1
when the broker answered an error (printed as `pagemq: <error>`) or cannot be reached.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8161"
TIMEOUT = 300.0  # a purge or move of millions of messages answers once it is durable
EXIT_FAILED = 1

_COLUMNS = (
    ("NAME", "name"), ("ADDRESS", "address"), ("TYPE", "routing_type"), ("CONSUMERS", "consumers"),
    ("MESSAGES", "messages"), ("PAGED", "messages_paged"), ("DELIVERING", "messages_delivering"),
    ("ADDED", "messages_added"), ("ACKED", "messages_acknowledged"), ("KILLED", "messages_killed"),
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queue = commands.add_parser("queue", help="list and act on queues of a running broker (HTTP API)")
    actions = queue.add_subparsers(dest="queue_command", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("--url", default=DEFAULT_URL,
                            help=f"the broker's HTTP API (default {DEFAULT_URL})")
        parser.add_argument("--user", help="HTTP Basic user, when security is enabled")
        parser.add_argument("--password", help="HTTP Basic password")
        parser.add_argument("--json", action="store_true", help="print the API's JSON answer")
        return parser

    listing = action("list", "queues with their counts (as `artemis queue stat`)")
    listing.add_argument("--filter", default="", help="only names containing this text")
    listing.add_argument("--sort", default="name", help="a field to sort by (default name)")
    listing.add_argument("--desc", action="store_true", help="descending order")
    listing.add_argument("--offset", type=int, default=0)
    listing.add_argument("--limit", type=int, default=None)
    for name, help_text in (("purge", "remove every message not being delivered"),
                            ("delete", "delete the queue with its messages"),
                            ("retry", "send dead letters back to their original-destination")):
        action(name, help_text).add_argument("name", help="the queue")
    move = action("move", "move messages to another address, in order")
    move.add_argument("name", help="the queue")
    move.add_argument("--to", required=True, help="the address to move them to")
    move.add_argument("--selector", help="only messages matching this selector")


class ApiError(Exception):
    pass


def _request(args: argparse.Namespace, method: str, path: str, body: object = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(args.url.rstrip("/") + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if args.user is not None:
        token = base64.b64encode(f"{args.user}:{args.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        with exc:
            text = exc.read().decode(errors="replace")
        try:
            message = json.loads(text).get("error", text)
        except (ValueError, AttributeError):
            message = text.strip() or exc.reason
        raise ApiError(f"{method} {path}: {exc.code} {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiError(f"cannot reach the broker at {args.url}: {reason}") from None


def _queue_path(name: str, action: str = "") -> str:
    return "/api/queues/" + urllib.parse.quote(name, safe="") + (f"/{action}" if action else "")


def _table(queues: list[dict[str, Any]]) -> str:
    rows = [[h for h, _ in _COLUMNS]] + [[str(q.get(k, "")) for _, k in _COLUMNS] for q in queues]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def run(args: argparse.Namespace) -> int:
    command = args.queue_command
    try:
        if command == "list":
            query = {"filter": args.filter, "sort": args.sort, "order": "desc" if args.desc else "asc",
                     "offset": args.offset}
            if args.limit is not None:
                query["limit"] = args.limit
            answer = _request(args, "GET", "/api/queues?" + urllib.parse.urlencode(query))
            text = _table(answer["queues"]) + f"\n{len(answer['queues'])} of {answer['total']} queue(s)"
        elif command == "purge":
            answer = _request(args, "POST", _queue_path(args.name, "purge"))
            text = f"queue {args.name}: {answer['purged']} message(s) purged"
        elif command == "delete":
            answer = _request(args, "DELETE", _queue_path(args.name))
            text = f"queue {args.name} deleted"
        elif command == "move":
            body = {"to": args.to} | ({"selector": args.selector} if args.selector else {})
            answer = _request(args, "POST", _queue_path(args.name, "move"), body)
            text = f"queue {args.name}: {answer['moved']} message(s) moved to {args.to}"
        else:
            answer = _request(args, "POST", _queue_path(args.name, "retry"))
            text = f"queue {args.name}: {answer['retried']} message(s) sent back to where they came from"
    except ApiError as exc:
        print(f"pagemq: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(answer, indent=2) if args.json else text)
    return 0

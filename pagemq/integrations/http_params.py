"""Query parameters of the HTTP API, read one way by every module that serves it: a value
the API cannot use is a `BadRequest` (a 400 with its message), never a 500."""

from __future__ import annotations

from aiohttp import web

__all__ = ["BadRequest", "int_param"]


class BadRequest(Exception):
    """A parameter or body the API cannot use: 400 with its message."""


def int_param(request: web.Request, name: str, default: int | None = None, *,
              maximum: int | None = None) -> int | None:
    """A non-negative integer query parameter (`default` when absent or empty)."""
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name}: not an integer: {text!r}") from None
    if value < 0:
        raise BadRequest(f"{name}: must be zero or more, got {value}")
    if maximum is not None and value > maximum:
        raise BadRequest(f"{name}: at most {maximum}, got {value}")
    return value

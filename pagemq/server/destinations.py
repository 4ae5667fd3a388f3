"""STOMP destination names and what they mean to the broker.

`/queue/NAME` is the anycast address NAME (its queue is NAME too), `/topic/NAME` the
multicast address NAME, and a bare `NAME` means `/queue/NAME` (docs/stomp.md). Any of them
may name `ADDRESS::QUEUE` instead, Artemis' fully qualified queue name: the queue QUEUE of
the address ADDRESS, which a SUBSCRIBE reads (a configured queue of a multicast address).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pagemq.core.address import ANYCAST, MULTICAST
from pagemq.core.errors import InvalidDestination

_PREFIXES = (("/queue/", ANYCAST), ("/topic/", MULTICAST))


FQQN_SEPARATOR = "::"


@dataclass(frozen=True, slots=True)
class Destination:
    address: str
    routing_type: str
    queue: str | None = None
    """The queue of `ADDRESS::QUEUE` (or the one a `/queue/NAME` SUBSCRIBE found by name)."""


@functools.lru_cache(maxsize=4096)
def parse_destination(text: str) -> Destination:
    """Cached: producers send to the same few destinations over and over."""
    found = next(((p, r) for p, r in _PREFIXES if text.startswith(p)), None)
    if found is not None:
        name, routing_type = text[len(found[0]):], found[1]
    elif text.startswith("/"):
        raise InvalidDestination(
            f"destination {text!r} is not understood: use /queue/NAME, /topic/NAME or NAME"
        )
    else:
        name, routing_type = text, ANYCAST
    if not name.strip():
        raise InvalidDestination(f"destination {text!r} names no address")
    if FQQN_SEPARATOR in name:
        address, _, queue = name.partition(FQQN_SEPARATOR)
        if not address.strip() or not queue.strip():
            raise InvalidDestination(
                f"destination {text!r}: a fully qualified queue name is ADDRESS::QUEUE, both named")
        return Destination(address, routing_type, queue)
    return Destination(name, routing_type)


def format_destination(address: str, routing_type: str) -> str:
    return f"/topic/{address}" if routing_type == MULTICAST else f"/queue/{address}"

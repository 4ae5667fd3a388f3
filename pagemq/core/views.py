"""What the management API shows of addresses and queues: plain dicts of counts, built from
the live objects on demand (nothing is kept up to date for them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagemq.core.errors import NotFound

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pagemq.core.bindings import Bindings
    from pagemq.core.stream_reader import StreamReader


def address_info(bindings: Bindings, name: str) -> dict[str, object]:
    address = bindings.addresses.get(name)
    if address is None:
        raise NotFound(f"no address named {name!r}")
    return {
        "name": address.name,
        "routing_type": address.routing_type,
        "queues": sorted(address.queues),
        **address_figures(bindings, name),
        "settings": address.settings.to_config_dict(),
    }


def address_figures(bindings: Bindings, name: str) -> dict[str, int | bool]:
    """The counts of `address_info` alone (what /metrics shows, for every address at once:
    no settings table or sorted queue list built per scrape)."""
    address = bindings.addresses.get(name)
    if address is None:
        raise NotFound(f"no address named {name!r}")
    pager = bindings.pagers.get(name)
    paged = pager.messages_paged if pager is not None else 0
    messages = sum(q.pending + q.delivering for q in address.queues.values()) + paged
    return {
        "paging": address.paging,
        "messages": messages,
        "messages_in_memory": address.messages_in_memory,
        "messages_paged": paged,
        "bytes_in_memory": address.bytes_in_memory,
        "page_files": pager.page_files() if pager is not None else 0,
        "dropped_messages": address.dropped_messages,
    }


def queue_info(bindings: Bindings, name: str) -> dict[str, object]:
    queue = bindings.queues.get(name)
    if queue is None:
        raise NotFound(f"no queue named {name!r}")
    delivering = queue.delivering
    counters = queue.counters
    paged = queue.cursor.unread if queue.cursor is not None else 0
    return {
        "name": queue.name,
        "address": queue.address_name,
        "routing_type": queue.routing_type,
        "filter": queue.filter_text,
        "durable": queue.durable,
        "messages": queue.pending + delivering + paged,
        "messages_in_memory": queue.pending + delivering,
        "messages_paged": paged,
        "messages_delivering": delivering,
        "consumers": len(queue.consumers),
        "messages_added": counters.added,
        "messages_acknowledged": counters.acknowledged,
        "messages_expired": counters.expired,
        "messages_killed": counters.killed,
        "stream_readers": stream_readers(queue.stream_readers.values(), queue.pending + paged),
    }


def stream_readers(readers: Iterable[StreamReader], waiting: int) -> list[dict[str, object]]:
    """Each streaming reader's lag (core.stream): its committed offset and, as Kafka's
    offsets-behind-latest, the messages waiting in the queue (pending and paged: everything
    above the committed offset, as a commit acknowledges everything below it)."""
    return [{"name": reader.name, "committed_offset": reader.committed, "last_read_offset": reader.last_read,
             "offsets_behind_latest": waiting} for reader in sorted(readers, key=lambda r: r.name)]

"""What the management API shows of addresses and queues: plain dicts of counts, built from
the live objects on demand (nothing is kept up to date for them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagemq.core.errors import NotFound

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pagemq.core.address import Address
    from pagemq.core.bindings import Bindings
    from pagemq.core.disk import DiskGuard
    from pagemq.core.memory import MemoryAccountant
    from pagemq.core.paging import AddressPager
    from pagemq.core.stream_reader import StreamReader
    from pagemq.storage.paging.queue_store import PageView


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
        "limits": address_limits(address, bindings.pagers.get(name)),
    }


def address_limits(address: Address, pager: AddressPager | None) -> dict[str, object]:
    """Each limit of an address beside what it holds against it, and the policy applied
    when it is reached (-1: no limit)."""
    settings = address.settings
    return {
        "memory": {
            "max_size_bytes": settings.max_size_bytes,
            "max_size_messages": settings.max_size_messages,
            "used_bytes": address.bytes_in_memory,
            "used_messages": address.messages_in_memory,
            "address_full_policy": settings.address_full_policy,
        },
        "paging": {
            "page_limit_bytes": settings.page_limit_bytes,
            "page_limit_messages": settings.page_limit_messages,
            "used_bytes": pager.bytes_held if pager is not None else 0,
            "used_messages": pager.records_held if pager is not None else 0,
            "page_full_policy": settings.page_full_policy,
        },
    }


def memory_info(memory: MemoryAccountant) -> dict[str, object]:
    """The one memory budget: `global-max-size` / `global-max-messages` and their use."""
    limit = memory.max_bytes
    return {
        "global_max_size": limit,
        "global_max_messages": memory.max_messages,
        "used_bytes": memory.used_bytes,
        "used_messages": memory.used_messages,
        "used_percent": round(100.0 * memory.used_bytes / limit, 2) if limit > 0 else None,
        "pending_transactional_bytes": memory.staged_bytes,
        "read_back_bytes": memory.depaged_bytes,  # read back from page files (in used_bytes)
        "read_back_messages": memory.depaged_messages,  # in used_messages, not in global-max-messages
        "page_readers": memory.readers,  # page cursors sharing the budget for that
        **memory.parts,  # held besides messages, in used_bytes (core/memory.py PARTS)
        "counted": {name: {"entries": (n := entries()), "estimated_bytes": n * per_entry}
                    for name, (entries, per_entry) in sorted(memory.counted.items())},
    }


def disk_info(disk: DiskGuard) -> dict[str, object]:
    """The disk limits, each filesystem's use at the last scan, and whether producers are
    held back now (`disk_full`) and why."""
    return disk.view()


def address_figures(bindings: Bindings, name: str) -> dict[str, int | bool]:
    """The counts of `address_info` alone (what /metrics shows, for every address at once:
    no settings table or sorted queue list built per scrape)."""
    address = bindings.addresses.get(name)
    if address is None:
        raise NotFound(f"no address named {name!r}")
    pager = bindings.pagers.get(name)
    paged = pager.messages_paged if pager is not None else 0
    in_memory = sum(q.pending + q.delivering for q in address.queues.values())
    return {
        "paging": address.paging,
        "messages": in_memory + paged,
        # one per copy, as `messages` and `messages_paged` (not the memory budget's count of
        # distinct messages, `address.messages_in_memory`, which a multicast copy shares)
        "messages_in_memory": in_memory,
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
    offsets-behind-latest, the messages waiting in the queue (pending and paged). That is
    everything above the committed offset for a reader with the queue to itself and no
    selector (a commit acknowledges everything below it); messages a reader's selector or a
    STOMP consumer left below the offset are counted too (docs/spark.md, "Lag")."""
    return [{"name": reader.name, "committed_offset": reader.committed, "last_read_offset": reader.last_read,
             "offsets_behind_latest": waiting} for reader in sorted(readers, key=lambda r: r.name)]


def broker_totals(bindings: Bindings) -> dict[str, int]:
    """Broker-wide sums: messages added to and acknowledged from every queue since start,
    deleted queues included (Artemis' `TotalMessagesAdded` / `TotalMessagesAcknowledged`;
    one copy per queue, as the per-queue counters count them), and the addresses paging with
    the bytes of their page files. A pass over the queues: for a sampler every few seconds,
    not for every request."""
    added = bindings.retired_added
    acknowledged = bindings.retired_acknowledged
    for queue in bindings.queues.values():
        counters = queue.counters
        added += counters.added
        acknowledged += counters.acknowledged
    paging = sum(1 for address in bindings.addresses.values() if address.paging)
    page_bytes = sum(pager.bytes_on_disk for pager in bindings.pagers.values())
    return {"messages_added": added, "messages_acknowledged": acknowledged,
            "paging_addresses": paging, "page_bytes": page_bytes}


def queue_pages(bindings: Bindings, name: str) -> dict[str, object]:
    """The page files a queue still holds, in order, each with its range of message ids and
    the queue's share of it (records for it, of those acknowledged)."""
    queue = bindings.queues.get(name)
    if queue is None:
        raise NotFound(f"no queue named {name!r}")
    pager = bindings.pagers.get(queue.address_name)
    views = pager.store.page_views(queue.queue_id) if pager is not None else []
    return {"queue": name, "address": queue.address_name, "pages": [_page(view) for view in views]}


def address_pages(bindings: Bindings, name: str) -> dict[str, object]:
    """Every page file of an address, in order, with how many queues still hold each."""
    if name not in bindings.addresses:
        raise NotFound(f"no address named {name!r}")
    pager = bindings.pagers.get(name)
    views = pager.store.page_views() if pager is not None else []
    return {"address": name, "pages": [_page(view) for view in views]}


def _page(view: PageView) -> dict[str, object]:
    page: dict[str, object] = {
        "page": view.page_no, "file": view.file, "first_id": view.first_id, "last_id": view.last_id,
        "records": view.records, "bytes": view.size, "live": view.live,
        "queues_holding": view.queues_holding,
    }
    if view.queue_records is not None:
        page["queue_records"] = view.queue_records
        page["queue_acknowledged"] = view.queue_acknowledged
    return page

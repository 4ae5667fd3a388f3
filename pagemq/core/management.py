"""The management address `activemq.management`: Artemis' request/reply management API.

A client sends a message to the management address with `_AMQ_ResourceName` (`broker`,
`queue.NAME`, `address.NAME`) and either `_AMQ_Attribute` (`messageCount`) or
`_AMQ_OperationName` (`countMessages`) with its parameters as a JSON array in the body; the
answer goes to the request's reply-to destination, its body a JSON array holding the result
(`[42]`, Artemis' `ManagementHelper.storeResult`) and its header `_AMQ_OperationSucceeded`
`true`, or `false` with the error text as the result. Names are Artemis' (`QueueControl`,
`AddressControl`, `ActiveMQServerControl` getters without `get`/`is`), so a script written
for Artemis works unchanged; the answers come from the management views the HTTP API shows
(`core/views.py`), nothing else.

Requests are answered, never stored: they are not paged, blocked or dropped and count
toward no limit. Read-only: no operation here changes the broker.

Loop-only: every function runs on the event loop thread.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from pagemq.core.errors import BrokerError
from pagemq.core.selector import Selector, compile_filter
from pagemq.core.selector.properties import message_view
from pagemq.core.views import address_info, disk_info, memory_info, queue_info

if TYPE_CHECKING:
    from pagemq.core.broker import Broker
    from pagemq.core.consumer import MessageRef
    from pagemq.core.queue import Queue

__all__ = [
    "ATTRIBUTE", "MANAGEMENT_ADDRESS", "OPERATION", "OPERATION_SUCCEEDED", "RESOURCE_NAME",
    "ManagementError", "answer",
]

MANAGEMENT_ADDRESS = "activemq.management"
RESOURCE_NAME = "_AMQ_ResourceName"
ATTRIBUTE = "_AMQ_Attribute"
OPERATION = "_AMQ_OperationName"
OPERATION_SUCCEEDED = "_AMQ_OperationSucceeded"

Info = Mapping[str, object]


class ManagementError(BrokerError):
    code = "management-error"
    http_status = 400


def _field(name: str) -> Callable[[Info], object]:
    return lambda info: info[name]


def _upper(name: str) -> Callable[[Info], object]:
    return lambda info: str(info[name]).upper()


def _percent_of(used: Callable[[Info], int], limit: Callable[[Info], int]) -> Callable[[Info], object]:
    def percent(info: Info) -> object:
        top = limit(info)
        return int(100 * used(info) / top) if top > 0 else 0
    return percent


def _memory_limits(info: Info) -> Mapping[str, int]:
    limits = info["limits"]
    assert isinstance(limits, Mapping)
    memory = limits["memory"]
    assert isinstance(memory, Mapping)
    return memory


QUEUE_ATTRIBUTES: dict[str, Callable[[Info], object]] = {
    "name": _field("name"),
    "address": _field("address"),
    "filter": _field("filter"),
    "durable": _field("durable"),
    "routingType": _upper("routing_type"),
    "messageCount": _field("messages"),
    "consumerCount": _field("consumers"),
    "deliveringCount": _field("messages_delivering"),
    "messagesAdded": _field("messages_added"),
    "messagesAcknowledged": _field("messages_acknowledged"),
    "messagesExpired": _field("messages_expired"),
    "messagesKilled": _field("messages_killed"),
    "messagesPaged": _field("messages_paged"),
    "messagesInMemory": _field("messages_in_memory"),
    "scheduledCount": lambda _info: 0,
    "paused": lambda _info: False,
    "temporary": lambda info: not info["durable"],
}
ADDRESS_ATTRIBUTES: dict[str, Callable[[Info], object]] = {
    "address": _field("name"),
    "name": _field("name"),
    "routingTypes": lambda info: [str(info["routing_type"]).upper()],
    "queueNames": _field("queues"),
    "allQueueNames": _field("queues"),
    "bindingNames": _field("queues"),
    "messageCount": _field("messages"),
    "numberOfMessages": _field("messages"),
    "addressSize": _field("bytes_in_memory"),
    "paging": _field("paging"),
    "numberOfPages": _field("page_files"),
    "numberOfBytesPerPage": lambda info: _settings(info)["page-size-bytes"],
    "maxPageReadBytes": lambda info: _settings(info)["max-read-page-bytes"],
    "maxPageReadMessages": lambda info: _settings(info)["max-read-page-messages"],
    "prefetchPageBytes": lambda info: _settings(info)["prefetch-page-bytes"],
    "prefetchPageMessages": lambda info: _settings(info)["prefetch-page-messages"],
    "addressLimitPercent": _percent_of(lambda info: int(_memory_limits(info)["used_bytes"]),
                                       lambda info: int(_memory_limits(info)["max_size_bytes"])),
    "droppedMessages": _field("dropped_messages"),
    "messagesPaged": _field("messages_paged"),
}


def _settings(info: Info) -> Mapping[str, object]:
    settings = info["settings"]
    assert isinstance(settings, Mapping)
    return settings


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _attribute_name(name: str) -> str:
    """`isPaging` / `getMessageCount` name the attributes `paging` / `messageCount` (the
    getter's name, which Artemis also accepts as an operation)."""
    for prefix in ("get", "is"):
        rest = name[len(prefix):]
        if name.startswith(prefix) and rest[:1].isupper():
            return rest[0].lower() + rest[1:]
    return name


class _Resource:
    """One managed resource: its attributes (name -> value) and its operations."""

    def __init__(self, name: str, attributes: Callable[[str], object],
                 operations: Mapping[str, Callable[..., object]]) -> None:
        self.name = name
        self.attribute = attributes
        self.operations = operations

    def invoke(self, operation: str, params: list[object]) -> object:
        found = self.operations.get(operation)
        if found is not None:
            if not _takes(found, len(params)):
                raise ManagementError(
                    f"No operation {operation} with {len(params)} parameters on {self.name}")
            try:
                return found(*params)
            except (TypeError, ValueError, AttributeError) as exc:  # parameters of the wrong type
                raise ManagementError(f"{operation}: bad parameters {params!r}: {exc}") from None
        attribute = _attribute_name(operation)
        if attribute != operation and not params:
            return self.attribute(attribute)
        raise ManagementError(f"No operation {operation} with {len(params)} parameters on {self.name}")


def _takes(operation: Callable[..., object], count: int) -> bool:
    """Whether `operation` can be called with `count` positional parameters."""
    try:
        inspect.signature(operation).bind(*range(count))
    except TypeError:
        return False
    return True


def _lookup(table: Mapping[str, Callable[[Info], object]], info: Callable[[], Info],
            resource: str) -> Callable[[str], object]:
    def attribute(name: str) -> object:
        getter = table.get(_attribute_name(name))
        if getter is None:
            raise ManagementError(f"No getter method for {name} on {resource}")
        return getter(info())
    return attribute


def _matching(refs: Iterator[MessageRef], selector: Selector | None) -> int:
    if selector is None:
        return sum(1 for _ in refs)
    return sum(1 for ref in refs if selector.matches_headers(message_view(ref.message)))


def _in_memory(queue: Queue) -> list[MessageRef]:
    """The queue's messages held in memory: delivering, pending and held back (claimed-ahead
    paged ones are counted with the page files, at their place)."""
    cursor = queue.cursor
    refs = [ref for consumer in queue.consumers for ref in consumer.in_flight.values()]
    refs += [*queue, *queue.held]
    return [ref for ref in refs if not cursor.is_ahead(ref)] if cursor is not None else refs


def _queue_resource(broker: Broker, name: str, resource: str) -> _Resource:
    queue = broker.queues.get(name)
    if queue is None:
        raise ManagementError(f"Cannot find resource with name {resource}")

    def count_messages(filter_text: str | None = None) -> int:
        """Messages not yet acknowledged, matching `filter_text`: a filtered count reads the
        queue's page files (selector summaries skip pages that cannot match)."""
        selector = compile_filter(filter_text)
        if selector is None:
            return _int(info()["messages"])
        paged = queue.cursor.browse(selector) if queue.cursor is not None else iter(())
        return _matching(iter(_in_memory(queue)), selector) + _matching(paged, None)

    def count_delivering(filter_text: str | None = None) -> int:
        refs = (ref for consumer in queue.consumers for ref in consumer.in_flight.values())
        return _matching(refs, compile_filter(filter_text))

    def info() -> Info:
        return queue_info(broker.bindings, name)

    return _Resource(resource, _lookup(QUEUE_ATTRIBUTES, info, resource), {
        "countMessages": count_messages,
        "countDeliveringMessages": count_delivering,
    })


def _address_resource(broker: Broker, name: str, resource: str) -> _Resource:
    if name not in broker.addresses:
        raise ManagementError(f"Cannot find resource with name {resource}")

    def info() -> Info:
        return address_info(broker.bindings, name)

    return _Resource(resource, _lookup(ADDRESS_ATTRIBUTES, info, resource), {
        "getQueueNames": lambda: info()["queues"],
        "getRoutingTypes": lambda: [str(info()["routing_type"]).upper()],
    })


def _version() -> str:
    try:
        return importlib.metadata.version("pagemq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _broker_attributes(broker: Broker) -> dict[str, Callable[[], object]]:
    def queues() -> list[Info]:
        return [queue_info(broker.bindings, name) for name in sorted(broker.queues)]

    def total(field: str) -> int:
        return sum(_int(info[field]) for info in queues())

    def memory(field: str) -> object:
        return memory_info(broker.memory)[field]

    def disk_usage() -> float:
        filesystems = disk_info(broker.disk)["filesystems"]
        used = [float(fs["used_percent"]) for fs in filesystems] if isinstance(filesystems, list) else []
        return max(used, default=0.0) / 100.0

    return {
        "name": lambda: "pagemq",
        "version": _version,
        "started": lambda: True,
        "addressNames": lambda: sorted(broker.addresses),
        "queueNames": lambda: sorted(broker.queues),
        "globalMaxSize": lambda: memory("global_max_size"),
        "globalMaxMessages": lambda: memory("global_max_messages"),
        "addressMemoryUsage": lambda: memory("used_bytes"),
        "addressMemoryUsagePercentage": lambda: _int(memory("used_percent") or 0),
        "totalMessageCount": lambda: total("messages"),
        "totalConsumerCount": lambda: total("consumers"),
        "totalMessagesAdded": lambda: total("messages_added"),
        "totalMessagesAcknowledged": lambda: total("messages_acknowledged"),
        "maxDiskUsage": lambda: disk_info(broker.disk).get("max_disk_usage", -1),
        "minDiskFree": lambda: disk_info(broker.disk).get("min_disk_free", -1),
        "diskStoreUsage": disk_usage,
        "diskFull": lambda: broker.disk.full,
        "diskFullPolicy": lambda: broker.disk.policy,
    }


def _broker_resource(broker: Broker) -> _Resource:
    table = _broker_attributes(broker)

    def attribute(name: str) -> object:
        getter = table.get(_attribute_name(name))
        if getter is None:
            raise ManagementError(f"No getter method for {name} on broker")
        return getter()

    def queue_names(routing_type: str | None = None) -> list[str]:
        wanted = routing_type.lower() if routing_type else None
        return sorted(name for name, queue in broker.queues.items()
                      if wanted is None or queue.routing_type == wanted)

    return _Resource("broker", attribute, {
        "getQueueNames": queue_names,
        "getAddressNames": lambda: sorted(broker.addresses),
        "getAddressInfo": lambda name: json.dumps(address_info(broker.bindings, str(name))),
        "getQueueInfo": lambda name: json.dumps(queue_info(broker.bindings, str(name))),
    })


def _resource(broker: Broker, resource: str) -> _Resource:
    if resource == "broker":
        return _broker_resource(broker)
    kind, _, name = resource.partition(".")
    if kind == "queue" and name:
        return _queue_resource(broker, name, resource)
    if kind == "address" and name:
        return _address_resource(broker, name, resource)
    raise ManagementError(f"Cannot find resource with name {resource}")


def _parameters(body: bytes) -> list[object]:
    """The body: a JSON array of parameters (Artemis writes `null` or nothing for none)."""
    text = body.decode("utf-8", "replace").strip().strip("\x00")
    try:
        params = json.loads(text) if text else None
    except ValueError as exc:
        raise ManagementError(f"operation parameters are not a JSON array: {exc}") from None
    except RecursionError:  # arrays nested thousands deep: refused, never an internal error
        raise ManagementError("operation parameters are nested too deeply") from None
    if params is None or isinstance(params, list):
        return params or []
    raise ManagementError("operation parameters must be a JSON array")


def answer(broker: Broker, headers: Mapping[str, str], body: bytes) -> tuple[bool, str]:
    """(succeeded, reply body): the body a JSON array of one item, the result or, when the
    request failed, the error text (as Artemis replies)."""
    try:
        resource_name = headers.get(RESOURCE_NAME)
        if not resource_name:
            raise ManagementError(f"a management request needs the {RESOURCE_NAME} header")
        resource = _resource(broker, resource_name)
        operation = headers.get(OPERATION)
        if operation:
            result = resource.invoke(operation, _parameters(body))
        else:
            attribute = headers.get(ATTRIBUTE)
            if not attribute:
                raise ManagementError(f"a management request needs {ATTRIBUTE} or {OPERATION}")
            result = resource.attribute(attribute)
    except BrokerError as exc:
        return False, json.dumps([exc.message])
    return True, json.dumps([result])

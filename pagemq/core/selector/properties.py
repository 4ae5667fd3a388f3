"""What a selector sees of a broker message: its headers plus the JMS header names.

The view is built per message per evaluation, so it is two slots and no copying; values are
looked up only when the selector asks for them. The JMS names are answered from the message
itself and win over a same-named STOMP header, so a producer cannot spoof `JMSPriority`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pagemq.core.message import Message


def _message_id(message: Message) -> str:
    return message.headers.get("message-id") or str(message.message_id)


def _delivery_mode(message: Message) -> str:
    return "PERSISTENT" if message.persistent else "NON_PERSISTENT"


JMS_NAMES: Final[dict[str, Callable[[Message], object]]] = {
    "JMSPriority": lambda m: m.priority,
    "JMSTimestamp": lambda m: m.timestamp,
    "JMSMessageID": _message_id,
    "JMSCorrelationID": lambda m: m.headers.get("correlation-id"),
    "JMSType": lambda m: m.headers.get("type"),
    "JMSDeliveryMode": _delivery_mode,
    "JMSExpiration": lambda m: m.expiration,
}


class MessageView(Mapping[str, object]):
    """A read-only mapping over one message: STOMP headers (str) and JMS names (int or str).

    A JMS name whose value is absent (no `correlation-id` header, say) is not in the mapping,
    so the selector sees NULL.
    """

    __slots__ = ("_headers", "_message")

    def __init__(self, message: Message) -> None:
        self._message = message
        self._headers = message.headers

    def get(self, key: str, default: object = None) -> object:
        # The hot path: a selector calls get() once per property it names.
        jms = JMS_NAMES.get(key)
        if jms is None:
            return self._headers.get(key, default)
        value = jms(self._message)
        return default if value is None else value

    def __getitem__(self, key: str) -> object:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        for name in self._headers:
            if name not in JMS_NAMES:
                yield name
        for name, read in JMS_NAMES.items():
            if read(self._message) is not None:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __repr__(self) -> str:
        return f"MessageView({dict(self)!r})"


def message_view(message: Message) -> Mapping[str, object]:
    """The selector's view of `message` (see `MessageView`); cheap enough to build per call."""
    return MessageView(message)

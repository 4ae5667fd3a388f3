"""Per-page property summaries, so a selective consumer can skip page files it cannot match.

For every property name seen in a page: how many messages carry it, its distinct values while
there are at most `MAX_DISTINCT`, and the range of its numeric values. `Selector.may_match`
reads these (see `prune`). A summary is folded message by message as the page is written and
stored beside the page file in the versioned byte layout below, documented with a byte table in
docs/selectors.md.

Soundness rules kept here: a value list is dropped (set to None, "too many") rather than
made lossy, which happens when it would exceed `MAX_DISTINCT`, when a string is longer than
`MAX_VALUE_CHARS`, when a value is not of a JMS type, or when two values are equal in Python
but of different types (`1`, `1.0`, `True`), which a selector can tell apart. Numeric bounds
round outward to floats, and a NaN widens them to infinity.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from pagemq.core.selector.properties import JMS_NAMES
from pagemq.core.selector.runtime import read_number

if TYPE_CHECKING:
    from pagemq.core.message import Message

# Headers unique to each message (`_AMQ_DUPL_ID`, the duplicate-detection id): summarised
# as present with any value, as JMSMessageID is, by `fold`.
UNIQUE_NAMES: Final = frozenset({"_AMQ_DUPL_ID"})
MAX_DISTINCT: Final = 16
MAX_VALUE_CHARS: Final = 256   # longer strings are not listed: they would bloat the summary
_EXACT: Final = 2 ** 53  # ints up to this are floats exactly

MAGIC: Final = b"PMQS"
VERSION: Final = 1
_HEADER = struct.Struct("<4sBII")        # magic, version, message count, property count
_PROPERTY = struct.Struct("<IIB")        # name length, present, flags (then the name)
_RANGE = struct.Struct("<dd")            # min_number, max_number
_COUNT = struct.Struct("<B")             # number of listed values
_TAG = struct.Struct("<B")
_LENGTH = struct.Struct("<I")
_FLOAT = struct.Struct("<d")
_CRC = struct.Struct("<I")
assert (_HEADER.size, _PROPERTY.size, _RANGE.size, _CRC.size) == (13, 9, 16, 4)

_HAS_VALUES: Final = 1
_HAS_RANGE: Final = 2
_TAG_STR, _TAG_INT, _TAG_FLOAT, _TAG_BOOL = 0, 1, 2, 3


class SummaryFormatError(ValueError):
    """Bytes that are not a page summary this version can read (torn, corrupt, or newer)."""


@dataclass(slots=True)
class PropertyStats:
    present: int                       # messages in the page carrying this property
    values: set[object] | None         # distinct values if at most MAX_DISTINCT, else None
    min_number: float | None           # over values that are numbers or numeric-looking strings
    max_number: float | None
    # The last value folded (not stored): most properties repeat from message to message,
    # and folding a value again changes nothing, so a repeat costs one comparison.
    last: object = field(default=None, compare=False, repr=False)
    # Any value, from the first (not stored): an id unique to each message, whose values
    # would prune nothing; folding one only counts it.
    any_value: bool = field(default=False, compare=False, repr=False)


class PageSummary:
    """What the messages of one page carry, as far as selectors care."""

    __slots__ = ("_jms", "_stats", "count")

    def __init__(self) -> None:
        self.count = 0
        self._stats: dict[str, PropertyStats] = {}
        self._jms: _JmsFold | None = None  # fold(): the JMS names, kept as a few scalars

    def add(self, properties: Mapping[str, object]) -> None:
        """Fold in one message's properties (str for STOMP headers, or int/float/bool)."""
        self.count += 1
        all_stats = self._stats
        for name, value in properties.items():
            if value is None:
                continue
            stats = all_stats.get(name)
            if stats is None:
                stats = all_stats[name] = PropertyStats(0, set(), None, None)
            else:
                last = stats.last
                if last.__class__ is value.__class__ and last == value:
                    stats.present += 1
                    continue
            stats.present += 1
            _fold_new(stats, value)

    def fold(self, message: Message) -> None:
        """Fold in one broker message: what `message_view` shows a selector.

        This runs for every paged message, so it is lean: a header value equal to the last
        one folded for its name costs one comparison (header values are all str, so equal
        means the same), and the JMS names are kept as a few scalars (`_JmsFold`) rather
        than folded property by property. A summary is fed by `fold` or by `add`, not both.
        """
        self.count += 1
        all_stats = self._stats
        for name, value in message.headers.items():
            stats = all_stats.get(name)
            if stats is None:
                if name in JMS_NAMES:
                    continue  # the view answers these from the message itself
                if name in UNIQUE_NAMES:
                    stats = all_stats[name] = PropertyStats(1, None, -math.inf, math.inf, any_value=True)
                    continue
                stats = all_stats[name] = PropertyStats(0, set(), None, None)
            elif stats.any_value or stats.last == value:
                stats.present += 1
                continue
            stats.present += 1
            _fold_new(stats, value)
        jms = self._jms
        if jms is None:
            jms = self._jms = _JmsFold(message)
        else:
            jms.fold(message)

    def stats(self, name: str) -> PropertyStats | None:
        """None means no message in the page has the property."""
        if self._jms is not None and name in JMS_NAMES:
            return self._jms.stats(name, self)
        return self._stats.get(name)

    def names(self) -> Iterator[str]:
        return (name for name, _stats in self._all_stats())

    def _all_stats(self) -> list[tuple[str, PropertyStats]]:
        if self._jms is None:
            return list(self._stats.items())
        names = (*self._stats, *JMS_NAMES)
        return [(name, stats) for name in names if (stats := self.stats(name)) is not None]

    def to_bytes(self) -> bytes:
        all_stats = self._all_stats()
        out = bytearray(_HEADER.pack(MAGIC, VERSION, self.count, len(all_stats)))
        for name, stats in all_stats:
            encoded = name.encode("utf-8", "surrogatepass")
            has_range = stats.min_number is not None and stats.max_number is not None
            flags = (_HAS_VALUES if stats.values is not None else 0) | (_HAS_RANGE if has_range else 0)
            out += _PROPERTY.pack(len(encoded), stats.present, flags) + encoded
            if has_range:
                out += _RANGE.pack(stats.min_number, stats.max_number)
            if stats.values is not None:
                out += _COUNT.pack(len(stats.values))
                for value in stats.values:
                    out += _encode_value(value)
        out += _CRC.pack(zlib.crc32(out))
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> PageSummary:
        if len(data) < _HEADER.size + _CRC.size:
            raise SummaryFormatError(f"page summary too short ({len(data)} bytes)")
        (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
        body = memoryview(data)[: len(data) - _CRC.size]
        if zlib.crc32(body) != crc:
            raise SummaryFormatError("page summary CRC mismatch")
        magic, version, count, properties = _HEADER.unpack_from(body, 0)
        if magic != MAGIC or version != VERSION:
            raise SummaryFormatError(f"not a version {VERSION} page summary ({magic!r}, v{version})")
        summary = cls()
        summary.count = count
        reader = _Reader(body, _HEADER.size)
        try:
            for _ in range(properties):
                name, stats = reader.property()
                summary._stats[name] = stats
        except (struct.error, UnicodeDecodeError, IndexError) as exc:
            raise SummaryFormatError(f"malformed page summary: {exc}") from exc
        if reader.offset != len(body):
            raise SummaryFormatError("trailing bytes after the page summary")
        return summary

    def __repr__(self) -> str:
        return f"PageSummary(count={self.count}, properties={sorted(self.names())})"


class _JmsFold:
    """The JMS names of folded messages, as scalars (see `JMS_NAMES` for what each is).

    JMSCorrelationID and JMSType are the `correlation-id` and `type` headers, summarised
    with the other headers; JMSMessageID is unique per message, so it is recorded as
    "always present, any value" (summarising ids would prune nothing).
    """

    __slots__ = ("expiration_max", "expiration_min", "persistent", "priorities",
                 "timestamp_max", "timestamp_min")

    def __init__(self, message: Message) -> None:
        self.priorities = {message.priority}
        self.timestamp_min = self.timestamp_max = message.timestamp
        self.expiration_min = self.expiration_max = message.expiration
        self.persistent = 1 if message.persistent else 0

    def fold(self, message: Message) -> None:
        self.priorities.add(message.priority)
        timestamp = message.timestamp
        if timestamp > self.timestamp_max:
            self.timestamp_max = timestamp
        elif timestamp < self.timestamp_min:
            self.timestamp_min = timestamp
        expiration = message.expiration
        if expiration != self.expiration_min or expiration != self.expiration_max:
            self.expiration_min = min(self.expiration_min, expiration)
            self.expiration_max = max(self.expiration_max, expiration)
        if message.persistent:
            self.persistent += 1

    def stats(self, name: str, summary: PageSummary) -> PropertyStats | None:
        count = summary.count
        if name == "JMSPriority":
            values: set[object] | None = (
                set(self.priorities) if len(self.priorities) <= MAX_DISTINCT else None
            )
            return _int_stats(count, values, min(self.priorities), max(self.priorities))
        if name == "JMSTimestamp":
            return _int_stats(count, None, self.timestamp_min, self.timestamp_max)
        if name == "JMSExpiration":
            return _int_stats(count, None, self.expiration_min, self.expiration_max)
        if name == "JMSDeliveryMode":
            modes = {"PERSISTENT"} if self.persistent else set()
            if self.persistent < count:
                modes.add("NON_PERSISTENT")
            return PropertyStats(count, modes, None, None)  # type: ignore[arg-type]
        if name == "JMSMessageID":
            return PropertyStats(count, None, -math.inf, math.inf)
        if name == "JMSCorrelationID":
            return summary._stats.get("correlation-id")
        if name == "JMSType":
            return summary._stats.get("type")
        return None


def _int_stats(count: int, values: set[object] | None, least: int, most: int) -> PropertyStats:
    if least == most and values is None:
        values = {least}
    return PropertyStats(count, values, _float_bounds(least)[0], _float_bounds(most)[1])


def _fold_new(stats: PropertyStats, value: object) -> None:
    """Fold a value that differs from the last one folded for the property."""
    stats.last = value
    if stats.values is not None:
        _fold_value(stats, value)
    _fold_number(stats, value)


def _fold_value(stats: PropertyStats, value: object) -> None:
    values = stats.values
    if values is None:
        return
    kind = value.__class__
    if kind is str:
        if len(value) > MAX_VALUE_CHARS:  # type: ignore[arg-type]
            stats.values = None
            return
    elif kind not in (int, float, bool):
        stats.values = None
        return
    elif value in values and not any(v.__class__ is kind and v == value for v in values):
        stats.values = None   # equal to a listed value of another type (1 vs 1.0 vs True)
        return
    values.add(value)
    if len(values) > MAX_DISTINCT:
        stats.values = None


_NUMBER_START = frozenset("+-.0123456789")


def _fold_number(stats: PropertyStats, value: object) -> None:
    number: int | float | None
    if value.__class__ is str and value.isdigit() and value.isascii() and len(value) < 300:
        # The commonest case, a decimal integer (a counter, a timestamp), without calls when
        # its float is exact (read_number would say the same, by way of three calls).
        number = int(value)
        least, most = stats.min_number, stats.max_number
        if least is None or most is None:
            stats.min_number, stats.max_number = _float_bounds(number)
        elif number < least:
            stats.min_number = float(number) if number <= _EXACT else _float_bounds(number)[0]
        elif number > most:
            stats.max_number = float(number) if number <= _EXACT else _float_bounds(number)[1]
        return
    if isinstance(value, str):
        if not value or value[0] not in _NUMBER_START:
            return  # no number starts so (an id, a name): read_number would say None, slower
        number = read_number(value)
    elif isinstance(value, (int, float)) and value.__class__ is not bool:  # a bool is no number here
        number = value
    else:
        return
    if number is None:
        return
    least, most = stats.min_number, stats.max_number
    if least is None or most is None:
        stats.min_number, stats.max_number = _float_bounds(number)
    elif number < least:
        stats.min_number = _float_bounds(number)[0]
    elif number > most:
        stats.max_number = _float_bounds(number)[1]
    elif number != number:  # NaN compares false with everything: it may be anywhere
        stats.min_number, stats.max_number = -math.inf, math.inf


def _float_bounds(number: int | float) -> tuple[float, float]:
    """Floats enclosing `number`: an int may not be exactly a float, and NaN is anywhere."""
    if number.__class__ is float:
        if number != number:  # NaN
            return -math.inf, math.inf
        return number, number
    try:
        approx = float(number)
    except OverflowError:
        approx = math.inf if number > 0 else -math.inf
    if approx == number:
        return approx, approx
    low = approx if approx <= number else math.nextafter(approx, -math.inf)
    high = approx if approx >= number else math.nextafter(approx, math.inf)
    return low, high


def _encode_value(value: object) -> bytes:
    if isinstance(value, bool):
        return _TAG.pack(_TAG_BOOL) + _COUNT.pack(int(value))
    if isinstance(value, int):
        raw = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
        return _TAG.pack(_TAG_INT) + _LENGTH.pack(len(raw)) + raw
    if isinstance(value, float):
        return _TAG.pack(_TAG_FLOAT) + _FLOAT.pack(value)
    assert isinstance(value, str)
    raw = value.encode("utf-8", "surrogatepass")
    return _TAG.pack(_TAG_STR) + _LENGTH.pack(len(raw)) + raw


class _Reader:
    def __init__(self, data: memoryview, offset: int) -> None:
        self.data = data
        self.offset = offset

    def unpack(self, layout: struct.Struct) -> tuple[object, ...]:
        fields = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return fields

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise IndexError("field runs past the end")
        raw = bytes(self.data[self.offset : self.offset + size])
        self.offset += size
        return raw

    def property(self) -> tuple[str, PropertyStats]:
        name_length, present, flags = self.unpack(_PROPERTY)
        name = self.take(name_length).decode("utf-8", "surrogatepass")  # type: ignore[arg-type]
        low = high = None
        if flags & _HAS_RANGE:  # type: ignore[operator]
            low, high = self.unpack(_RANGE)
        values: set[object] | None = None
        if flags & _HAS_VALUES:  # type: ignore[operator]
            (count,) = self.unpack(_COUNT)
            values = {self.value() for _ in range(count)}  # type: ignore[call-overload]
        return name, PropertyStats(present, values, low, high)  # type: ignore[arg-type]

    def value(self) -> object:
        (tag,) = self.unpack(_TAG)
        if tag == _TAG_BOOL:
            return bool(self.unpack(_COUNT)[0])
        if tag == _TAG_FLOAT:
            return self.unpack(_FLOAT)[0]
        (length,) = self.unpack(_LENGTH)
        raw = self.take(length)  # type: ignore[arg-type]
        if tag == _TAG_INT:
            return int.from_bytes(raw, "big", signed=True)
        if tag == _TAG_STR:
            return raw.decode("utf-8", "surrogatepass")
        raise IndexError(f"unknown value tag {tag}")

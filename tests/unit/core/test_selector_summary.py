"""Page summaries: what they record, their byte form, and the pages may_match lets us skip."""

from __future__ import annotations

import math
import struct
import zlib

import pytest

from pagemq.core.message import Message
from pagemq.core.selector.summary import (
    MAGIC,
    MAX_DISTINCT,
    MAX_VALUE_CHARS,
    PageSummary,
    PropertyStats,
    SummaryFormatError,
)
from pagemq.selector import compile


def summarise(*messages: dict[str, object]) -> PageSummary:
    summary = PageSummary()
    for message in messages:
        summary.add(message)
    return summary


# -- folding --------------------------------------------------------------------------------


def test_summary_counts_messages_and_presence() -> None:
    summary = summarise({"a": "1"}, {"a": "2", "b": "x"}, {})
    assert summary.count == 3
    assert summary.stats("a") == PropertyStats(2, {"1", "2"}, 1.0, 2.0)
    assert summary.stats("b") == PropertyStats(1, {"x"}, None, None)
    assert summary.stats("c") is None
    assert sorted(summary.names()) == ["a", "b"]


def test_null_values_count_as_absent() -> None:
    summary = summarise({"a": None}, {"a": "x"})
    stats = summary.stats("a")
    assert stats is not None and stats.present == 1


def test_value_list_stops_past_max_distinct() -> None:
    summary = summarise(*({"n": str(i)} for i in range(MAX_DISTINCT)))
    stats = summary.stats("n")
    assert stats is not None and stats.values is not None and len(stats.values) == MAX_DISTINCT
    summary.add({"n": "another"})
    stats = summary.stats("n")
    assert stats is not None and stats.values is None
    assert (stats.min_number, stats.max_number) == (0.0, MAX_DISTINCT - 1.0)
    summary.add({"n": "0"})
    assert stats.values is None and stats.present == MAX_DISTINCT + 2


def test_long_strings_are_not_listed() -> None:
    stats = summarise({"s": "x" * (MAX_VALUE_CHARS + 1)}).stats("s")
    assert stats is not None and stats.values is None and stats.present == 1


@pytest.mark.parametrize(("first", "second"), [(1, True), (1, 1.0), (0, False), (2.0, 2)])
def test_equal_values_of_different_types_are_not_listed(first: object, second: object) -> None:
    stats = summarise({"v": first}, {"v": second}).stats("v")
    assert stats is not None and stats.values is None
    # ... because a selector tells them apart:
    selector = compile("v = 1") if first in (1, True) else compile("v + 0 = v")
    assert {selector.matches({"v": first}), selector.matches({"v": second})} != {None}


def test_values_of_no_jms_type_are_not_listed() -> None:
    stats = summarise({"v": b"raw"}).stats("v")
    assert stats is not None and stats.values is None and stats.present == 1


def test_numeric_range_covers_numbers_and_numeric_strings_only() -> None:
    stats = summarise({"w": "2.5"}, {"w": 7}, {"w": "-1e1"}, {"w": "heavy"}, {"w": True}).stats("w")
    assert stats is not None and (stats.min_number, stats.max_number) == (-10.0, 7.0)


def test_numeric_range_rounds_huge_integers_outward() -> None:
    big = 2**53 + 1
    stats = summarise({"n": big}).stats("n")
    assert stats is not None and stats.min_number is not None and stats.max_number is not None
    assert stats.min_number <= big <= stats.max_number
    huge = summarise({"n": 10**400}).stats("n")
    assert huge is not None and huge.max_number == math.inf


def test_nan_widens_the_range_to_everything() -> None:
    stats = summarise({"n": math.nan}).stats("n")
    assert stats is not None and (stats.min_number, stats.max_number) == (-math.inf, math.inf)


# -- bytes ----------------------------------------------------------------------------------


def test_summary_round_trips_through_bytes() -> None:
    summary = summarise(
        {"s": "red", "i": 12, "big": -(10**30), "f": 2.5, "b": False, "u": "żółw\udcff"},
        {"s": "x" * 300, "i": -3, "n": math.nan},
    )
    restored = PageSummary.from_bytes(summary.to_bytes())
    assert restored.count == 2
    for name in ["s", "i", "big", "f", "b", "u"]:
        assert restored.stats(name) == summary.stats(name), name
    nan_stats = restored.stats("n")
    assert nan_stats is not None and nan_stats.values is not None and math.isnan(next(iter(nan_stats.values)))


def test_empty_summary_is_small_and_round_trips() -> None:
    data = PageSummary().to_bytes()
    assert data[:4] == MAGIC and len(data) == 17
    assert PageSummary.from_bytes(data).count == 0


def test_summary_bytes_start_with_magic_and_version() -> None:
    data = summarise({"a": "1"}).to_bytes()
    magic, version, count, properties = struct.unpack_from("<4sBII", data)
    assert (magic, version, count, properties) == (MAGIC, 1, 1, 1)


def test_corrupt_summary_bytes_are_refused() -> None:
    data = summarise({"a": "1", "b": 2}).to_bytes()
    with pytest.raises(SummaryFormatError, match="CRC"):
        PageSummary.from_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    with pytest.raises(SummaryFormatError):
        PageSummary.from_bytes(data[:10])
    for cut in range(len(data)):
        with pytest.raises(SummaryFormatError):
            PageSummary.from_bytes(data[:cut])


def test_newer_version_is_refused() -> None:
    data = bytearray(PageSummary().to_bytes()[:-4])
    data[4] = 2
    data += struct.pack("<I", zlib.crc32(data))
    with pytest.raises(SummaryFormatError, match="version"):
        PageSummary.from_bytes(bytes(data))


def test_inconsistent_lengths_are_refused_even_with_a_good_crc() -> None:
    body = bytearray(summarise({"a": "1"}).to_bytes()[:-4])
    body[9] = 5   # claims five properties, holds one
    body += struct.pack("<I", zlib.crc32(body))
    with pytest.raises(SummaryFormatError):
        PageSummary.from_bytes(bytes(body))


# -- may_match ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("color = 'red'", False),
        ("color = 'blue'", True),
        ("color <> 'blue'", True),          # 'green'
        ("color IN ('red', 'pink')", False),
        ("color LIKE 'gr%'", True),
        ("color LIKE 'r%'", False),
        ("weight > 10", False),
        ("weight > 2", True),
        ("weight BETWEEN 4 AND 9", False),
        ("weight NOT BETWEEN 1 AND 3", False),
        ("size IS NOT NULL", False),
        ("size IS NULL", True),
        ("note IS NULL", True),
        ("note IS NOT NULL", True),
        ("NOT color = 'blue' AND NOT color = 'green'", False),
        ("color = 'blue' OR weight > 100", True),
        ("color = 'red' OR weight > 100", False),
        ("color = 'blue' AND weight > 100", False),
        ("color = weight", True),           # two properties: unsure
        ("1 = 2", False),
        ("TRUE", True),
    ],
)
def test_may_match_rules_out_pages_by_values_ranges_and_presence(selector: str, expected: bool) -> None:
    page = summarise(
        {"color": "blue", "weight": "1.5"},
        {"color": "green", "weight": "3", "note": "n"},
    )
    assert compile(selector).may_match(page) is expected


def test_may_match_uses_ranges_when_values_are_too_many() -> None:
    page = summarise(*({"n": str(i), "tag": f"t{i}"} for i in range(100)))
    stats = page.stats("n")
    assert stats is not None and stats.values is None
    assert not compile("n > 99").may_match(page)
    assert compile("n >= 99").may_match(page)
    assert not compile("n < 0").may_match(page)
    assert not compile("n = 150").may_match(page)
    assert compile("n = 50").may_match(page)
    assert not compile("n BETWEEN 100 AND 200").may_match(page)
    assert not compile("n NOT BETWEEN 0 AND 99").may_match(page)
    assert compile("tag = 'nope'").may_match(page)   # strings beyond the list: unsure
    assert not compile("tag IS NULL").may_match(page)
    assert not compile("tag > 1").may_match(page)     # no tag reads as a number


def test_pages_are_pruned_by_properties_named_with_quoted_identifiers() -> None:
    from pagemq.core.message import Message

    odd_name = 'x "y" z'
    summary = PageSummary()
    for i in range(3):
        summary.fold(Message(i, "a", {"a.test": "value", odd_name: str(i)}, b""))
    # A page of another run: the summary file is what the broker reads back.
    page = PageSummary.from_bytes(summary.to_bytes())
    stats = page.stats("a.test")
    assert stats is not None and stats.values == {"value"} and stats.present == 3
    assert compile('"a.test" = \'value\'').may_match(page)
    assert not compile('"a.test" = \'other\'').may_match(page)
    assert not compile('"a.test" IS NULL').may_match(page)
    # `a.test` is one property, not `a` then `test`; and `a` is absent from the page.
    assert not compile("a = 'value'").may_match(page)
    assert compile("a IS NULL").may_match(page)
    assert not compile('"x ""y"" z" > 2').may_match(page)
    assert compile('"x ""y"" z" = 1 AND "a.test" = \'value\'').may_match(page)
    assert not compile('"x ""y"" z" = 1 AND "a.test" <> \'value\'').may_match(page)


def test_may_match_on_an_empty_page_is_false() -> None:
    assert not compile("TRUE").may_match(PageSummary())


def test_may_match_over_message_views() -> None:
    from pagemq.core.message import Message
    from pagemq.core.selector.properties import message_view

    page = summarise(*(
        dict(message_view(Message(i, "a", {"region": "eu"}, b"", priority=i % 3))) for i in range(50)
    ))
    assert not compile("JMSPriority > 4").may_match(page)
    assert compile("JMSPriority = 2 AND region = 'eu'").may_match(page)
    assert not compile("region = 'us'").may_match(page)
    assert not compile("JMSCorrelationID IS NOT NULL").may_match(page)


def test_summary_bytes_match_the_golden_hex_in_the_docs() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "selectors.md").read_text(encoding="utf-8")
    block = doc.split("Example: two messages", 1)[1].split("```", 2)[1]
    golden = bytes.fromhex(block.replace("\n", " "))
    summary = summarise({"color": "red", "n": "7"}, {"color": "red"})
    assert summary.to_bytes() == golden
    assert PageSummary.from_bytes(golden).stats("n") == PropertyStats(1, {"7"}, 7.0, 7.0)


def test_folded_messages_record_message_ids_as_present_with_any_value() -> None:
    summary = PageSummary()
    for i in range(3):
        summary.fold(Message(100 + i, "a", {"color": "blue"}, b"", priority=4, timestamp=1000 + i))
    ids = summary.stats("JMSMessageID")
    assert ids == PropertyStats(3, None, -math.inf, math.inf)
    assert summary.stats("JMSTimestamp") == PropertyStats(3, None, 1000.0, 1002.0)
    assert summary.stats("JMSPriority") == PropertyStats(3, {4}, 4.0, 4.0)
    assert summary.stats("JMSDeliveryMode") == PropertyStats(3, {"NON_PERSISTENT"}, None, None)
    assert summary.stats("JMSCorrelationID") is None
    restored = PageSummary.from_bytes(summary.to_bytes())
    for candidate in (summary, restored):
        assert compile("JMSMessageID = '101'").may_match(candidate)
        assert compile("JMSMessageID > 100").may_match(candidate)
        assert not compile("JMSMessageID IS NULL").may_match(candidate)
        assert not compile("color = 'red'").may_match(candidate)


def test_folded_duplicate_ids_are_present_with_any_value() -> None:
    summary = PageSummary()
    for i in range(40):
        summary.fold(Message(i, "a", {"_AMQ_DUPL_ID": f"spark:job:0:1:{i}", "n": str(i)}, b""))
    summary.fold(Message(40, "a", {"n": "40"}, b""))
    assert summary.stats("_AMQ_DUPL_ID") == PropertyStats(40, None, -math.inf, math.inf)
    restored = PageSummary.from_bytes(summary.to_bytes())
    for candidate in (summary, restored):
        assert compile("_AMQ_DUPL_ID = 'spark:job:0:1:7'").may_match(candidate)
        assert compile("_AMQ_DUPL_ID = 'anything else'").may_match(candidate)
        assert compile("_AMQ_DUPL_ID > 1000").may_match(candidate)
        assert compile("_AMQ_DUPL_ID IS NULL").may_match(candidate)  # the last message has none
        assert not compile("n > 40").may_match(candidate)

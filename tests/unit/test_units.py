"""Sizes, durations and plain values as the config file and flags spell them."""

from __future__ import annotations

import pytest

from pagemq.units import (
    MILLISECONDS,
    NANOSECONDS,
    ConfigError,
    format_size,
    key_path,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    parse_size,
    parse_str,
)

KEY = "broker.global-max-size"
KiB, MiB, GiB = 1024, 1024**2, 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (4096, 4096),
        ("4096", 4096),
        ("100b", 100),
        ("512KiB", 512 * KiB),
        ("512K", 512 * KiB),
        ("512kb", 512 * KiB),
        ("10MiB", 10 * MiB),
        ("10M", 10 * MiB),
        ("10MB", 10 * MiB),
        ("1GB", GiB),
        ("1 GiB", GiB),
        ("2TiB", 2 * 1024**4),
        (" 3 mib ", 3 * MiB),
        (-1, -1),
        ("-1", -1),
    ],
)
def test_sizes_use_binary_units_like_artemis(text: object, expected: int) -> None:
    assert parse_size(text, KEY) == expected


@pytest.mark.parametrize("bad", ["12 parsecs", "", "1.5GiB", "MiB", "10 MiB B", "10iB", 1.5, True])
def test_a_bad_size_names_the_key_and_shows_the_value(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_size(bad, KEY)
    message = str(caught.value)
    assert message.startswith(f"{KEY}: ")
    assert "is not a size" in message
    assert "\n" not in message


def test_the_size_error_matches_the_documented_wording() -> None:
    with pytest.raises(ConfigError, match="parsecs") as caught:
        parse_size("12 parsecs", KEY)
    assert str(caught.value) == (
        'broker.global-max-size: "12 parsecs" is not a size (use bytes or a unit like "10MiB")'
    )


def test_negative_sizes_other_than_minus_one_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"-5 is out of range \(must be >= 0, or -1 to disable\)"):
        parse_size(-5, KEY)


def test_minus_one_is_rejected_where_a_size_cannot_be_disabled() -> None:
    with pytest.raises(ConfigError, match="must be >= 1"):
        parse_size(-1, "x.page-size-bytes", disabled_ok=False, minimum=1)
    with pytest.raises(ConfigError, match="must be >= 1"):
        parse_size("0", "x.page-size-bytes", disabled_ok=False, minimum=1)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3ms", 0.003),
        ("5s", 5.0),
        ("100us", 0.0001),
        ("100µs", 0.0001),
        ("250ns", 250e-9),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        (" 5 S ", 5.0),
        (3333333, 0.003333333),
        ("3333333", 0.003333333),
        (0, 0.0),
    ],
)
def test_durations_are_unit_strings_or_integer_nanoseconds(value: object, seconds: float) -> None:
    assert parse_duration(value, "broker.page-sync-timeout") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (5000, 5.0),
        ("5000", 5.0),
        (30000, 30.0),
        (1, 0.001),
        ("2.5", 0.0025),
        # A unit always wins over the key's bare unit.
        ("5s", 5.0),
        ("3333333ns", 0.003333333),
    ],
)
def test_a_bare_number_counts_in_the_unit_the_caller_names(value: object, seconds: float) -> None:
    parsed = parse_duration(value, "broker.disk-scan-period", bare_unit=MILLISECONDS)
    assert parsed == pytest.approx(seconds)


def test_the_bare_unit_defaults_to_nanoseconds() -> None:
    assert parse_duration(5000, "k", bare_unit=NANOSECONDS) == pytest.approx(5e-6)
    assert parse_duration(5000, "k") == pytest.approx(5e-6)
    with pytest.raises(ValueError, match="unknown duration unit"):
        parse_duration(5, "k", bare_unit="fortnights")


@pytest.mark.parametrize("bad", ["soon", "5 parsecs", "s", "-1s", "1e3", 1.5, False, [1]])
def test_a_bad_duration_names_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^broker\.disk-scan-period: .*(not a duration|range)"):
        parse_duration(bad, "broker.disk-scan-period")


def test_the_hint_names_the_unit_of_a_bare_integer() -> None:
    with pytest.raises(ConfigError, match="a bare integer counts milliseconds"):
        parse_duration("soon", "k", bare_unit=MILLISECONDS)
    with pytest.raises(ConfigError, match="a bare integer counts nanoseconds"):
        parse_duration("soon", "k", bare_unit=NANOSECONDS)


def test_negative_and_too_short_durations_are_checked() -> None:
    with pytest.raises(ConfigError, match="must be zero or more"):
        parse_duration(-5, "k")
    with pytest.raises(ConfigError, match=r'^k: "0s" is too short \(must be at least 1ms;'):
        parse_duration("0s", "k", minimum=0.001)
    with pytest.raises(ConfigError, match=r"^k: 999999 is too short \(must be at least 1ms;"):
        parse_duration(999999, "k", minimum=0.001)
    assert parse_duration("1ms", "k", minimum=0.001) == pytest.approx(0.001)
    assert parse_duration(1000000, "k", minimum=0.001) == pytest.approx(0.001)


def test_counts_are_integers_with_minus_one_for_disabled() -> None:
    assert parse_int(5, "k") == 5
    assert parse_int(-1, "k") == -1
    for bad in ("5", 5.0, True):
        with pytest.raises(ConfigError, match=r"^k: expected an integer"):
            parse_int(bad, "k")
    with pytest.raises(ConfigError, match="out of range"):
        parse_int(-2, "k")
    with pytest.raises(ConfigError, match="out of range"):
        parse_int(0, "k", minimum=1)


def test_booleans_are_toml_booleans_only() -> None:
    assert parse_bool(False, "k") is False
    with pytest.raises(ConfigError, match=r'^k: expected true or false, got "yes"$'):
        parse_bool("yes", "k")
    with pytest.raises(ConfigError, match="got 1"):
        parse_bool(1, "k")


def test_strings_must_be_strings_and_usually_non_empty() -> None:
    assert parse_str("DLQ", "k") == "DLQ"
    assert parse_str("", "k", empty_ok=True) == ""
    with pytest.raises(ConfigError, match="must not be empty"):
        parse_str("  ", "k")
    with pytest.raises(ConfigError, match="expected a string, got 3"):
        parse_str(3, "k")


def test_choices_are_case_insensitive_and_canonicalised() -> None:
    assert parse_choice("page", "k", ("PAGE", "DROP")) == "PAGE"
    assert parse_choice("Anycast", "k", ("anycast", "multicast")) == "anycast"
    with pytest.raises(ConfigError, match=r'^k: "SPILL" is not one of PAGE \| DROP$'):
        parse_choice("SPILL", "k", ("PAGE", "DROP"))


def test_key_paths_are_spelled_as_in_the_toml_file() -> None:
    assert key_path("broker", "global-max-size") == "broker.global-max-size"
    assert key_path("address-settings", "orders.#", "max-sise-bytes") == (
        'address-settings."orders.#".max-sise-bytes'
    )
    assert key_path("addresses", 1, "queues", 0, "filter") == "addresses[1].queues[0].filter"


def test_config_errors_are_one_line() -> None:
    error = ConfigError("k", "first line\nsecond line")
    assert str(error) == "k: first line second line"
    assert error.key == "k"


def test_format_size_prefers_the_largest_exact_unit() -> None:
    assert format_size(10 * MiB) == "10MiB"
    assert format_size(1536) == "1536"
    assert format_size(3 * KiB) == "3KiB"
    assert format_size(-1) == "-1"

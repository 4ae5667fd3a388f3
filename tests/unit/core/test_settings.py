"""Address settings: which matches apply, in what order, and what an address inherits."""

from __future__ import annotations

import dataclasses

import pytest

from pagemq.core.settings import (
    SETTING_KEYS,
    AddressSettings,
    AddressSettingsRepository,
    match_address,
)
from pagemq.units import ConfigError

MiB = 1024**2


def repo_with(**matches: dict[str, object]) -> AddressSettingsRepository:
    repository = AddressSettingsRepository()
    for match, values in matches.items():
        repository.add(match, values)
    return repository


@pytest.mark.parametrize(
    ("match", "address", "expected"),
    [
        ("orders", "orders", True),
        ("orders", "orders.eu", False),
        ("orders.*", "orders.eu", True),
        ("orders.*", "orders", False),
        ("orders.*", "orders.eu.paris", False),
        ("orders.#", "orders", True),
        ("orders.#", "orders.eu", True),
        ("orders.#", "orders.eu.paris", True),
        ("orders.#", "ordersx", False),
        ("orders.#", "other.orders", False),
        ("#", "anything.at.all", True),
        ("#", "", True),
        ("*", "orders", True),
        ("*", "", False),
        ("*.eu", "orders.eu", True),
        ("*.eu", "orders.us", False),
        ("#.eu", "eu", True),
        ("#.eu", "a.b.eu", True),
        ("a.#.z", "a.z", True),
        ("a.#.z", "a.b.c.z", True),
        ("a.#.z", "a.b.c", False),
        ("a.*.#", "a", False),
        ("a.*.#", "a.b", True),
    ],
)
def test_wildcards_follow_artemis_word_syntax(match: str, address: str, expected: bool) -> None:
    assert match_address(match, address) is expected


def test_an_empty_repository_gives_the_documented_defaults() -> None:
    settings = AddressSettingsRepository().match("orders")
    assert settings == AddressSettings()
    assert settings.max_size_bytes == -1
    assert settings.page_size_bytes == 10 * MiB
    assert settings.max_read_page_bytes == 20 * MiB
    assert settings.prefetch_page_bytes == 20 * MiB
    assert settings.prefetch_page_messages == -1
    assert settings.address_full_policy == "PAGE"
    assert settings.page_full_policy == "FAIL"
    assert settings.max_delivery_attempts == 10
    assert settings.dead_letter_address == "DLQ"
    assert settings.expiry_address == "ExpiryQueue"
    assert settings.auto_create_addresses is True


def test_exact_beats_single_word_beats_any_words_beats_catch_all() -> None:
    repository = repo_with(
        **{
            "#": {"max-delivery-attempts": 1},
            "orders.#": {"max-delivery-attempts": 2},
            "orders.*": {"max-delivery-attempts": 3},
            "orders.eu": {"max-delivery-attempts": 4},
        }
    )
    assert repository.match("orders.eu").max_delivery_attempts == 4
    assert repository.match("orders.us").max_delivery_attempts == 3
    assert repository.match("orders.us.west").max_delivery_attempts == 2
    assert repository.match("orders").max_delivery_attempts == 2
    assert repository.match("invoices").max_delivery_attempts == 1
    assert repository.matches_for("orders.eu") == ("#", "orders.#", "orders.*", "orders.eu")


def test_registration_order_does_not_change_precedence() -> None:
    repository = repo_with(
        **{
            "orders.eu": {"max-delivery-attempts": 4},
            "orders.*": {"max-delivery-attempts": 3},
            "orders.#": {"max-delivery-attempts": 2},
        }
    )
    assert repository.matches_for("orders.eu") == ("orders.#", "orders.*", "orders.eu")


def test_unset_keys_are_inherited_from_less_specific_matches() -> None:
    repository = repo_with(
        **{
            "#": {"address-full-policy": "BLOCK", "max-size-bytes": "1MiB"},
            "orders.#": {"max-size-bytes": "5MiB", "dead-letter-address": "orders.DLQ"},
            "orders.eu": {"max-size-messages": 100},
        }
    )
    settings = repository.match("orders.eu")
    assert settings.max_size_messages == 100
    assert settings.max_size_bytes == 5 * MiB
    assert settings.dead_letter_address == "orders.DLQ"
    assert settings.address_full_policy == "BLOCK"
    assert settings.expiry_address == "ExpiryQueue"


def test_literal_words_further_left_are_more_specific() -> None:
    repository = repo_with(
        **{"*.eu": {"max-delivery-attempts": 5}, "orders.*": {"max-delivery-attempts": 6}}
    )
    assert repository.match("orders.eu").max_delivery_attempts == 6
    assert repository.matches_for("orders.eu") == ("*.eu", "orders.*")


def test_longer_any_words_prefixes_are_more_specific() -> None:
    repository = repo_with(
        **{
            "orders.#": {"max-delivery-attempts": 2},
            "orders.eu.#": {"max-delivery-attempts": 7},
            "orders.*.#": {"max-delivery-attempts": 8},
        }
    )
    assert repository.matches_for("orders.eu.paris") == ("orders.#", "orders.*.#", "orders.eu.#")
    assert repository.match("orders.eu.paris").max_delivery_attempts == 7
    assert repository.match("orders.us.paris").max_delivery_attempts == 8


def test_read_limits_derive_from_the_effective_page_size() -> None:
    repository = repo_with(**{"#": {"page-size-bytes": "1MiB"}})
    settings = repository.match("orders")
    assert settings.max_read_page_bytes == 2 * MiB
    assert settings.prefetch_page_bytes == 2 * MiB


def test_derived_defaults_use_values_merged_from_other_matches() -> None:
    repository = repo_with(
        **{
            "#": {"max-read-page-messages": 500},
            "orders.#": {"page-size-bytes": "4MiB"},
        }
    )
    settings = repository.match("orders.eu")
    assert settings.max_read_page_bytes == 8 * MiB
    assert settings.prefetch_page_bytes == 8 * MiB
    assert settings.prefetch_page_messages == 500
    assert repository.match("invoices").max_read_page_bytes == 20 * MiB


def test_explicit_values_beat_derived_defaults_even_from_less_specific_matches() -> None:
    repository = repo_with(
        **{
            "#": {"max-read-page-bytes": "3MiB", "prefetch-page-messages": 7},
            "orders.#": {"page-size-bytes": "4MiB", "max-read-page-messages": 100},
        }
    )
    settings = repository.match("orders.eu")
    assert settings.max_read_page_bytes == 3 * MiB
    assert settings.prefetch_page_bytes == 3 * MiB
    assert settings.prefetch_page_messages == 7


def test_adding_a_match_invalidates_cached_results() -> None:
    repository = AddressSettingsRepository()
    assert repository.match("orders").max_size_bytes == -1
    repository.add("orders.#", {"max-size-bytes": 1000})
    assert repository.match("orders").max_size_bytes == 1000
    repository.add("orders.#", {"max-size-messages": 5})
    assert repository.match("orders").max_size_bytes == -1, "add replaces a match's values"


def test_match_returns_the_cached_object_for_a_repeated_address() -> None:
    repository = repo_with(**{"orders.#": {"max-size-bytes": 1000}})
    assert repository.match("orders.eu") is repository.match("orders.eu")


def test_unknown_key_names_its_full_path_and_suggests_the_spelling() -> None:
    with pytest.raises(ConfigError) as caught:
        AddressSettingsRepository().add("orders.#", {"max-sise-bytes": 10})
    assert str(caught.value) == (
        'address-settings."orders.#".max-sise-bytes: unknown key (did you mean max-size-bytes?)'
    )


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("max-size-bytes", "lots", "is not a size"),
        ("max-size-messages", "10", "expected an integer"),
        ("page-size-bytes", 0, "out of range"),
        ("page-size-bytes", -1, "out of range"),
        ("address-full-policy", "SPILL", "is not one of PAGE | DROP | FAIL | BLOCK"),
        ("page-full-policy", "PAGE", "is not one of DROP | FAIL"),
        ("max-delivery-attempts", 0, "out of range"),
        ("dead-letter-address", 5, "expected a string"),
        ("auto-create-addresses", "yes", "expected true or false"),
        ("page-limit-messages", -7, "out of range"),
    ],
)
def test_bad_values_name_the_key(key: str, value: object, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AddressSettingsRepository().add("#", {key: value})
    assert str(caught.value).startswith(f'address-settings."#".{key}: ')
    assert problem in str(caught.value)


@pytest.mark.parametrize("match", ["orders#", "ord*ers.eu", ""])
def test_malformed_matches_are_rejected(match: str) -> None:
    with pytest.raises(ConfigError, match="address-settings"):
        AddressSettingsRepository().add(match, {})


def test_policies_are_canonicalised_to_upper_case() -> None:
    repository = repo_with(**{"#": {"address-full-policy": "drop", "page-full-policy": "drop"}})
    assert repository.match("a").address_full_policy == "DROP"
    assert repository.match("a").page_full_policy == "DROP"


def test_every_setting_key_is_a_field_and_round_trips_through_the_config_dict() -> None:
    field_names = {field.name for field in dataclasses.fields(AddressSettings)}
    assert {key.replace("-", "_") for key in SETTING_KEYS} == field_names
    settings = AddressSettings(max_size_bytes=5, address_full_policy="BLOCK")
    as_dict = settings.to_config_dict()
    assert list(as_dict) == list(SETTING_KEYS)
    assert as_dict["max-size-bytes"] == 5
    assert AddressSettingsRepository().match("x").to_config_dict()["page-size-bytes"] == 10 * MiB
    assert AddressSettings.from_values(as_dict) == settings

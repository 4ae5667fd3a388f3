"""Address settings and the hierarchical repository that picks them for an address.

Operators configure settings per *match* (`"orders.#"`, `"orders.*"`, `"orders.eu"`, `"#"`)
and an address gets the merge of every match that applies to it: the most specific match
wins key by key, and keys it leaves unset are inherited from less specific matches, down to
the built-in defaults under the catch-all `"#"`. This is Artemis' model
(HierarchicalObjectRepository + Mergeable AddressSettings in artemis-server's
`core/settings/impl`); the syntax is Artemis' default WildcardConfiguration: `.` delimits
words, `#` matches zero or more words, `*` exactly one word.

Specificity (most specific first), after Artemis' MatchComparator:
1. an exact match (no wildcard);
2. matches with `*` but no `#`;
3. matches with `#`, the bare `"#"` last of all.
Within 2 and 3, compare word by word from the left: at the first position where one match
has a literal word and the other a wildcard, the literal one is more specific; if one match
is a prefix of the other, the longer one is. Artemis ranks `#` matches by character length
instead; counting words gives the same order for the usual prefix patterns (`orders.#` <
`orders.eu.#`) and never lets a long literal outrank a narrower pattern. Remaining ties
(which Artemis leaves to hash order) are broken by the match text so results are stable.

Derived defaults are computed from the *merged* values, unless explicitly set by some
match: `max-read-page-bytes` = 2 x `page-size-bytes`, `prefetch-page-bytes` =
`max-read-page-bytes`, `prefetch-page-messages` = `max-read-page-messages`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

from pagemq.units import (
    MILLISECONDS,
    ConfigError,
    key_path,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    parse_size,
    parse_str,
    show_value,
)

__all__ = [
    "ADDRESS_FULL_POLICIES",
    "PAGE_FULL_POLICIES",
    "SETTING_KEYS",
    "AddressSettings",
    "AddressSettingsRepository",
    "check_match",
    "match_address",
    "parse_address_settings",
    "unknown_key_problem",
]

ADDRESS_FULL_POLICIES = ("PAGE", "DROP", "FAIL", "BLOCK")
PAGE_FULL_POLICIES = ("DROP", "FAIL")
ANY_WORDS = "#"
SINGLE_WORD = "*"
DELIMITER = "."
SECTION = "address-settings"

_DEFAULT_PAGE_SIZE = 10 * 1024 * 1024
_CACHE_LIMIT = 10_000  # addresses are auto-created; bound the cache, do not trust the names


@dataclass(frozen=True, slots=True)
class AddressSettings:
    """The effective settings of one address; field names are the config keys in snake_case.

    The defaults of the derived fields are the values derived from the default
    page-size-bytes; `from_values` derives them from whatever page size is in effect.
    """

    max_size_bytes: int = -1
    max_size_messages: int = -1
    page_size_bytes: int = _DEFAULT_PAGE_SIZE
    address_full_policy: str = "PAGE"
    max_read_page_bytes: int = 2 * _DEFAULT_PAGE_SIZE
    max_read_page_messages: int = -1
    prefetch_page_bytes: int = 2 * _DEFAULT_PAGE_SIZE
    prefetch_page_messages: int = -1
    page_limit_bytes: int = -1
    page_limit_messages: int = -1
    page_full_policy: str = "FAIL"
    max_delivery_attempts: int = 10
    dead_letter_address: str = "DLQ"
    expiry_address: str = "ExpiryQueue"
    auto_create_addresses: bool = True
    id_cache_size: int = 20_000
    # Artemis' auto-delete settings (core/auto_delete.py); off by default here, see
    # docs/configuration.md. Delays are milliseconds, as Artemis.
    auto_delete_queues: bool = False
    auto_delete_queues_delay: int = 0
    auto_delete_queues_message_count: int = 0
    auto_delete_addresses: bool = False
    auto_delete_addresses_delay: int = 0

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> AddressSettings:
        """Build from validated kebab-case values, deriving defaults the values left unset."""
        fields = {_snake(key): value for key, value in values.items()}
        page_size = fields.get("page_size_bytes", _DEFAULT_PAGE_SIZE)
        assert isinstance(page_size, int)
        fields.setdefault("max_read_page_bytes", 2 * page_size)
        fields.setdefault("prefetch_page_bytes", fields["max_read_page_bytes"])
        fields.setdefault("prefetch_page_messages", fields.get("max_read_page_messages", -1))
        return cls(**fields)  # type: ignore[arg-type]

    def to_config_dict(self) -> dict[str, object]:
        """Kebab-case keys as in the config file (the HTTP API's `settings` field)."""
        return {key: getattr(self, name) for name, key in _CONFIG_KEYS}


_CONFIG_KEYS: tuple[tuple[str, str], ...] = tuple(
    (field.name, field.name.replace("_", "-")) for field in dataclasses.fields(AddressSettings)
)  # (field, config key): `to_config_dict` runs per address for the HTTP API's lists


def _snake(key: str) -> str:
    return key.replace("-", "_")


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _limit_size(value: object, key: str) -> int:
    return parse_size(value, key)


def _page_size(value: object, key: str) -> int:
    return parse_size(value, key, disabled_ok=False, minimum=1)


def _limit_count(value: object, key: str) -> int:
    return parse_int(value, key)


def _delivery_attempts(value: object, key: str) -> int:
    # 0 would dead-letter a message before anyone saw it; -1 means "redeliver forever".
    return parse_int(value, key, minimum=1)


def _delay_ms(value: object, key: str) -> int:
    """A delay in milliseconds: a bare integer counts milliseconds, as Artemis' delays."""
    return round(parse_duration(value, key, bare_unit=MILLISECONDS) * 1000)


def _message_count(value: object, key: str) -> int:
    # -1: any count (the messages are deleted with the queue), as Artemis.
    return parse_int(value, key)


def _address_name(value: object, key: str) -> str:
    # An empty dead-letter/expiry address means "none": the message is dropped instead.
    return parse_str(value, key, empty_ok=True)


_Parser = Callable[[object, str], object]

_PARSERS: dict[str, _Parser] = {
    "max-size-bytes": _limit_size,
    "max-size-messages": _limit_count,
    "page-size-bytes": _page_size,
    "address-full-policy": partial(parse_choice, choices=ADDRESS_FULL_POLICIES),
    "max-read-page-bytes": _limit_size,
    "max-read-page-messages": _limit_count,
    "prefetch-page-bytes": _limit_size,
    "prefetch-page-messages": _limit_count,
    "page-limit-bytes": _limit_size,
    "page-limit-messages": _limit_count,
    "page-full-policy": partial(parse_choice, choices=PAGE_FULL_POLICIES),
    "max-delivery-attempts": _delivery_attempts,
    "dead-letter-address": _address_name,
    "expiry-address": _address_name,
    "auto-create-addresses": parse_bool,
    # Duplicate detection (`_AMQ_DUPL_ID`): how many recent ids an address remembers; 0: off.
    "id-cache-size": partial(parse_int, minimum=0),
    "auto-delete-queues": parse_bool,
    "auto-delete-queues-delay": _delay_ms,
    "auto-delete-queues-message-count": _message_count,
    "auto-delete-addresses": parse_bool,
    "auto-delete-addresses-delay": _delay_ms,
}

SETTING_KEYS: tuple[str, ...] = tuple(_PARSERS)


def unknown_key_problem(key: str, known: Iterable[str], *, what: str = "key") -> str:
    """'unknown key', plus the nearest valid spelling when the typo is obvious."""
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f"unknown {what} (did you mean {close[0]}?)" if close else f"unknown {what}"


def parse_address_settings(match: str, raw: object) -> dict[str, object]:
    """Validate one `[address-settings."<match>"]` table into parsed Python values.

    Accepts raw TOML values (`"10MiB"`) and already-parsed ones (10485760) alike, so the
    repository can run every `add` through it.
    """
    check_match(match)
    if not isinstance(raw, Mapping):
        raise ConfigError(
            key_path(SECTION, match),
            f'expected a table of settings, as [{SECTION}."<match>"], got {show_value(raw)}',
        )
    parsed: dict[str, object] = {}
    for key, value in raw.items():
        path = key_path(SECTION, match, str(key))
        parser = _PARSERS.get(str(key))
        if parser is None:
            raise ConfigError(path, unknown_key_problem(str(key), SETTING_KEYS))
        parsed[str(key)] = parser(value, path)
    return parsed


def check_match(match: str) -> None:
    """Reject matches that would silently never apply: wildcards glued to text, empty text."""
    if not isinstance(match, str) or not match:
        raise ConfigError(key_path(SECTION, str(match)), "a match must be a non-empty string")
    for word in match.split(DELIMITER):
        if word not in (ANY_WORDS, SINGLE_WORD) and (ANY_WORDS in word or SINGLE_WORD in word):
            raise ConfigError(
                key_path(SECTION, match),
                f"'{ANY_WORDS}' and '{SINGLE_WORD}' must be whole words between '{DELIMITER}'",
            )


def match_address(match: str, address: str) -> bool:
    """Whether `match` applies to `address`, word by word.

    Tracks the set of address positions reachable after each match word, so `#` anywhere
    (zero or more words) needs no backtracking.
    """
    words = address.split(DELIMITER)
    reachable = {0}
    for pattern_word in match.split(DELIMITER):
        following: set[int] = set()
        for at in reachable:
            if pattern_word == ANY_WORDS:
                following.update(range(at, len(words) + 1))
            elif at < len(words) and _word_matches(pattern_word, words[at]):
                following.add(at + 1)
        if not following:
            return False
        reachable = following
    return len(words) in reachable


def _word_matches(pattern_word: str, word: str) -> bool:
    if pattern_word == SINGLE_WORD:
        return word != ""  # as Artemis' `[^.]+`: a wildcard word is never empty
    return pattern_word == word


def _specificity(match: str) -> tuple[int, tuple[bool, ...], str]:
    """Sort key, ascending from least to most specific (see the module docstring)."""
    words = match.split(DELIMITER)
    if ANY_WORDS in words:
        rank = 0
    elif SINGLE_WORD in words:
        rank = 1
    else:
        rank = 2
    literals = tuple(word not in (ANY_WORDS, SINGLE_WORD) for word in words)
    return rank, literals, match


def match_specificity(match: str) -> tuple[int, tuple[bool, ...], str]:
    """The precedence of `match`: a greater key is more specific (security settings use it)."""
    return _specificity(match)


class AddressSettingsRepository:
    """Matches registered by `add`, merged per address by `match` and cached.

    The built-in defaults sit under everything, so `match` always returns complete
    settings even for an empty repository.
    """

    def __init__(self) -> None:
        self._matches: dict[str, dict[str, object]] = {}
        self._cache: dict[str, AddressSettings] = {}

    def add(self, match: str, values: Mapping[str, object]) -> None:
        """Register (or replace) the settings of `match`; raises ConfigError on a bad key."""
        self._matches[match] = parse_address_settings(match, values)
        self._cache.clear()

    def match(self, address: str) -> AddressSettings:
        cached = self._cache.get(address)
        if cached is not None:
            return cached
        merged: dict[str, object] = {}
        for match in self.matches_for(address):
            merged.update(self._matches[match])
        settings = AddressSettings.from_values(merged)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[address] = settings
        return settings

    def matches_for(self, address: str) -> tuple[str, ...]:
        """The matches that apply to `address`, least specific first (the merge order)."""
        applying = [m for m in self._matches if match_address(m, address)]
        return tuple(sorted(applying, key=_specificity))

    def items(self) -> tuple[tuple[str, dict[str, object]], ...]:
        """Each registered match with its explicitly set values, for display and tests."""
        return tuple((match, dict(values)) for match, values in self._matches.items())

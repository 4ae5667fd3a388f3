"""Per-address permissions: `[security-settings."match"]`, each permission a list of roles.

Match syntax and precedence are the address-settings' (`core/settings.py`: `.` delimits
words, `#` zero or more, `*` exactly one; exact beats `*` beats `#`), but as in Artemis the
most specific match *replaces* the others: permissions are not inherited key by key, so a
match that lists only `send` grants nothing else on its addresses. An address no match
covers grants nothing (with security enabled).
"""

from __future__ import annotations

from collections.abc import Mapping

from pagemq.core.settings import check_match, match_address, match_specificity
from pagemq.units import ConfigError, key_path, show_value

__all__ = ["MANAGEMENT_ADDRESS", "PERMISSIONS", "SECTION", "SecuritySettings"]

SECTION = "security-settings"
PERMISSIONS = (
    "send", "consume", "browse",
    "create-address", "delete-address",
    "create-durable-queue", "delete-durable-queue",
    "create-non-durable-queue", "delete-non-durable-queue",
    "manage", "view",
)
# The HTTP API's `manage` and `view` are checked on this address (Artemis checks management
# operations on its management address): a `"#"` match covers it.
MANAGEMENT_ADDRESS = "pagemq.management"
_CACHE_LIMIT = 10_000
_NOBODY: frozenset[str] = frozenset()


class SecuritySettings:
    """Matches and their role lists; `roles(permission, address)` is cached per address."""

    def __init__(self) -> None:
        self._matches: dict[str, dict[str, frozenset[str]]] = {}
        self._cache: dict[str, dict[str, frozenset[str]]] = {}

    def add(self, match: str, raw: object) -> None:
        try:
            check_match(match)
        except ConfigError as exc:
            raise ConfigError(key_path(SECTION, match), exc.problem) from None
        if not isinstance(raw, Mapping):
            raise ConfigError(key_path(SECTION, match), f"expected a table, got {show_value(raw)}")
        granted: dict[str, frozenset[str]] = {}
        for permission, roles in raw.items():
            where = key_path(SECTION, match, permission)
            if permission not in PERMISSIONS:
                raise ConfigError(where, f"unknown permission (known: {', '.join(PERMISSIONS)})")
            if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
                raise ConfigError(where, f"expected a list of role names, got {show_value(roles)}")
            granted[permission] = frozenset(roles)
        self._matches[match] = granted
        self._cache.clear()

    def roles(self, permission: str, address: str) -> frozenset[str]:
        """The roles granted `permission` on `address` by its most specific match."""
        granted = self._cache.get(address)
        if granted is None:
            granted = self._most_specific(address)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[address] = granted
        return granted.get(permission, _NOBODY)

    def match_for(self, address: str) -> str | None:
        applying = [m for m in self._matches if match_address(m, address)]
        return max(applying, key=match_specificity) if applying else None

    def _most_specific(self, address: str) -> dict[str, frozenset[str]]:
        match = self.match_for(address)
        return self._matches[match] if match is not None else {}

    def items(self) -> tuple[tuple[str, dict[str, frozenset[str]]], ...]:
        return tuple((match, dict(granted)) for match, granted in self._matches.items())

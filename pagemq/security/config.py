"""The security part of the configuration: `[broker]` security keys, `[tls]`,
`[security-settings."match"]`, the users file, and the safe-by-default listener check.

Parsed here rather than in `server/config.py` so that file only hands over the raw tables;
the rules are the same (one-line `ConfigError` naming the key). Relative file names
(`users-file`, the `[tls]` files) are relative to the config file's directory.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pagemq.security.permissions import SECTION, SecuritySettings
from pagemq.security.tls import TLS_SECTION, TlsConfig, build_context
from pagemq.security.users import EMPTY, Users, load_users
from pagemq.units import ConfigError, key_path, parse_bool, parse_choice, parse_str, show_value

__all__ = [
    "BROKER_KEYS",
    "TLS_SECTION",
    "SecurityConfig",
    "TlsConfig",
    "check_listeners",
    "parse_security",
    "parse_tls",
]

log = logging.getLogger("pagemq.security")

BROKER_KEYS = ("security-enabled", "allow-anonymous-remote", "users-file")
_TLS_KEYS = ("cert-file", "key-file", "ca-file", "require-client-cert", "min-version")
TLS_VERSIONS = ("1.2", "1.3")


@dataclass(frozen=True)
class SecurityConfig:
    enabled: bool = False
    allow_anonymous_remote: bool = False
    users_file: Path | None = None
    users: Users = EMPTY  # the file as read at start (the broker then follows its changes)
    settings: SecuritySettings = field(default_factory=SecuritySettings)


def _file(value: object, key: str, base: Path) -> Path:
    path = Path(parse_str(value, key)).expanduser()
    return path if path.is_absolute() else base / path


def parse_security(broker: Mapping[str, object], settings: object, base: Path) -> SecurityConfig:
    enabled = parse_bool(broker.get("security-enabled", False), key_path("broker", "security-enabled"))
    anonymous = parse_bool(broker.get("allow-anonymous-remote", False),
                           key_path("broker", "allow-anonymous-remote"))
    users_key = key_path("broker", "users-file")
    users_file = _file(broker["users-file"], users_key, base) if "users-file" in broker else None
    repository = SecuritySettings()
    if not isinstance(settings, Mapping):
        raise ConfigError(SECTION, f"expected a table of matches, got {show_value(settings)}")
    for match, values in settings.items():
        repository.add(str(match), values)
    users = EMPTY
    if enabled:
        if users_file is None:
            raise ConfigError(users_key, "missing: security-enabled = true needs a users file "
                              "(create it with `pagemq user add NAME --role ROLE`)")
        if not users_file.is_file():  # named by its key, as every other config error
            problem = "a directory, not a file" if users_file.is_dir() else "no such file"
            raise ConfigError(users_key, f"{users_file}: {problem} (create it with "
                              "`pagemq user add NAME --role ROLE --users-file FILE`)")
        users = load_users(users_file)
        if not repository.items():  # a broker nobody may use: surely not what was meant
            log.warning("security-enabled = true and no [security-settings] match: every frame and "
                        "HTTP request will be refused (give roles their permissions, e.g. "
                        '[security-settings."#"]; see docs/security.md)')
    return SecurityConfig(enabled, anonymous, users_file, users, repository)


def parse_tls(raw: object, base: Path) -> TlsConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(TLS_SECTION, f"expected a table, got {show_value(raw)}")
    for key in raw:
        if key not in _TLS_KEYS:
            raise ConfigError(key_path(TLS_SECTION, key), f"unknown key (known: {', '.join(_TLS_KEYS)})")
    for key in ("cert-file", "key-file"):
        if key not in raw:
            raise ConfigError(key_path(TLS_SECTION, key), "missing (this key is required)")
    ca_file = raw.get("ca-file")
    require = parse_bool(raw.get("require-client-cert", False), key_path(TLS_SECTION, "require-client-cert"))
    if require and ca_file is None:
        raise ConfigError(key_path(TLS_SECTION, "ca-file"),
                          "missing: require-client-cert = true needs the CA that signs client certificates")
    tls = TlsConfig(
        cert_file=_file(raw["cert-file"], key_path(TLS_SECTION, "cert-file"), base),
        key_file=_file(raw["key-file"], key_path(TLS_SECTION, "key-file"), base),
        ca_file=None if ca_file is None else _file(ca_file, key_path(TLS_SECTION, "ca-file"), base),
        require_client_cert=require,
        min_version=parse_choice(str(raw.get("min-version", "1.2")), key_path(TLS_SECTION, "min-version"),
                                 TLS_VERSIONS),
    )
    # Load it now: a missing or mismatched file is a start-up error naming the key, not a
    # handshake failure for every client later.
    build_context(tls)
    return tls


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def check_listeners(security: SecurityConfig, listeners: Sequence[tuple[str, str | None]]) -> None:
    """Safe by default: with security off, only loopback listeners, unless the operator
    explicitly allowed anonymous remote access. `listeners`: (key or flag, host or None)."""
    if security.enabled or security.allow_anonymous_remote:
        return
    for key, host in listeners:
        if host is not None and not is_loopback(host):
            raise ConfigError(
                key,
                f"{host} is not a loopback address and security is disabled: set "
                "[broker] security-enabled = true with a users-file (see docs/security.md), "
                "or allow-anonymous-remote = true to accept anyone on the network",
            )

"""The broker's configuration: embedded defaults, the TOML file, then command-line flags.

Loading is strict on purpose: an unknown section or key, a wrong type or a bad unit is a
`ConfigError` whose one-line message names the full key path, because a silently ignored
typo (`max-sise-bytes`) is a broker that pages nothing and runs out of memory in
production. Key names are the Artemis setting names in kebab-case (see
docs/configuration.md); relative directories are relative to the current directory.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pagemq.core.settings import SECTION as SETTINGS_SECTION
from pagemq.core.settings import AddressSettingsRepository, unknown_key_problem
from pagemq.security.config import (
    BROKER_KEYS as SECURITY_BROKER_KEYS,
)
from pagemq.security.config import (
    TLS_SECTION,
    SecurityConfig,
    TlsConfig,
    check_listeners,
    parse_security,
    parse_tls,
)
from pagemq.security.permissions import SECTION as SECURITY_SECTION
from pagemq.server.memory_limit import default_global_max_size
from pagemq.units import (
    MILLISECONDS,
    NANOSECONDS,
    ConfigError,
    key_path,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    parse_size,
    parse_str,
    read_utf8,
    show_value,
)

__all__ = [
    "DISK_FULL_POLICIES",
    "ROUTING_TYPES",
    "AcceptorsConfig",
    "AddressConfig",
    "BrokerConfig",
    "Config",
    "ConfigError",
    "Endpoint",
    "QueueConfig",
    "StompConfig",
    "load_config",
    "parse_endpoint",
]

T = TypeVar("T")
_Key = str | int

DISK_FULL_POLICIES = ("BLOCK", "FAIL")
ROUTING_TYPES = ("anycast", "multicast")
DISABLED_ACCEPTOR = "off"
# Artemis refuses journal files under 1 KiB (JournalConstants.MIN_FILE_SIZE); so do we.
_MIN_JOURNAL_FILE_SIZE = 1024
# A periodic task scheduled more often than this is a busy loop on an idle broker, never a
# tuning anyone wants: the usual cause is a bare integer read in the wrong unit.
_MIN_PERIOD = 1e-3

_BROKER_DEFAULTS: dict[str, object] = {
    "data-directory": "data",
    "paging-directory": None,  # <data-directory>/paging
    "journal-directory": None,  # <data-directory>/journal
    "global-max-size": None,  # a quarter of the memory available, at most 512 MiB (memory_limit)
    "global-max-messages": -1,
    "max-disk-usage": 90,
    "min-disk-free": -1,
    "disk-scan-period": "5s",
    "page-sync-timeout": "3ms",
    "journal-file-size": "32MiB",
    "journal-sync": True,
    "archive-data-logs": False,
    "cleanup-period": "30s",
    "disk-full-policy": "BLOCK",
    "message-expiry-scan-period": "5s",
}
_ACCEPTOR_DEFAULTS: dict[str, object] = {
    "stomp": "127.0.0.1:61613",
    "http": "127.0.0.1:8161",
    "stomp-tls": "off",  # listeners named *-tls use [tls] (docs/security.md)
    "http-tls": "off",
    "max-connections": 10_000,  # per listener; -1: no limit
    "connect-timeout": "10s",  # a socket that sends no CONNECT is closed; 0: never
}
_STOMP_DEFAULTS: dict[str, object] = {
    "max-frame-size": "16MiB",
    "max-headers": 1000,
    "max-header-length": "64KiB",
}
_SECTIONS = ("broker", "acceptors", "stomp", SETTINGS_SECTION, "addresses", TLS_SECTION,
             SECURITY_SECTION)
_ADDRESS_KEYS = ("name", "routing-type", "queues")
_QUEUE_KEYS = ("name", "filter", "durable")


@dataclass(frozen=True)
class BrokerConfig:
    data_directory: Path
    paging_directory: Path
    journal_directory: Path
    global_max_size: int
    global_max_messages: int
    max_disk_usage: int
    min_disk_free: int
    disk_scan_period: float
    page_sync_timeout: float
    journal_file_size: int
    journal_sync: bool
    archive_data_logs: bool
    cleanup_period: float
    disk_full_policy: str
    message_expiry_scan_period: float = 5.0  # seconds; -1: paged messages expire only when read back


@dataclass(frozen=True)
class StompConfig:
    max_frame_size: int
    max_headers: int
    max_header_length: int


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class AcceptorsConfig:
    """None means the listener is switched off (`stomp = false` or `--http off`)."""

    stomp: Endpoint | None
    http: Endpoint | None
    stomp_tls: Endpoint | None = None
    http_tls: Endpoint | None = None
    max_connections: int = -1
    connect_timeout: float = 0.0  # seconds; 0: no timeout


@dataclass(frozen=True)
class QueueConfig:
    name: str
    filter: str | None = None
    durable: bool = True


@dataclass(frozen=True)
class AddressConfig:
    name: str
    routing_type: str
    queues: tuple[QueueConfig, ...]


@dataclass(frozen=True)
class Config:
    broker: BrokerConfig
    acceptors: AcceptorsConfig
    stomp: StompConfig
    address_settings: AddressSettingsRepository
    addresses: tuple[AddressConfig, ...]
    security: SecurityConfig = field(default_factory=SecurityConfig)
    tls: TlsConfig | None = None


class _Table:
    """A TOML table being read, known keys only, so every typo is reported by its path."""

    def __init__(
        self, raw: object, path: tuple[_Key, ...], known: Iterable[str], *, what: str = "key"
    ) -> None:
        if not isinstance(raw, Mapping):
            raise ConfigError(key_path(*path), f"expected a table, got {show_value(raw)}")
        known = tuple(known)
        for key in raw:
            if key not in known:
                problem = unknown_key_problem(key, known, what=what)
                raise ConfigError(key_path(*path, key), problem)
        self._raw = raw
        self._path = path

    def path(self, key: str) -> str:
        return key_path(*self._path, key)

    def has(self, key: str) -> bool:
        return key in self._raw

    def get(self, key: str, parse: Callable[[object, str], T], default: object) -> T:
        return parse(self._raw.get(key, default), self.path(key))

    def require(self, key: str, parse: Callable[[object, str], T]) -> T:
        if key not in self._raw:
            raise ConfigError(self.path(key), "missing (this key is required)")
        return parse(self._raw[key], self.path(key))


def load_config(
    path: Path | None = None,
    *,
    data_dir: str | None = None,
    stomp: str | None = None,
    http: str | None = None,
) -> Config:
    """Defaults, overlaid by the file at `path` (if any), overlaid by the flags."""
    document = _read_toml(path) if path is not None else {}
    top = _Table(document, (), _SECTIONS, what="section")
    repository = AddressSettingsRepository()
    for match, values in _settings_tables(document.get(SETTINGS_SECTION, {})):
        repository.add(match, values)
    broker = _broker(document.get("broker", {}), data_dir)
    acceptors = _acceptors(document.get("acceptors", {}), stomp=stomp, http=http)
    base = Path(path).parent if path is not None else Path(".")
    raw_broker = document.get("broker", {})
    security = parse_security(raw_broker if isinstance(raw_broker, Mapping) else {},
                              document.get(SECURITY_SECTION, {}), base)
    listeners = [
        ("--stomp" if stomp is not None else "acceptors.stomp", acceptors.stomp),
        ("--http" if http is not None else "acceptors.http", acceptors.http),
        ("acceptors.stomp-tls", acceptors.stomp_tls),
        ("acceptors.http-tls", acceptors.http_tls),
    ]
    check_listeners(security, [(key, _host(endpoint)) for key, endpoint in listeners])
    _check_distinct_ports(listeners)
    tls = parse_tls(document.get(TLS_SECTION), base)
    for key, endpoint in (("stomp-tls", acceptors.stomp_tls), ("http-tls", acceptors.http_tls)):
        if endpoint is not None and tls is None:
            raise ConfigError(key_path("acceptors", key), "a TLS listener needs a [tls] section "
                              "with cert-file and key-file")
    return Config(
        broker=broker,
        acceptors=acceptors,
        stomp=_stomp(document.get("stomp", {})),
        address_settings=repository,
        addresses=_addresses(top.get("addresses", _array_of_tables, [])),
        security=security,
        tls=tls,
    )


def _host(endpoint: Endpoint | None) -> str | None:
    return endpoint.host if endpoint is not None else None


def _read_toml(path: Path) -> dict[str, object]:
    text = read_utf8(path, "config file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"invalid TOML: {exc}") from exc


def _path_value(value: object, key: str) -> Path:
    return Path(parse_str(value, key)).expanduser()


def _optional_path(value: object, key: str) -> Path | None:
    return None if value is None else _path_value(value, key)


def _broker(raw: object, data_dir_flag: str | None) -> BrokerConfig:
    table = _Table(raw, ("broker",), (*_BROKER_DEFAULTS, *SECURITY_BROKER_KEYS))
    d = _BROKER_DEFAULTS
    if data_dir_flag is not None:
        data_directory = _path_value(data_dir_flag, "--data-dir")
    else:
        data_directory = table.get("data-directory", _path_value, d["data-directory"])
    paging = table.get("paging-directory", _optional_path, None)
    journal = table.get("journal-directory", _optional_path, None)
    for key, directory in (("--data-dir" if data_dir_flag is not None else "broker.data-directory",
                            data_directory), ("broker.paging-directory", paging),
                           ("broker.journal-directory", journal)):
        if directory is not None and directory.exists() and not directory.is_dir():
            raise ConfigError(key, f"{directory} is a file, not a directory")
    return BrokerConfig(
        data_directory=data_directory,
        paging_directory=paging if paging is not None else data_directory / "paging",
        journal_directory=journal if journal is not None else data_directory / "journal",
        global_max_size=table.get("global-max-size", parse_size, default_global_max_size()),
        global_max_messages=table.get("global-max-messages", parse_int, d["global-max-messages"]),
        max_disk_usage=table.get("max-disk-usage", _percent, d["max-disk-usage"]),
        min_disk_free=table.get("min-disk-free", parse_size, d["min-disk-free"]),
        disk_scan_period=table.get("disk-scan-period", _period, d["disk-scan-period"]),
        page_sync_timeout=table.get("page-sync-timeout", _nanos_timeout, d["page-sync-timeout"]),
        journal_file_size=table.get("journal-file-size", _journal_size, d["journal-file-size"]),
        journal_sync=table.get("journal-sync", parse_bool, d["journal-sync"]),
        archive_data_logs=table.get("archive-data-logs", parse_bool, d["archive-data-logs"]),
        cleanup_period=table.get("cleanup-period", _period, d["cleanup-period"]),
        disk_full_policy=table.get("disk-full-policy", _disk_full_policy, d["disk-full-policy"]),
        message_expiry_scan_period=table.get("message-expiry-scan-period", _period_or_off,
                                             d["message-expiry-scan-period"]),
    )


def _percent(value: object, key: str) -> int:
    percent = parse_int(value, key)
    if percent > 100:
        raise ConfigError(key, f"{percent} is out of range (a percentage: 0-100, or -1 to disable)")
    return percent


def _period(value: object, key: str) -> float:
    """How often a periodic task runs (`disk-scan-period`, `cleanup-period`).

    A bare integer is milliseconds, as Artemis' `disk-scan-period` (default 5000) and
    ActiveMQ Classic KahaDB's `cleanupInterval` (default 30000, seed 004's clean-up period);
    at least 1 ms.
    """
    return parse_duration(value, key, bare_unit=MILLISECONDS, minimum=_MIN_PERIOD)


def _period_or_off(value: object, key: str) -> float:
    """`_period`, or -1 (an integer, as Artemis' `message-expiry-scan-period = -1`): off."""
    if value == -1 and not isinstance(value, bool):
        return -1.0
    return _period(value, key)


def _nanos_timeout(value: object, key: str) -> float:
    """`page-sync-timeout`: a bare integer is nanoseconds, as Artemis (default 3333333).

    0 is allowed: every page write batch is fsynced at once, without waiting for more.
    """
    return parse_duration(value, key, bare_unit=NANOSECONDS)


def _journal_size(value: object, key: str) -> int:
    return parse_size(value, key, disabled_ok=False, minimum=_MIN_JOURNAL_FILE_SIZE)


def _disk_full_policy(value: object, key: str) -> str:
    return parse_choice(value, key, DISK_FULL_POLICIES)


def _positive_size(value: object, key: str) -> int:
    return parse_size(value, key, disabled_ok=False, minimum=1)


def _positive_int(value: object, key: str) -> int:
    return parse_int(value, key, disabled_ok=False, minimum=1)


def _stomp(raw: object) -> StompConfig:
    table = _Table(raw, ("stomp",), _STOMP_DEFAULTS)
    d = _STOMP_DEFAULTS
    return StompConfig(
        max_frame_size=table.get("max-frame-size", _positive_size, d["max-frame-size"]),
        max_headers=table.get("max-headers", _positive_int, d["max-headers"]),
        max_header_length=table.get("max-header-length", _positive_size, d["max-header-length"]),
    )


def parse_endpoint(value: object, key: str) -> Endpoint | None:
    """`HOST:PORT` (IPv6 as `[::1]:PORT`); `false` or "off" switches the listener off.

    Port 0 is allowed: the OS picks a free port, which is what tests want.
    """
    if value is False or (isinstance(value, str) and value.strip().lower() == DISABLED_ACCEPTOR):
        return None
    if not isinstance(value, str):
        raise ConfigError(key, f'expected "HOST:PORT", got {show_value(value)}')
    host, sep, port_text = value.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # a bare IPv6 address: the port is ambiguous without brackets
    if not sep or not host or not port_text.isdigit() or any(c.isspace() for c in host):
        raise ConfigError(key, f'{show_value(value)} is not "HOST:PORT" (e.g. "127.0.0.1:61613")')
    port = int(port_text)
    if port > 65535:
        raise ConfigError(key, f"{show_value(value)}: port {port} is out of range (0-65535)")
    return Endpoint(host, port)


def _check_distinct_ports(listeners: list[tuple[str, Endpoint | None]]) -> None:
    """Two listeners on one host and port (a wildcard host meets every host): a config
    error naming both, rather than a bind failure at start. Port 0 (any free port) never
    clashes."""
    wildcards = ("", "0.0.0.0", "::")
    loopback = ("localhost", "127.0.0.1")  # the names a resolver gives one socket address
    seen: list[tuple[str, Endpoint]] = []
    for key, endpoint in listeners:
        if endpoint is None or endpoint.port == 0:
            continue
        for other, taken in seen:
            hosts = (taken.host, endpoint.host)
            same = hosts[0] == hosts[1] or all(h in loopback for h in hosts)
            if taken.port == endpoint.port and (same or any(h in wildcards for h in hosts)):
                raise ConfigError(key, f"{endpoint} is {other}'s too: each listener needs its own port")
        seen.append((key, endpoint))


def _acceptors(raw: object, *, stomp: str | None, http: str | None) -> AcceptorsConfig:
    table = _Table(raw, ("acceptors",), _ACCEPTOR_DEFAULTS)
    d = _ACCEPTOR_DEFAULTS
    return AcceptorsConfig(
        stomp=(
            parse_endpoint(stomp, "--stomp")
            if stomp is not None
            else table.get("stomp", parse_endpoint, d["stomp"])
        ),
        http=(
            parse_endpoint(http, "--http")
            if http is not None
            else table.get("http", parse_endpoint, d["http"])
        ),
        stomp_tls=table.get("stomp-tls", parse_endpoint, d["stomp-tls"]),
        http_tls=table.get("http-tls", parse_endpoint, d["http-tls"]),
        max_connections=table.get("max-connections", _positive_or_unlimited, d["max-connections"]),
        connect_timeout=table.get("connect-timeout", _timeout, d["connect-timeout"]),
    )


def _positive_or_unlimited(value: object, key: str) -> int:
    return parse_int(value, key, minimum=1)


def _timeout(value: object, key: str) -> float:
    """`connect-timeout`: a bare integer is milliseconds (as Artemis' TTLs); 0 switches it off."""
    return parse_duration(value, key, bare_unit=MILLISECONDS)


def _settings_tables(raw: object) -> list[tuple[str, object]]:
    if not isinstance(raw, Mapping):
        raise ConfigError(SETTINGS_SECTION, f"expected a table of matches, got {show_value(raw)}")
    return [(str(match), values) for match, values in raw.items()]


def _array_of_tables(value: object, key: str) -> list[object]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected an array of tables ([[{key}]]), got {show_value(value)}")
    return value


def _addresses(raw: list[object]) -> tuple[AddressConfig, ...]:
    addresses: list[AddressConfig] = []
    address_at: dict[str, str] = {}
    queue_at: dict[str, str] = {}
    for index, item in enumerate(raw):
        address = _address(item, ("addresses", index))
        _claim(address_at, address.name, key_path("addresses", index), "address")
        listed = isinstance(item, Mapping) and "queues" in item
        for q_index, queue in enumerate(address.queues):
            # An implicit anycast queue has no line of its own: point at its address.
            parts: tuple[_Key, ...] = ("addresses", index, "queues", q_index)
            _claim(queue_at, queue.name, key_path(*(parts if listed else parts[:2])), "queue")
        addresses.append(address)
    return tuple(addresses)


def _claim(seen: dict[str, str], name: str, where: str, kind: str) -> None:
    """Names are broker-wide: a second definition would silently shadow the first."""
    if name in seen:
        raise ConfigError(f"{where}.name", f'{kind} "{name}" is already defined at {seen[name]}')
    seen[name] = where


def _address(raw: object, path: tuple[_Key, ...]) -> AddressConfig:
    table = _Table(raw, path, _ADDRESS_KEYS)
    name = table.require("name", parse_str)
    routing_type = table.get("routing-type", _routing_type, "anycast")
    queues_raw = table.get("queues", _array_of_tables, [])
    queues = tuple(_queue(item, (*path, "queues", i)) for i, item in enumerate(queues_raw))
    if not queues and routing_type == "anycast":
        # As /queue/NAME: an anycast address is the queue of the same name.
        queues = (QueueConfig(name),)
    return AddressConfig(name=name, routing_type=routing_type, queues=queues)


def _routing_type(value: object, key: str) -> str:
    return parse_choice(value, key, ROUTING_TYPES)


def _queue(raw: object, path: tuple[_Key, ...]) -> QueueConfig:
    table = _Table(raw, path, _QUEUE_KEYS)
    name = table.require("name", parse_str)
    selector = table.get("filter", _optional_filter, None)
    durable = table.get("durable", parse_bool, True)
    return QueueConfig(name=name, filter=selector, durable=durable)


def _optional_filter(value: object, key: str) -> str | None:
    if value is None:
        return None
    text = parse_str(value, key, empty_ok=True)
    if not text.strip():
        return None
    _check_selector(text, key)
    return text


def _check_selector(text: str, key: str) -> None:
    """Compile the selector now so a typo fails at start-up, not at the first message.

    Imported lazily and skipped when the selector module is not available, so the config
    loads in any build of the package.
    """
    try:
        selector = importlib.import_module("pagemq.selector")
    except ImportError:
        return
    compile_selector = getattr(selector, "compile", None)
    selector_error = getattr(selector, "SelectorError", None)
    if compile_selector is None or not isinstance(selector_error, type):
        return
    try:
        compile_selector(text)
    except selector_error as exc:
        raise ConfigError(key, f"bad selector {show_value(text)}: {exc}") from exc

"""Parsing of configuration values: sizes, durations, counts, choices.

Every parser takes the value as TOML (or a command-line flag) gave it plus the dotted key it
came from, and raises `ConfigError` whose one-line message names that key: the operator
sees *which* setting is wrong, not a traceback.

Sizes follow Artemis' `ByteUtil.convertTextBytes` (artemis-commons): a number of bytes, or a
number followed by K, M, G (and, as an extension, T), each optionally followed by `i` and/or
`B`, case-insensitive. Artemis treats every one of these units as a power of 1024, so
`"10M"`, `"10MB"` and `"10MiB"` are all 10 * 1024**2 bytes; pagemq keeps that meaning so that
values copied from a broker.xml mean the same thing here. -1 means "disabled".

Durations are a number with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`) or a bare
integer, which counts in the unit Artemis (or ActiveMQ Classic) uses for that key: the caller
says which (`bare_unit`), because one unit for every key is wrong for most of them. Artemis
spells `page-sync-timeout` in nanoseconds but its periods (`disk-scan-period`, KahaDB's
`cleanupInterval`) in milliseconds, so `disk-scan-period = 5000` copied from a broker.xml must
mean 5 s, not 5 us. They come back as float seconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeGuard

__all__ = [
    "DISABLED",
    "MILLISECONDS",
    "NANOSECONDS",
    "ConfigError",
    "format_size",
    "key_path",
    "parse_bool",
    "parse_choice",
    "parse_duration",
    "parse_int",
    "parse_size",
    "parse_str",
    "show_value",
]

DISABLED = -1

_SIZE = re.compile(r"^\s*(\d+)\s*(?:([kmgt])(i)?)?(b)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE_HINT = '(use bytes or a unit like "10MiB")'

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|min|h)?\s*$", re.IGNORECASE)
_SECONDS_PER_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
NANOSECONDS = "ns"
MILLISECONDS = "ms"
_UNIT_NAMES = {NANOSECONDS: "nanoseconds", MILLISECONDS: "milliseconds"}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class ConfigError(Exception):
    """A bad configuration file or flag.

    Lives here rather than in `pagemq.server.config` because the core's address-settings
    repository validates too, and the core must not import the server layer; the server
    re-exports it. `str(error)` is one line, `"<key>: <problem>"`, ready for stderr.
    """

    def __init__(self, key: str, problem: str) -> None:
        one_line = " ".join(problem.split())
        super().__init__(f"{key}: {one_line}" if key else one_line)
        self.key = key
        self.problem = one_line


def key_path(*parts: str | int) -> str:
    """Spell a key the way the operator would find it in the file.

    Dotted TOML keys, quoted when they are not bare (`address-settings."orders.#"`), and
    array positions as `[i]`, so an error points at one line of the file.
    """
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = part if _BARE_KEY.match(part) else json.dumps(part, ensure_ascii=False)
        out = f"{out}.{text}" if out else text
    return out


def show_value(value: object) -> str:
    """Render a value as TOML would spell it, so messages quote what the user wrote."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return str(value)


def _is_int(value: object) -> TypeGuard[int]:
    # TOML booleans are Python ints; `true` is never a valid number of anything.
    return isinstance(value, int) and not isinstance(value, bool)


def parse_size(value: object, key: str, *, disabled_ok: bool = True, minimum: int = 0) -> int:
    """A byte count from an int or a unit string; -1 (when allowed) means disabled."""
    if isinstance(value, str):
        text = value.strip()
        if text == "-1":
            number = DISABLED
        else:
            match = _SIZE.match(text)
            if match is None:
                raise ConfigError(key, f"{show_value(value)} is not a size {_SIZE_HINT}")
            number = int(match.group(1)) * _SIZE_FACTORS.get((match.group(2) or "").lower(), 1)
    elif _is_int(value):
        number = value
    else:
        raise ConfigError(key, f"{show_value(value)} is not a size {_SIZE_HINT}")
    return _check_limit(number, value, key, disabled_ok=disabled_ok, minimum=minimum)


def _check_limit(number: int, value: object, key: str, *, disabled_ok: bool, minimum: int) -> int:
    """-1 is the one negative that means something; anything else below `minimum` is a typo."""
    if number == DISABLED and disabled_ok:
        return number
    if number < minimum:
        off = ", or -1 to disable" if disabled_ok else ""
        raise ConfigError(key, f"{show_value(value)} is out of range (must be >= {minimum}{off})")
    return number


def parse_int(value: object, key: str, *, disabled_ok: bool = True, minimum: int = 0) -> int:
    """A plain count (messages, attempts, headers); -1 (when allowed) means disabled."""
    if not _is_int(value):
        raise ConfigError(key, f"expected an integer, got {show_value(value)}")
    return _check_limit(value, value, key, disabled_ok=disabled_ok, minimum=minimum)


def parse_duration(
    value: object, key: str, *, bare_unit: str = NANOSECONDS, minimum: float = 0.0
) -> float:
    """Seconds from a unit string, or from a bare number counted in `bare_unit`.

    `bare_unit` is the unit Artemis uses for this key (`NANOSECONDS` or `MILLISECONDS`); it
    applies to a TOML integer and to a string without a unit alike (`5000` = `"5000"`).
    `minimum` (seconds) is the smallest value that makes sense for the key; below it the
    error names the key and that minimum.
    """
    if bare_unit not in _SECONDS_PER_UNIT:
        raise ValueError(f"unknown duration unit {bare_unit!r}")
    if _is_int(value):
        seconds = value * _SECONDS_PER_UNIT[bare_unit]
    elif isinstance(value, str) and (match := _DURATION.match(value)) is not None:
        unit = (match.group(2) or bare_unit).lower()
        seconds = float(match.group(1)) * _SECONDS_PER_UNIT[unit]
    else:
        raise ConfigError(key, f"{show_value(value)} is not a duration {_duration_hint(bare_unit)}")
    if seconds < 0:
        raise ConfigError(key, f"{show_value(value)} is out of range (must be zero or more)")
    if seconds < minimum:
        raise ConfigError(
            key,
            f"{show_value(value)} is too short (must be at least {_format_seconds(minimum)}; "
            f"{_duration_hint(bare_unit)[1:-1]})",
        )
    return seconds


def _duration_hint(bare_unit: str) -> str:
    name = _UNIT_NAMES.get(bare_unit, bare_unit)
    return f'(a bare integer counts {name}; or use a unit like "5s" or "3ms")'


def _format_seconds(seconds: float) -> str:
    """`1ms`, `5s`: the largest unit that spells `seconds` as a whole number, for messages."""
    for unit in ("h", "m", "s", "ms", "us", "ns"):
        count = seconds / _SECONDS_PER_UNIT[unit]
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    return f"{seconds}s"


def read_utf8(path: Path, what: str, error: type[ConfigError] = ConfigError) -> str:
    """The text of a configuration file (`what`: "config file", "users file"); `error` (one
    line naming the file) when it cannot be read or is not UTF-8."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise error(str(path), f"cannot read the {what}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise error(str(path), f"not UTF-8 text ({exc.reason})") from None


def parse_bool(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"expected true or false, got {show_value(value)}")
    return value


def parse_str(value: object, key: str, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a string, got {show_value(value)}")
    if not empty_ok and not value.strip():
        raise ConfigError(key, "must not be empty")
    return value


def parse_choice(value: object, key: str, choices: Iterable[str]) -> str:
    """One of a fixed set, matched case-insensitively and returned in its canonical spelling.

    Case-insensitive because Artemis users write `PAGE` while the interface writes
    `anycast`; both habits should work.
    """
    options = tuple(choices)
    if isinstance(value, str):
        for option in options:
            if value.strip().lower() == option.lower():
                return option
    raise ConfigError(key, f"{show_value(value)} is not one of {' | '.join(options)}")


def format_size(size: int) -> str:
    """The shortest exact unit spelling ("10MiB"), for logs and documentation."""
    if size <= 0:
        return str(size)
    for suffix, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)

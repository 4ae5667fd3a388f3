"""Reading the `.option(...)` values of a pagemq read or write, and failing on a bad one.

Spark hands options over as strings in a case-insensitive mapping. Every problem is a
`PagemqOptionError` whose message starts with the option's name, so whatever Spark wraps it
in (an AnalysisException at `load()`, a failed write) still says which option to fix.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping

from pagemq.selector import SelectorError
from pagemq.selector import compile as compile_selector

__all__ = ["MAX_TIMEOUT", "PagemqOptionError", "check_known", "flag", "number", "required", "selector",
           "text"]


class PagemqOptionError(ValueError):
    """A missing or bad option of the pagemq data source."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"pagemq option '{option}': {problem}")
        self.option = option


def text(options: Mapping[str, str], name: str) -> str | None:
    """The option's value, None when it is not given or blank."""
    value = options.get(name)
    if value is None or not str(value).strip():
        return None
    return str(value)


def required(options: Mapping[str, str], name: str, why: str) -> str:
    value = text(options, name)
    if value is None:
        raise PagemqOptionError(name, f"required ({why})")
    return value


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = text(options, name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise PagemqOptionError(name, f"must be true or false, not {value!r}")
    return lowered == "true"


# Seconds a timeout option may give: a socket timeout overflows the platform's time_t
# above ~1e9 s, and no wait of a broker's answer is meant to outlast days.
MAX_TIMEOUT = 1_000_000.0


def number(options: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0,
           maximum: float | None = None, integer: bool = False) -> float:
    """A number at least `minimum` and at most `maximum` (an int when `integer`)."""
    value = text(options, name)
    if value is None:
        return default
    try:
        parsed: float = int(value) if integer else float(value)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise PagemqOptionError(name, f"must be {kind}, not {value!r}") from None
    if not parsed >= minimum:
        raise PagemqOptionError(name, f"must be at least {minimum:g}, not {value!r}")
    if not math.isfinite(parsed):  # (an int always is) a timeout of inf overflows time_t
        raise PagemqOptionError(name, f"must be a finite number, not {value!r}")
    if maximum is not None and parsed > maximum:
        raise PagemqOptionError(name, f"must be at most {maximum:,g}, not {value!r}")
    return parsed


def selector(options: Mapping[str, str]) -> str | None:
    """The `selector` option's text, checked: it must compile (as STOMP's selectors)."""
    value = text(options, "selector")
    if value is not None:
        try:
            compile_selector(value)
        except SelectorError as exc:
            raise PagemqOptionError("selector", f"invalid selector {value!r}: {exc}") from None
    return value


# Options Spark itself may hand a data source along with the user's (`load(path)`,
# `save(path)`, `writeStream`'s checkpoint).
SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})


def check_known(options: Mapping[str, str], known: Iterable[str], what: str) -> None:
    """Refuse an option `what` (a stream read, a batch read, the sink) does not take: Spark
    would pass a misspelt one on silently, and a misspelt `selector` on a shared queue reads
    (and acknowledges) the other consumers' messages too."""
    names = {name.lower(): name for name in known}
    for key in options:
        lowered = key.lower()
        if lowered in names or lowered in SPARK_OPTIONS:
            continue
        close = difflib.get_close_matches(lowered, list(names), n=1, cutoff=0.6)
        hint = f" (did you mean '{names[close[0]]}'?)" if close else ""
        raise PagemqOptionError(key, f"not an option of the pagemq {what}{hint}; its options are "
                                     f"{', '.join(sorted(names.values(), key=str.lower))}")

"""How `pagemq serve` logs: plain text or one JSON object per line, or a dictConfig file.

- `--log-format text` (default): `time LEVEL logger: message`, as before.
- `--log-format json`: one JSON object per line with `time` (UTC, ISO 8601 with
  milliseconds), `level`, `logger`, `message`, any extra fields the line carries (a
  connection line's `peer`, `user`, `session`; a cleanup's counts; ...) and `exception`
  (the formatted traceback) when there is one. Log shippers (Loki, Elasticsearch, Vector)
  read it without a parsing rule.
- `--log-config FILE`: a `logging.config.dictConfig` dictionary in JSON (`.json`), TOML
  (`.toml`) or YAML (`.yaml`/`.yml`, when PyYAML is installed). It replaces the two flags
  above; `pagemq.server.log_setup.JsonFormatter` can be named in it as a formatter
  (`"()": "pagemq.server.log_setup.JsonFormatter"`).

A file that cannot be read or applied is a `LogConfigError` whose one-line message names
the file; the command line turns it into exit 2, as any configuration error.
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["LOG_FORMATS", "JsonFormatter", "LogConfigError", "configure_logging", "read_log_config"]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Attributes every LogRecord has: whatever else a record carries came in `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class LogConfigError(Exception):
    """A log configuration that cannot be used; the message names the file and the problem."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped by JSON)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _utc_iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _utc_iso(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


def read_log_config(path: Path) -> dict[str, Any]:
    """The dictConfig dictionary in `path` (JSON, TOML or YAML by the file's suffix)."""
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogConfigError(f"{path}: cannot read the log config: {exc}") from exc
    try:
        if suffix == ".toml":
            document: object = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            document = _yaml(path, text)
        elif suffix == ".json":
            document = json.loads(text)
        else:
            raise LogConfigError(f"{path}: unknown log config format {suffix or '(no suffix)'!r} "
                                 "(use .json, .toml, .yaml or .yml)")
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise LogConfigError(f"{path}: invalid {suffix[1:].upper()}: {exc}") from exc
    if not isinstance(document, dict):
        raise LogConfigError(f"{path}: expected a dictConfig table at the top, got {type(document).__name__}")
    document.setdefault("version", 1)
    # dictConfig's default would silence every logger that exists before it runs and is not
    # named in the file (asyncio's, for one): a surprise in a server, so off unless asked for.
    document.setdefault("disable_existing_loggers", False)
    return document


def _yaml(path: Path, text: str) -> object:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise LogConfigError(
            f"{path}: YAML needs PyYAML, which is not installed (use .json or .toml)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LogConfigError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from exc


def configure_logging(level: str = "INFO", log_format: str = "text", config_file: Path | None = None) -> None:
    """Set up the root logger for `pagemq serve`, to stderr unless `config_file` says otherwise."""
    if config_file is not None:
        document = read_log_config(config_file)
        try:
            logging.config.dictConfig(document)
        except (ValueError, TypeError, AttributeError, ImportError) as exc:
            cause = exc.__cause__ or exc
            raise LogConfigError(f"{config_file}: not a usable dictConfig: {exc}"
                                 + (f" ({cause})" if cause is not exc else "")) from exc
        return
    if log_format not in LOG_FORMATS:
        raise LogConfigError(f"--log-format: {log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)

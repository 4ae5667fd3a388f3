"""A journal cleanup's results as a sentence for the log (the report is counts by key).

`deleted 3 spent files, compacted 2 files (1,204 live records copied), reclaimed 96.0 MiB`
reads better in a log than `{'deleted': 3, 'archived': 0, ...}`; zero counts are left out,
and the counts go into the line's extra fields too (`--log-format json`).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["describe_cleanup"]


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else _plural(size, "byte")


def describe_cleanup(report: Mapping[str, int]) -> str:
    """`report`: `CleanupReport`'s fields (deleted, archived, compacted_files, ...)."""
    parts = []
    if deleted := report.get("deleted", 0):
        parts.append(f"deleted {_plural(deleted, 'spent file')}")
    if archived := report.get("archived", 0):
        parts.append(f"archived {_plural(archived, 'spent file')}")
    if compacted := report.get("compacted_files", 0):
        copied = report.get("compacted_records", 0)
        parts.append(f"compacted {_plural(compacted, 'file')} ({_plural(copied, 'live record')} copied)")
    if reclaimed := report.get("bytes_reclaimed", 0):
        parts.append(f"reclaimed {_mib(reclaimed)}")
    if set_aside := report.get("set_aside", 0):
        parts.append(f"set aside {_plural(set_aside, 'damaged file')} (renamed *.jnl.damaged)")
    if errors := report.get("errors", 0):
        parts.append(f"{_plural(errors, 'error')} (logged above; the files stay for the next cleanup)")
    known = {"deleted", "archived", "compacted_files", "compacted_records", "bytes_reclaimed",
             "set_aside", "errors"}
    parts += [f"{key.replace('_', ' ')} {value:,}" for key, value in sorted(report.items())
              if key not in known and value]
    return ", ".join(parts) if parts else "nothing to do"

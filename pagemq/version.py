"""The installed package's version, for `pagemq --version` and `GET /api/broker`."""

from __future__ import annotations

__all__ = ["package_version"]


def package_version() -> str:
    """Read from the package metadata when asked (importing pagemq pays nothing for it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pagemq")
    except PackageNotFoundError:
        return "unknown (not installed as a package)"

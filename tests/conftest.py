"""For every test run: the package's bytecode written once, before any broker starts.

A broker process, a Spark worker and this process all import `pagemq`; with
`PYTHONDONTWRITEBYTECODE` set (as on our machines) none of them writes the `.pyc` files of
an editable install, so each one compiled the whole package from source again: about half
of a broker's 1 s start-up, and the suite starts brokers hundreds of times. `compileall`
writes them regardless, and only for modules changed since (a stale `.pyc` is never used:
the import checks the source's modification time)."""

from __future__ import annotations

import compileall
from pathlib import Path

import pagemq


def pytest_sessionstart() -> None:
    compileall.compile_dir(Path(pagemq.__file__).parent, quiet=1)

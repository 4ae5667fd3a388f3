"""The console's files ship in the package: every file under the static directory is
matched by pyproject's package-data globs (an installed wheel has them all), and every
module the page imports exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pagemq.integrations.console_api import STATIC_DIRECTORY

ROOT = Path(__file__).resolve().parents[3]


def test_every_console_file_is_in_the_package_data() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = setuptools["package-data"]["pagemq"]
    package = ROOT / "pagemq"
    shipped = {path for pattern in data for path in package.glob(pattern)}
    files = {path for path in STATIC_DIRECTORY.rglob("*") if path.is_file()}
    assert files and files <= shipped, sorted(str(p.relative_to(package)) for p in files - shipped)


def test_every_module_the_console_imports_exists() -> None:
    scripts = [*STATIC_DIRECTORY.glob("js/*.js")]
    for script in scripts:
        for target in re.findall(r"from '(\./[^']+)'", script.read_text()):
            assert (script.parent / target).is_file(), f"{script.name} imports missing {target}"
    index = (STATIC_DIRECTORY / "index.html").read_text()
    for target in re.findall(r'(?:src|href)="([^":#]+)"', index):  # files, not links in the page
        assert (STATIC_DIRECTORY / target).is_file(), f"index.html refers to missing {target}"

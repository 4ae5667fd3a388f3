"""The model-based test drives real broker processes with the end-to-end helpers
(tests/e2e/brokerproc.py), which live next to the e2e tests rather than in a package."""

from __future__ import annotations

import sys
from pathlib import Path

_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

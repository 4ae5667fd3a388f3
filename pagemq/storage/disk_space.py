"""Running out of disk space, as the storage layer tells it apart from other write errors.

A write that fails with ENOSPC (the filesystem is full) or EDQUOT (the user's quota is
spent) is not a broken disk: once space is freed the same write succeeds. The journal
keeps such a batch and writes it again once there is room (`group_commit.py`); a page batch
is cut back and refused, and later batches go to a new page (`paging/page_writer.py`).
Either way the broker stops taking messages until space is back (`core/disk.py`).
"""

from __future__ import annotations

import errno

__all__ = ["NO_SPACE_ERRNOS", "is_no_space"]

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(error: BaseException | None) -> bool:
    """Whether `error`, or an OSError it was raised from, says the disk (or quota) is full."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS:
            return True
        error = error.__cause__
        seen += 1
    return False

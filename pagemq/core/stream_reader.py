"""One streaming reader of a queue (core/stream.py): its committed offset and the ids it was
served this run, which are all a commit may acknowledge (see core/stream.py, "Sharing with
STOMP consumers"). Kept with the queue (`Queue.stream_readers`), shown by the management
views as the reader's lag.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field

__all__ = ["StreamReader"]


@dataclass(slots=True)
class StreamReader:
    """One named streaming reader of one queue: what it committed and what it was served."""

    name: str
    committed: int = 0  # highest offset committed this run (0: none yet)
    last_read: int = 0  # highest `upto` of a range read this run
    # Ids served by range reads this run, one sorted array per read; a commit acknowledges
    # served ids only (ids at or below `tracked_from`: every one, none were read this run).
    served: list[array[int]] = field(default_factory=list)
    tracked_from: int | None = None

    def note_read(self, after: int, upto: int) -> None:
        """A range read starts: ids above `after` count as served only when served."""
        self.tracked_from = after if self.tracked_from is None else min(self.tracked_from, after)
        self.last_read = max(self.last_read, upto)

    def note_served(self, ids: array[int]) -> None:
        if ids:
            self.served.append(ids)

    def was_served(self, message_id: int) -> bool:
        if self.tracked_from is None or message_id <= self.tracked_from:
            return True
        for ids in self.served:
            index = bisect.bisect_left(ids, message_id)
            if index < len(ids) and ids[index] == message_id:
                return True
        return False

    def committed_to(self, offset: int) -> None:
        """Everything up to `offset` is acknowledged: forget what was served below it."""
        self.committed = max(self.committed, offset)
        self.served = [ids for ids in self.served if ids[-1] > self.committed]

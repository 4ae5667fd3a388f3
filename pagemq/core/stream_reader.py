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
    # Ids served by range reads this run, as sorted arrays that do not overlap, in order
    # (`_firsts`, `_lasts`: their first and last ids), so a lookup is two bisections however
    # many chunks were served; a chunk overlapping earlier ones (a range read again) is
    # merged with them. A commit acknowledges served ids only (and every id at or below
    # `tracked_from`: none of those were read this run).
    served: list[array[int]] = field(default_factory=list)
    tracked_from: int | None = None
    _firsts: list[int] = field(default_factory=list)
    _lasts: list[int] = field(default_factory=list)

    def note_read(self, after: int, upto: int) -> None:
        """A range read starts: ids above `after` count as served only when served."""
        self.tracked_from = after if self.tracked_from is None else min(self.tracked_from, after)
        self.last_read = max(self.last_read, upto)

    def note_served(self, ids: array[int]) -> None:
        """A chunk of a range read went out: `ids`, ascending."""
        if not ids:
            return
        first, last = ids[0], ids[-1]
        low = bisect.bisect_left(self._lasts, first)  # the first array ending at or after `first`
        high = bisect.bisect_right(self._firsts, last)  # arrays starting at or before `last`
        if low < high:
            ids = array("q", sorted(set(ids).union(*self.served[low:high])))
            first, last = ids[0], ids[-1]
        self.served[low:high] = [ids]
        self._firsts[low:high] = [first]
        self._lasts[low:high] = [last]

    def was_served(self, message_id: int) -> bool:
        if self.tracked_from is None or message_id <= self.tracked_from:
            return True
        index = bisect.bisect_right(self._firsts, message_id) - 1
        if index < 0 or self._lasts[index] < message_id:
            return False
        ids = self.served[index]
        at = bisect.bisect_left(ids, message_id)
        return at < len(ids) and ids[at] == message_id

    def committed_to(self, offset: int) -> None:
        """Everything up to `offset` is acknowledged: forget what was served below it."""
        self.committed = max(self.committed, offset)
        done = bisect.bisect_right(self._lasts, self.committed)
        del self.served[:done], self._firsts[:done], self._lasts[:done]

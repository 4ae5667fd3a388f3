"""One streaming reader of a queue (core/stream.py): its committed offset and the ids it was
served this run, which are all a commit may acknowledge (see core/stream.py, "Sharing with
STOMP consumers"). Kept with the queue (`Queue.stream_readers`), shown by the management
views as the reader's lag.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from pagemq.storage.paging.ordinal_set import OrdinalSet

__all__ = ["ServedPage", "StreamReader"]


@dataclass(slots=True)
class ServedPage:
    """The records of one page a reader was served this run: their ordinals (a bitmap) and
    the highest message id among them. A commit at or above that id may complete the page
    as a whole (`PageCursor.complete_served`) instead of acknowledging record by record."""

    ordinals: OrdinalSet = field(default_factory=OrdinalSet)
    last_id: int = 0


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
    # Paged records served this run, by page number (see ServedPage).
    pages: dict[int, ServedPage] = field(default_factory=dict)

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

    def note_served_page(self, page_no: int, ordinals: Iterable[int], last_id: int) -> None:
        """A chunk of a range read went out holding these records of page `page_no`."""
        served = self.pages.get(page_no)
        if served is None:
            served = self.pages[page_no] = ServedPage()
        served.ordinals.update(ordinals)
        served.last_id = max(served.last_id, last_id)

    def pages_through(self, offset: int) -> list[tuple[int, OrdinalSet]]:
        """(page, ordinals served) of the pages whose served records all lie at or below
        `offset`, in page order."""
        return [(page_no, served.ordinals) for page_no, served in sorted(self.pages.items())
                if served.last_id <= offset]

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
        # A page served below the offset is completed or acknowledged record by record now:
        # what is served of it later is all a commit needs to know then.
        for page_no in [p for p, served in self.pages.items() if served.last_id <= self.committed]:
            del self.pages[page_no]

"""The paged-queue store over page files and the journal: what a broker with a data directory uses.

Records go to the address's `PageStore` (one atomic frame per batch, fsynced by its writer
thread); acknowledgements, completions and page-transaction commits go to the journal as
cursor records (`CursorJournal`, the broker's `MessageStore`). A restart rebuilds the
bookkeeping from the page summaries and those records (`recover`).
"""

from __future__ import annotations

from collections.abc import Callable

from pagemq.storage.paging.page_store import PageStore
from pagemq.storage.paging.paged_queues import PagedQueues
from pagemq.storage.paging.queue_store import CursorRecords


class FilePagedQueueStore(PagedQueues):
    def __init__(self, pages: PageStore, records: CursorRecords, *,
                 summaries: Callable[[bytes], object] | None = None) -> None:
        super().__init__(pages, records, summaries=summaries)
        self.page_store = pages

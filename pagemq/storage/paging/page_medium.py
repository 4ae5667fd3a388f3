"""What the paged-queue bookkeeping needs of page storage: the seam between the two stores.

`page_store.PageStore` (page files, a writer thread) and `memory_pages.MemoryPages` (pages
held in memory) both provide it; `paged_queues.PagedQueues` keeps every queue's place in
either one. Its guarantees are PageStore's (see that module's docstring): an append is one
atomic batch; `read_page` yields only what was readable when it was called, and nothing
once the page is deleted; after a restart non-persistent records are skipped and not
counted; page numbers are never reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.page_io import PageIO, ReadSize
from pagemq.storage.paging.page_store import FRAME_SPAN_BYTES, PageFrames, PageInfo, RecordsLost


class PageMedium(Protocol):
    address: str
    # Where a queue's in-order reading advances `read_page`'s iterator (see page_io); None:
    # synchronously, on the loop (pages held in memory).
    page_io: PageIO | None
    on_records_lost: Callable[[RecordsLost], None]

    def append(self, records: Sequence[PagedRecord], *, summary_input: Sequence[object] | None = None,
               atomic: bool = True) -> tuple[int, int, asyncio.Future[None] | None]: ...

    def room(self, size: int) -> int:
        """Bytes an append of at least `size` bytes may take without taking a page past
        `page-size-bytes`: what the live page has left when `size` fits there, else a whole
        page (the append rolls it first). What groups a read's SENDs asks (core/routing)."""

    def read_page(self, page_no: int, start_ordinal: int = 0, *, size: ReadSize | None = None
                  ) -> Iterator[tuple[int, PagedRecord]]: ...

    def read_page_ahead(self, page_no: int, start_ordinal: int, *, size: ReadSize,
                        arrived: Callable[[], None]) -> Iterator[tuple[int, PagedRecord] | None]:
        """`read_page`, None while the next records are read in the page-I/O worker
        (`arrived` follows): see PageStore.read_page_ahead."""

    def frame_spans(self, page_no: int, start_ordinal: int = 0, *, span_bytes: int = FRAME_SPAN_BYTES
                    ) -> PageFrames | None:
        """The page's readable frames as byte spans (PageStore.frame_spans); None where
        there are no bytes to hand out (pages in memory) or damage: read records instead."""

    def fully_readable(self, page_no: int) -> bool: ...

    def live_page_no(self) -> int: ...

    def roll(self) -> None: ...

    def flush(self) -> asyncio.Future[None]: ...

    def delete_page(self, page_no: int) -> asyncio.Future[None] | None: ...

    def page_info(self, page_no: int) -> PageInfo | None: ...

    def pages(self) -> list[PageInfo]: ...

    def page_count(self) -> int: ...

    async def close(self) -> None: ...

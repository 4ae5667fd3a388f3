"""The paged-queue store contract: what the broker core may ask of an address's paged data.

An address in page mode keeps one copy of each paged message, listing the queues it was
routed to; each queue reads its share back, acknowledges it, and is eventually done with
each page. Everything about *where* a queue stands in that data lives behind this contract:
its read position, which records it has claimed ahead or acknowledged, which pages it is
done with, the journal's cursor records that make this survive a restart, and the deletion
of a page (and then of its cursor records) once every queue is done with it. The core keeps
the *delivery* decisions: how far to read (read limits), refs held back across a restart,
a selective consumer's look-ahead, who gets what, memory charging and decoding.

Two implementations share one bookkeeping (`paged_queues.PagedQueues`, `queue_cursor`):
`FilePagedQueueStore` over the page files (`page_store.PageStore`) and the journal, and
`MemoryPagedQueueStore` over pages held in memory (`memory_pages.MemoryPages`); one contract
suite (tests/contract/test_paged_queue_store.py) runs over both, as NATS runs one suite over
its memory and file stream stores. Only storage types cross: ints, bytes, `PagedRecord`,
the journal's cursor records. Positions are (page number, ordinal within the page).

Loop-only: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pagemq.storage.api import CursorAck, CursorComplete, PageTxCommit
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.page_io import ReadSize
from pagemq.storage.paging.page_store import PageFrames, RecordsLost

__all__ = [
    "AckWriter",
    "Appended",
    "CursorJournal",
    "CursorRecords",
    "Entry",
    "PageFrames",
    "PageSpan",
    "PageView",
    "PagedQueue",
    "PagedQueueStore",
    "PagedRecovery",
    "Position",
    "QueueStoreListener",
    "RecoveredQueue",
]

Position = tuple[int, int]
"""(page number, ordinal within the page)."""

Entry = tuple[int, int, PagedRecord]
"""(page number, ordinal, record): one record of a queue at its position."""


class CursorJournal(Protocol):
    """The journal operations the store needs for its cursor records (a `MessageStore` has
    them): acks and completions are written here, and deleted with their page."""

    def cursor_ack(self, record: CursorAck) -> None: ...

    def cursor_complete(self, record: CursorComplete) -> None: ...

    def delete_record(self, record_id: int) -> None: ...

    def flush(self) -> asyncio.Future[None]: ...


class AckWriter(Protocol):
    """Something holding gathered acks to write as cursor records (see `CursorRecords`)."""

    def write_acks(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CursorRecords:
    """How a store writes its cursor records: to `journal`, under ids from `new_id` (the
    broker's, so they never collide with other records). Acks are gathered and written once
    per loop turn: `acks_gathered` is told when a store holds some (the broker writes them
    before anything that promises them); None: the store writes them at the end of the turn.
    """

    journal: CursorJournal
    new_id: Callable[[], int]
    acks_gathered: Callable[[AckWriter], None] | None = None


class QueueStoreListener(Protocol):
    """What the store tells its owner (the core's pager), with queue ids only."""

    def wake(self, queue_id: int) -> None:
        """What the queue's reading stopped for (a write, a transaction) happened: read on."""

    def withdrawn(self, queue_ids: list[int]) -> None:
        """Records counted for these queues (an id per record) will never be theirs: their
        write failed, or their transaction was abandoned."""

    def records_lost(self, lost: RecordsLost, gone: dict[int, int]) -> None:
        """Damage took records: `gone` is how many each queue stopped counting (those it had
        read, claimed or acknowledged before stay its own)."""


@dataclass(slots=True)
class Appended:
    """Where an appended batch went; `durable` resolves once it is written and synced (None
    when no record of it is persistent)."""

    page_no: int
    first: int
    durable: asyncio.Future[None] | None


@dataclass(frozen=True, slots=True)
class PageView:
    """One page as an operator sees it (the console's page list): its file, the range of
    message ids it holds, and, asked for one queue, that queue's share of it. After a
    restart the counts of a page from an earlier run are of its persistent records only
    (non-persistent ones did not survive), as `PageInfo` counts them."""

    page_no: int
    file: str            # the page file's name in the address's page folder
    first_id: int        # lowest message id on the page (0 for none)
    last_id: int         # highest message id on the page (0 for none)
    records: int         # records on the page, every queue's
    size: int            # bytes on disk (the readable part)
    live: bool           # the page being appended to (not closed yet)
    queues_holding: int  # queues not yet done with the page
    queue_records: int | None = None       # records on the page for the queue asked about
    queue_acknowledged: int | None = None  # of those, acknowledged (or purged) already


@dataclass(frozen=True, slots=True)
class PageSpan:
    """A page as a queue's streaming reader may count it without reading it
    (`PagedQueue.span`): the page's message ids lie in `first_id..last_id`, and `records`
    of them are the queue's and on disk only (not acknowledged, read into memory, claimed
    or lost)."""

    page_no: int
    first_id: int
    last_id: int
    records: int


@dataclass(slots=True)
class RecoveredQueue:
    paged: int     # records still to read
    first_id: int  # message id of the first record of its first page still held


@dataclass(slots=True)
class PagedRecovery:
    """What start-up rebuilt for the caller: the queues that still have paged records, and
    cursor and commit records whose page is gone (delete them once the journal runs)."""

    queues: dict[int, RecoveredQueue] = field(default_factory=dict)
    stale: list[int] = field(default_factory=list)


class PagedQueue(Protocol):
    """One queue's share of an address's paged data, as its cursor bookkeeping sees it."""

    queue_id: int
    unread: int  # records on disk for the queue, not read into memory (nor claimed)
    waiting_for_write: bool  # reading stopped until the page's appended records are written
    # Bytes of records the queue's in-order reading reads at a time (page file reads and
    # read-ahead chunks): the core lowers it when many queues share a tight memory budget.
    read_chunk_bytes: int

    @property
    def reading(self) -> bool:
        """`peek` answered None because the next records are being read in the page-I/O
        worker (storage/paging/page_io.py): not "none left"; `listener.wake` follows when
        they are in (or, should the page be completed first, at the next loop turn)."""

    def peek(self) -> Entry | None:
        """The next record for the queue at its read position, not taken: the position
        stays on it. Skips acknowledged, claimed, voided and lost records. None when nothing
        is readable now (then `PagedQueueStore.listener.wake` says when to ask again if a
        write, an undecided transaction or a page read in the worker is in the way)."""

    def take(self) -> Entry | None:
        """`peek`, and the read position moves past it: the record is now in memory."""

    def position(self) -> Position:
        """The read position: every record before it is in memory or acknowledged."""

    def pages_from(self, page_no: int) -> list[int]:
        """The queue's pages from `page_no` on (pages it still has records in), in order."""

    def read(self, page_no: int, ordinal: int = 0, *, claimed: bool = False
             ) -> Iterator[tuple[int, PagedRecord]]:
        """(ordinal, record) of the queue's records of one page from `ordinal` on, leaving
        out acknowledged, voided and lost ones, and claimed ones unless `claimed`. Readable
        now only: records appended later are not seen (see `fully_readable`)."""

    def frames(self, page_no: int, ordinal: int = 0) -> PageFrames | None:
        """The page's readable frames from the one holding `ordinal` as byte spans, with this
        queue's id and `shown(ordinal)`: whether a record of the page is still the queue's on
        disk (not acknowledged, voided, lost or claimed), as `read` leaves them out; for a
        reader that decodes frames itself, in any thread. It must also leave out records of
        other queues, of undecided transactions, and non-persistent ones when the spans say
        so (`PageFrames`). None: no bytes to hand out (pages in memory, damage): use `read`."""

    def read_ahead(self, page_no: int, ordinal: int, arrived: Callable[[], None], size: ReadSize, *,
                   claimed: bool = False) -> Iterator[tuple[int, PagedRecord] | None]:
        """`read`, with the page read a chunk (`size`) ahead in the page-I/O worker when the
        store has one (else as `read`): None is yielded while the next chunk is being read
        (or, first, while a batch appended to the page is still being written); `arrived` is
        called on the loop once it is in, and the same iterator goes on. For readers that
        must not read page files on the loop (a browser)."""

    def claim(self, page_no: int, ordinal: int) -> None:
        """A record beyond the read position was taken into memory (a selective consumer's
        look-ahead): the queue's own reading skips it."""

    def unclaim(self, page_no: int, ordinal: int) -> bool:
        """A claimed record went back unacknowledged: unread again, for whoever reads its
        position next. False when damage took it meanwhile: it is gone for good."""

    def claim_unread(self, page_no: int, ordinal: int) -> bool:
        """`claim` the record if it is on disk only (not read, claimed, acknowledged or
        lost), for a management move; False, with nothing changed, otherwise."""

    def purge(self) -> tuple[int, asyncio.Future[None] | None]:
        """Acknowledge every record of the queue that is on disk only (not read into memory
        nor claimed), journaled as cursor records: pages it then holds nothing of complete
        (and go once every queue is done). Returns how many, and a future when records
        appended before the call were not yet readable (purge again once it resolves)."""

    def span(self, page_no: int) -> PageSpan | None:
        """The page counted from the bookkeeping (no read), as it is now, or None when only
        a read can tell: records appended but not yet readable, an undecided transaction."""

    def complete_served(self, page_no: int, served: Collection[int]) -> int:
        """A streaming reader was served the page's records at `served` (ordinals) and its
        commit covers them: if they are every record the queue still has in the page, none
        of them in memory, and the page is closed, the queue is done with the page as a
        whole, with one "page complete" record (no ack per record). Returns how many records
        that acknowledged; 0 (and nothing changed) when the page does not qualify."""

    def acknowledge(self, page_no: int, ordinal: int, *, journal: bool) -> None:
        """The record is done with; `journal`: gather it for the next cursor-acks record
        (False for a non-persistent record, or an ack the caller journals itself)."""

    def ack_records(self, positions: Sequence[Position]) -> list[CursorAck]:
        """Cursor-ack records for these positions (about to be acknowledged with
        `journal=False`), one per page, for the caller's own journal transaction."""

    def waits_for_commit(self, txid: int) -> bool:
        """True while transaction `txid`'s batch is undecided (the queue is woken after)."""

    def wait_for_write(self) -> None:
        """Wake the queue once everything appended so far is readable."""


class PagedQueueStore(Protocol):
    """One address's paged data and its queues' bookkeeping (see the module docstring)."""

    address: str
    listener: QueueStoreListener
    records_on_disk: int
    bytes_on_disk: int

    @property
    def records_held(self) -> int:
        """Records in page files not yet acknowledged by every queue (page limits count these)."""

    @property
    def bytes_held(self) -> int:
        """Their bytes."""

    def queue(self, queue_id: int) -> PagedQueue:
        """The queue's bookkeeping, made on first use."""

    def drop_queue(self, queue_id: int) -> None:
        """The queue is deleted: done with every page it held."""

    def append(self, records: Sequence[PagedRecord], *, summary_input: Sequence[object] | None = None,
               atomic: bool = True) -> Appended:
        """Append one atomic batch (or, not `atomic`, records that merely share one write:
        each its own frame, so damage costs one of them) and count each record for its
        queues. Records with a
        `txid` (all the same) are read by no queue until `release_tx` (or `abandon_tx`), and
        dropped at a restart unless the `PageTxCommit` from `commit_tx` is durable."""

    def room(self, size: int) -> int:
        """Bytes an append of at least `size` bytes may take without taking a page past
        `page-size-bytes`: what the live page has left when `size` fits there, else a whole
        page (the append rolls it first). What groups a read's SENDs asks (core/routing)."""

    def is_pending(self, txid: int) -> bool: ...

    def commit_tx(self, txid: int) -> PageTxCommit:
        """The record committing the transaction's batch, for the caller's journal
        transaction; it goes with the page when the page goes."""

    def release_tx(self, txid: int) -> None:
        """The commit took effect: queues read on past the batch."""

    def abandon_tx(self, txid: int, *, written: bool) -> None:
        """The transaction did not commit: its batch, if `written`, is nobody's."""

    def summary(self, page_no: int) -> object | None:
        """The decoded selector summary of a closed page; None when there is none (yet)."""

    def soonest_expiration(self, page_no: int) -> int | None:
        """The soonest expiration of the page's records (0: none expires) when a read of the
        whole page in this run found it (a page rescanned at start-up), else None."""

    def fully_readable(self, page_no: int) -> bool:
        """Whether a read made now sees every record appended to the page so far."""

    def write_acks(self) -> None:
        """Write the acks gathered since the last call, one cursor-acks record per page."""

    def recover(self, queue_ids: Collection[int], acks: Sequence[CursorAck],
                completes: Sequence[CursorComplete], tx_commits: Sequence[PageTxCommit]) -> PagedRecovery:
        """Rebuild the bookkeeping of the queues `queue_ids` from page summaries and cursor
        records (every address's: only these queues' are matched with these pages); no page
        body is read but a transaction's batch whose commit record never came."""

    def queue_ids_on_disk(self) -> set[int]:
        """The ids of the queues records in the pages were routed to (start-up: a queue
        whose record journal damage took is found by these)."""

    def last_id(self, page_no: int) -> int:
        """The highest message id on the page (0 when not known): a browse resuming after
        an id skips the pages before it unread."""

    def last_message_id(self) -> int:
        """The highest message id in the pages (0 for none): new ids must stay above it."""

    def messages_paged(self) -> int:
        """Records every queue still has to read."""

    def page_files(self) -> int:
        """Pages on disk, not counting those being deleted."""

    def page_views(self, queue_id: int | None = None) -> list[PageView]:
        """The pages on disk in order (not those being deleted); with a `queue_id`, only the
        pages that queue still holds, with its share of each."""


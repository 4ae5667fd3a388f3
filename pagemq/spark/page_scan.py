"""The batch source's work, without Spark: plan a scan of an address's page files, read one.

Planning (on the driver) lists the page files of the address, in the paging directory and,
with `archive-data-logs`, in the archive, keeps those the pushed-down ranges and the
selector may match, and notes each file's size then: a task reads its file up to that size,
so what a scan returns is what was on disk when it was planned (less pages the broker
deleted meanwhile), and a retried task reads the same bytes. Then it reads the journal for
queue names and committed paged transactions (`journal_facts`), after the sizes were taken:
a transactional batch inside a file's planned bytes whose commit record is not in the
journal yet is left out, as the broker itself would not deliver it yet.

Reading (on an executor) decodes one file's intact frames into Arrow record batches of the
source schema. What a row is:

- `seq` is the record's position in the address's page stream, `page number << 32 |
  ordinal` (its `(page, ordinal)` of docs/formats/page.md), so rows are in `seq` order
  within a file and across files, in the order the broker paged them, and a `seq` range
  maps to whole page files exactly. Not the message id: a transaction's messages get their
  ids when sent and are paged at COMMIT, so ids inside one page are not in order and a
  page's first and last ids do not bound the ids it holds.
- `message_id` is the broker's message id, as the `message-id` header of a MESSAGE frame.
- `queue` names the queues the message was routed to (comma-separated, in routing order),
  as far as the journal knows them: durable queues only. Null when it knows none.
- `headers` are the sender's headers as stored (the SEND frame's, less `receipt`,
  `transaction`, `content-length`); `timestamp`, `priority`, `persistent` are the broker's.

Every record on disk is returned, including messages queues have acknowledged but whose
page is not yet deleted, and non-persistent ones (a broker restarted since will not deliver
those: filter on `persistent`). Records of a transactional batch are returned only when its
commit record is in the journal. Damage (bytes no frame could be read from, a record that
does not decode) fails the task naming the file and offset, or with `failOnDataLoss=false`
is logged and read past; bytes after the last complete frame of the live page are an append
in progress, not damage.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from pagemq.core.message_codec import CodecError, decode_message
from pagemq.core.selector.properties import message_view
from pagemq.core.selector.summary import PageSummary
from pagemq.selector import Selector
from pagemq.selector import compile as compile_selector
from pagemq.spark.bounds import ORDINAL_BITS, Bounds
from pagemq.spark.journal_facts import read_journal_facts
from pagemq.spark.options import PagemqOptionError, check_known, flag, required, text
from pagemq.spark.options import selector as option_selector
from pagemq.spark.page_decode import MESSAGE_ID, ORDINAL, Located, build_batch, locate
from pagemq.storage.paging.page_files import PageFileInfo, address_folder, list_page_files, read_page_bytes
from pagemq.storage.paging.page_format import FILE_HEADER, FrameDamage, folder_name
from pagemq.storage.records import FILE_HEADER as JOURNAL_FILE_HEADER
from pagemq.storage.records import FILE_SUFFIX as JOURNAL_FILE_SUFFIX

__all__ = ["FileTask", "PageDamageError", "ScanOptions", "ScanPlan", "plan_scan", "read_file"]

log = logging.getLogger("pagemq.spark")

BATCH_ROWS = 8192  # rows per Arrow record batch: bounds an executor's memory per file


class PageDamageError(RuntimeError):
    """A page file holds bytes the reader could not read (`failOnDataLoss=true`)."""

SCAN_OPTIONS = ("path", "address", "selector", "failOnDataLoss", "includeArchived", "includeHeaders",
                "pagingDirectory", "journalDirectory")


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """A batch read's options, checked (see docs/spark.md for each)."""

    address: str
    paging_directory: Path
    archive_directory: Path
    journal_directories: tuple[Path, ...]  # the journal, then the archived journal
    selector: str | None
    fail_on_data_loss: bool
    include_archived: bool
    include_headers: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ScanOptions:
        """PagemqOptionError naming the option for anything missing or wrong."""
        path = required(options, "path", "the broker's data directory (spark.read reads page files; "
                                          "url and queue are for spark.readStream)")
        for name in ("url", "queue", "subscription"):
            if text(options, name) is not None:
                raise PagemqOptionError(name, "an option of the stream read (spark.readStream without "
                                              "a path): with `path` this is a batch read of page files")
        check_known(options, SCAN_OPTIONS, "batch read")
        address = required(options, "address", "the address whose page files to read")
        data = Path(path)
        if not data.is_dir():
            raise PagemqOptionError("path", f"{path} is not a directory")
        paging = Path(text(options, "pagingDirectory") or data / "paging")
        journal = Path(text(options, "journalDirectory") or data / "journal")
        _check_journal(journal, given=text(options, "journalDirectory") is not None)
        archive = data / "archive"
        include_archived = flag(options, "includeArchived", True)
        selector = option_selector(options)
        scan = cls(address, paging, archive / "paging", (journal, archive / "journal"), selector,
                   flag(options, "failOnDataLoss", True), include_archived,
                   flag(options, "includeHeaders", True))
        if scan.folder() is None and scan.archive_folder() is None:
            where = f"{paging}" + (f" or {archive / 'paging'}" if include_archived else "")
            raise PagemqOptionError("address", f"no page folder for address {address!r} in {where} (the "
                                               "address never paged, or path is not its data directory)")
        return scan

    def folder(self) -> Path | None:
        return address_folder(self.paging_directory, self.address)

    def archive_folder(self) -> Path | None:
        return address_folder(self.archive_directory, self.address) if self.include_archived else None


def _check_journal(journal: Path, *, given: bool) -> None:
    """The journal must be there: it says which paged transactions committed and names the
    queues, and without it a committed transaction's rows would be left out unseen."""
    where = "journalDirectory" if given else "path"
    if not journal.is_dir():
        raise PagemqOptionError(where, f"no journal directory {journal} (the broker's journal says which "
                                       "paged transactions committed; give journalDirectory if the "
                                       "broker's journal-directory is elsewhere)")
    if not any(_holds_records(journal / name) for name in os.listdir(journal)
               if name.endswith(JOURNAL_FILE_SUFFIX)):
        raise PagemqOptionError(where, f"no journal records (files *{JOURNAL_FILE_SUFFIX} past their "
                                       f"header) in {journal}: not a broker's journal directory")


def _holds_records(path: Path) -> bool:
    """A journal file with something past its header (a broker's journal always has some: its
    address and queue records)."""
    try:
        return path.stat().st_size > JOURNAL_FILE_HEADER.size
    except FileNotFoundError:  # compacted away meanwhile: its records are in a later file
        return False


@dataclass(frozen=True, slots=True)
class FileTask:
    """One page file to read: a Spark partition. Picklable; carries all the reader needs."""

    path: str
    page_no: int
    limit: int  # bytes to read: the size when planned
    complete: bool  # a valid summary covered `limit` bytes: a torn end is damage, not an append
    committed: frozenset[int]  # transaction ids whose batch in this page committed
    address: str
    queue_names: Mapping[int, str]
    selector: str | None
    fail_on_data_loss: bool
    moved_to: str | None = None  # where the file is once archived, if archiving may move it
    include_headers: bool = True  # false: the headers column is null (not decoded)


@dataclass(slots=True)
class ScanPlan:
    """What planning decided, with the counts the planning log line reports."""

    tasks: list[FileTask] = field(default_factory=list)
    files: int = 0  # listed
    skipped: int = 0  # not to be read: no row could pass the pushed filters or the selector


def plan_scan(scan: ScanOptions, bounds: Bounds) -> ScanPlan:
    """The files to read (one task each) and how many were skipped; see the module doc."""
    selector = compile_selector(scan.selector) if scan.selector is not None else None
    # The live folder first: a page the broker archives between the two listings is then
    # listed twice (kept once), never missed.
    listed: list[tuple[PageFileInfo, bool]] = []
    live = scan.folder()
    if live is not None:
        listed += [(page, False) for page in list_page_files(live)]
    archived = scan.archive_folder()
    if archived is not None:
        known = {page.page_no for page, _ in listed}
        listed += [(page, True) for page in list_page_files(archived) if page.page_no not in known]
    listed.sort(key=lambda item: item[0].page_no)
    plan = ScanPlan(files=len(listed))
    kept = [(page, was_archived) for page, was_archived in listed if _may_match(page, bounds, selector)]
    plan.skipped = plan.files - len(kept)
    if not kept:
        return plan
    # The archived journal holds the commit records of archived pages only: read it for those.
    journals = scan.journal_directories if any(was_archived for _, was_archived in kept) else (
        scan.journal_directories[:1])
    facts = read_journal_facts(journals, scan.address)
    archive_to = scan.archive_directory / folder_name(scan.address)
    for page, was_archived in kept:
        committed = frozenset(txid for txid, page_no in facts.committed if page_no == page.page_no)
        moved_to = None if was_archived else str(archive_to / page.path.name)
        plan.tasks.append(FileTask(str(page.path), page.page_no, page.size, page.summary is not None,
                                   committed, scan.address, facts.queue_names, scan.selector,
                                   scan.fail_on_data_loss, moved_to, scan.include_headers))
    return plan


def _may_match(page: PageFileInfo, bounds: Bounds, selector: Selector | None) -> bool:
    summary = _selector_summary(page)
    if not bounds.admits(page.page_no, summary):
        return False
    return selector is None or summary is None or selector.may_match(summary)


def _selector_summary(page: PageFileInfo) -> PageSummary | None:
    blob = page.summary.selector_summary if page.summary is not None else None
    if not blob:
        return None
    try:
        return PageSummary.from_bytes(blob)
    except ValueError:
        return None


# ----- reading -----------------------------------------------------------------------------


def read_file(task: FileTask) -> Iterator[pa.RecordBatch]:
    """The rows of one page file as record batches of `ARROW_SCHEMA`, in `seq` order.

    The file is read with one read and decoded column-wise (`page_decode`); a selector is
    evaluated on each row's decoded message, then the batch is built from the matches."""
    path = _existing(task)
    if path is None:
        return
    damage: list[FrameDamage] = []
    page = read_page_bytes(Path(path), task.page_no, damage, limit=task.limit)
    if page is None:
        _report(task, path, damage)
        return
    data, version = page
    found = locate(data, FILE_HEADER.size, len(data), version=version, committed=task.committed,
                   damage=damage)
    _report(task, path, damage)
    if task.selector is not None:
        found = _matching(task, path, found, task.selector)
    names = _QueueNames(task.queue_names)
    base = task.page_no << ORDINAL_BITS
    for start in range(0, len(found), BATCH_ROWS):
        batch, problems = build_batch(found.take(slice(start, start + BATCH_ROWS)), address=task.address,
                                      seq_base=base, queue_name=names, include_headers=task.include_headers)
        for problem in problems:
            _data_loss(task, f"{path}: record {problem.ordinal} (message {problem.message_id}) does not "
                             f"decode: {problem.reason}")
        if batch.num_rows:
            yield batch


def _matching(task: FileTask, path: str, found: Located, selector_text: str) -> Located:
    """The records whose message the task's selector matches (a record that does not
    decode is data loss, as when the batch is built)."""
    selector = compile_selector(selector_text)
    keep: list[int] = []
    for i, row in enumerate(found.rows):
        try:
            message = decode_message(found.message(i), task.address)
        except CodecError as exc:
            _data_loss(task, f"{path}: record {row[ORDINAL]} (message {row[MESSAGE_ID]}) does not "
                             f"decode: {exc}")
            continue
        if selector.matches_headers(message_view(message)):
            keep.append(i)
    return found.take(np.array(keep, np.int64))


def _existing(task: FileTask) -> str | None:
    """The file's path now: where it was planned, else in the archive (moved meanwhile)."""
    for path in (task.path, task.moved_to):
        if path is not None and os.path.exists(path):
            return path
    _data_loss(task, f"{task.path}: page file deleted since the scan was planned (every queue had "
                     "acknowledged its messages); its rows are not in this result")
    return None


def _report(task: FileTask, path: str, damage: list[FrameDamage]) -> None:
    for found in damage:
        if found.torn and not task.complete:
            continue  # the live page's end: an append in progress (or one a crash cut short)
        lost = f", {found.lost} record(s) lost" if found.lost is not None else ""
        _data_loss(task, f"{path}: damaged bytes at offset {found.offset} ({found.reason}): "
                         f"{found.length} bytes unreadable{lost}")


def _data_loss(task: FileTask, problem: str) -> None:
    if task.fail_on_data_loss:
        raise PageDamageError(f"{problem} (set the option failOnDataLoss=false to read past it)")
    log.warning("pagemq batch read of %r: %s", task.address, problem)


class _QueueNames:
    """A row's `queue` value from its queue ids: the names the journal knows, joined."""

    def __init__(self, names: Mapping[int, str]) -> None:
        self.names = names

    def __call__(self, queue: Hashable) -> str | None:
        ids = queue if isinstance(queue, tuple) else (queue,)
        known = [self.names[qid] for qid in ids if qid in self.names]
        return ",".join(known) if known else None

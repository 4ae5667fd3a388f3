"""Opening an address's page folder after a stop or a crash, reading summaries only.

Artemis rebuilds its page counters at start by reading every page file (ARTEMIS-4065,
PageCounterRebuildTest); here a closed page is known from its `.summary` sidecar, whose
recorded file size must equal the page file's size, so the cost of opening grows with the
number of pages, never with the number of messages. Only pages without a trustworthy summary
(normally just the last one, live when the broker stopped) are scanned, and each is bounded
by the page size.

The procedure, in order (each step is logged when it changes anything):
 1. No folder: nothing paged.
 2. `address.txt` must name this address (a hash collision would otherwise mix queues).
 3. Leftover `*.tmp` files of an interrupted atomic write are removed.
 4. A `.summary` without its `.page` (a crash between the two removals of a delete) goes.
 5. Each page with a valid summary of the right size is taken from the summary.
 6. Any other page is scanned, reading past damage (`page_format.read_frames`): a torn tail
    (bad bytes at the end that no valid frame follows) is truncated (warning: file, offset,
    bytes dropped); damage with valid frames after it is kept, reported (file, offset,
    records lost) and the page marked damaged in its summary, so it is set aside rather than
    deleted once done with; the summary is written. A page left with no record is removed
    (set aside if damaged); a page whose file header is damaged is read from its frames if
    any are found, else renamed `*.page.damaged` and never read.
 7. Page numbers continue after the highest ever used (`last-page` remembers deleted ones).

Before any folder is opened, the broker removes what an interrupted folder creation left
(`remove_unfinished_folders`): a staging folder `<name>.tmp`, or, made by versions that
created the folder in place, a folder with no `address.txt` and nothing but
`address.txt.tmp`. Neither ever holds a page.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pagemq.storage.fileio import FileIO
from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    FORMAT_VERSION,
    PAGE_SUFFIX,
    SUMMARY_SUFFIX,
    FrameError,
    PageScan,
    PageSummaryRecord,
    page_file_name,
    page_number,
    read_frames,
    scan_page,
    summary_file_name,
)
from pagemq.storage.paging.page_writer import (
    ADDRESS_FILE,
    DAMAGED_SUFFIX,
    FOLDER_STAGING_SUFFIX,
    HIGH_WATER_FILE,
)

__all__ = [
    "DAMAGED_SUFFIX",
    "PageFolderConflict",
    "RecoveredPage",
    "recover_folder",
    "remove_unfinished_folders",
    "scan_from_summary",
    "unfinished_folder",
]

# All an interrupted folder creation can leave in the folder it was making.
_CREATION_FILES = frozenset({ADDRESS_FILE, ADDRESS_FILE + ".tmp"})
# How `page_format.folder_name` names an address folder.
_FOLDER_NAME = re.compile(r"^[A-Za-z0-9._-]+-[0-9a-f]{12}$")

log = logging.getLogger("pagemq.paging")


class PageFolderConflict(RuntimeError):
    """The folder computed for an address holds another address's pages."""


@dataclass(slots=True)
class RecoveredPage:
    page_no: int
    stats: PageScan
    selector_summary: bytes | None
    damaged: bool = False
    frame_version: int | None = None  # None: taken from the file header when first read


@dataclass(slots=True)
class RecoveredFolder:
    pages: list[RecoveredPage]
    highest_page: int
    summaries_read: int = 0
    pages_scanned: int = 0
    # Summaries of rescanned pages not written yet (`write_summaries=False`): the caller has
    # them written later, off the loop (they only save the next start a rescan).
    unwritten: list[PageSummaryRecord] = field(default_factory=list)


def _orphan_summary(address: str, orphan: Path, fileio: FileIO) -> None:
    """Say what a summary whose page is gone means: nothing, after a crash between the
    page's deletion and its summary's; messages lost, if the page file was removed some
    other way (`pagemq data check` tells the two apart from the journal's cursor records)."""
    try:
        persistent = PageSummaryRecord.decode(fileio.read_bytes(orphan)).persistent_count
    except (OSError, FrameError):
        persistent = 0
    if not persistent:
        log.info("paging %r: removing %s, its page is gone", address, orphan.name)
        return
    log.warning("paging %r: removing %s, its page is gone: it held %d persistent message(s), "
                "which were all acknowledged if a crash came between the page's deletion and the "
                "summary's, and else are lost (was the page file removed?)", address, orphan.name, persistent)


def scan_from_summary(summary: PageSummaryRecord) -> PageScan:
    """The running counters of a page, as a summary recorded them."""
    return PageScan(
        summary.count, summary.persistent_count, summary.first_id, summary.last_id,
        dict(summary.queue_counts), dict(summary.queue_persistent), list(summary.index),
        summary.file_size, tx_batches=list(summary.tx_batches),
    )


def unfinished_folder(folder: Path) -> bool:
    """Whether a directory of the paging directory is what an interrupted folder creation
    left: a staging folder (`<name>.tmp`) holding at most address.txt (or its temporary
    file), or a folder with no address.txt holding at most address.txt.tmp. Such a folder
    holds no page; the next start removes it."""
    staging = folder.name.endswith(FOLDER_STAGING_SUFFIX)
    if not _FOLDER_NAME.match(folder.name.removesuffix(FOLDER_STAGING_SUFFIX) if staging else folder.name):
        return False
    if not staging and os.path.lexists(folder / ADDRESS_FILE):
        return False  # the common case, one lstat: a finished folder (no listing needed)
    try:
        with os.scandir(folder) as entries:  # the entry types come with the listing: no stats
            kinds = {entry.name: entry.is_file() for entry in entries}
    except OSError:
        return False
    names = set(kinds)
    plain_files = all(kinds.values())
    if not plain_files or not names <= _CREATION_FILES:
        return False
    return staging or ADDRESS_FILE not in names


def remove_unfinished_folders(paging_directory: Path, fileio: FileIO) -> list[Path]:
    """Remove every `unfinished_folder` of the paging directory, durably (the paging
    directory is fsynced once after them). Run at start, before any page store opens."""
    if not paging_directory.is_dir():
        return []
    removed = []
    with os.scandir(paging_directory) as entries:
        names = sorted(entry.name for entry in entries if entry.is_dir())
    root = os.fspath(paging_directory)
    for name in names:
        if not name.endswith(FOLDER_STAGING_SUFFIX) and os.path.lexists(
                f"{root}/{name}/{ADDRESS_FILE}"):
            continue  # the common case, a finished folder: one lstat, no Path made
        folder = paging_directory / name
        if not unfinished_folder(folder):
            continue
        for leftover in sorted(folder.iterdir()):
            fileio.remove(leftover)
        fileio.rmdir(folder)
        log.info("paging: removed %s, left by a page folder creation a crash interrupted (it held "
                 "no page)", folder)
        removed.append(folder)
    if removed:
        fileio.fsync_directory(paging_directory)
    return removed


def recover_folder(folder: Path, address: str, fileio: FileIO, *, write_summaries: bool = True
                   ) -> RecoveredFolder:
    """Steps 1-7 of the module docstring; returns the pages in page order.

    Nothing is fsynced that was only read: the folder is fsynced once if something in it was
    repaired (a leftover or an empty page removed, a page set aside; a cut tail is fsynced
    by the truncation itself). A rescanned page's new summary is written (atomically, with
    its fsyncs) here, or with `write_summaries=False` handed back in `unwritten` for the
    caller's page writer: a summary is a cache the next start checks against the page's
    size and CRC, so until it is written a start rescans the page, which is all a crash
    before then costs.
    """
    names = fileio.names(folder)  # one listing (plain names), split by suffix below
    if not names and not folder.is_dir():                              # 1
        return RecoveredFolder([], 0)
    base = os.fspath(folder)
    _check_address(folder, base, address, fileio)                      # 2
    changed = False
    # Plain string paths: with thousands of folders, making a Path per file costs more than
    # reading it.
    pages: dict[int, str] = {}
    summaries: dict[int, str] = {}
    highest_used = 0
    for name in names:
        if name.endswith(".tmp"):                                      # 3
            log.info("paging %r: removing %s left by an interrupted write", address, folder / name)
            fileio.remove(folder / name)
            changed = True
        elif name.endswith(DAMAGED_SUFFIX):
            highest_used = max(highest_used, page_number(name.removesuffix(DAMAGED_SUFFIX)) or 0)
        elif (page_no := page_number(name)) is not None:
            if name.endswith(PAGE_SUFFIX):
                pages[page_no] = f"{base}/{name}"
            elif name.endswith(SUMMARY_SUFFIX):
                summaries[page_no] = f"{base}/{name}"
    for page_no in sorted(set(summaries) - set(pages)):                # 4
        orphan = Path(summaries[page_no])
        _orphan_summary(address, orphan, fileio)
        fileio.remove(orphan)
        changed = True
    if HIGH_WATER_FILE in names:
        highest_used = max(highest_used, _high_water(folder, fileio))
    result = RecoveredFolder([], highest_used)
    last = max(pages, default=0)
    for page_no in sorted(pages):
        result.highest_page = max(result.highest_page, page_no)
        summary, recorded_size = _valid_summary(page_no, address, fileio, pages[page_no], summaries)
        if summary is not None:                                        # 5
            result.summaries_read += 1
            result.pages.append(RecoveredPage(
                page_no, scan_from_summary(summary), summary.selector_summary, summary.damaged
            ))
            continue
        result.pages_scanned += 1                                      # 6
        recovered, repaired = _rescan(folder, page_no, address, fileio, was_live=page_no == last,
                                      recorded_size=recorded_size)
        changed = changed or repaired
        if recovered is not None:
            result.pages.append(recovered)
            summary = PageSummaryRecord.from_scan(page_no, recovered.stats, None)
            if write_summaries:
                fileio.write_atomic(folder / summary_file_name(page_no), summary.encode())
            else:
                result.unwritten.append(summary)
    if changed:
        fileio.fsync_directory(folder)
    return result


def _check_address(folder: Path, base: str, address: str, fileio: FileIO) -> None:
    try:
        recorded = fileio.read_bytes(f"{base}/{ADDRESS_FILE}").decode("utf-8", "surrogatepass")
    except FileNotFoundError:
        log.warning("paging %r: %s has no %s; writing it", address, folder, ADDRESS_FILE)
        fileio.write_atomic(folder / ADDRESS_FILE, address.encode("utf-8", "surrogatepass"))
        return
    if recorded != address:
        raise PageFolderConflict(f"{folder} holds pages of address {recorded!r}, not {address!r}")


def _high_water(folder: Path, fileio: FileIO) -> int:
    """The highest page number ever deleted in this folder (`last-page`), 0 if unknown."""
    try:
        return int(fileio.read_bytes(folder / HIGH_WATER_FILE).decode().strip() or 0)
    except FileNotFoundError:
        return 0
    except ValueError:
        log.warning("paging: %s is unreadable; page numbers continue after the files present",
                    folder / HIGH_WATER_FILE)
        return 0


def _valid_summary(
    page_no: int, address: str, fileio: FileIO, page: str, summaries: dict[int, str]
) -> tuple[PageSummaryRecord | None, int | None]:
    """The page's summary if it describes the file as it is; else None, and the file size
    a readable summary of this page records (None without one): a closed page is fsynced
    before its summary is written, so a file shorter than that lost bytes to damage."""
    path = summaries.get(page_no)
    if path is None:
        return None, None
    try:
        summary = PageSummaryRecord.decode(fileio.read_bytes(path))
    except FrameError as exc:
        log.warning("paging %r: summary %s is unusable (%s); rescanning its page", address, path, exc)
        return None, None
    size = fileio.size(page)
    if summary.page_no != page_no or summary.file_size != size:
        log.warning(
            "paging %r: summary %s describes page %d of %d bytes, the file is page %d of %d bytes; "
            "rescanning", address, path, summary.page_no, summary.file_size, page_no, size,
        )
        return None, summary.file_size if summary.page_no == page_no else None
    return summary, summary.file_size


def _rescan(
    folder: Path, page_no: int, address: str, fileio: FileIO, *, was_live: bool,
    recorded_size: int | None = None,
) -> tuple[RecoveredPage | None, bool]:
    """The page as read from its frames, and whether the folder changed (a page removed or
    set aside: to fsync). `recorded_size`: what its summary says the file held once closed;
    a file shorter than that lost its end to damage, which is never cut as a torn tail."""
    path = folder / page_file_name(page_no)
    data = fileio.read_bytes(path)
    shrunk = recorded_size is not None and len(data) < recorded_size
    if was_live:
        log.info("paging %r: scanning %s (%d bytes), live when the broker stopped", address, path, len(data))
    else:
        log.warning("paging %r: closed page %s has no usable summary; rescanning it", address, path)
    scan = scan_page(data, page_no)
    bad_header = scan.good_size == 0 and len(data) >= FILE_HEADER.size
    if bad_header:
        scan = _frames_after_bad_header(data, scan.problem)
        if scan.count == 0:
            damaged = path.with_name(path.name + DAMAGED_SUFFIX)
            log.warning("paging %r: %s has a damaged file header (%s) and no readable frame; "
                        "moved to %s, not read", address, path, scan.problem, damaged.name)
            fileio.rename(path, damaged)
            return None, True
        log.warning("paging %r: %s has a damaged file header (%s); its frames are read anyway",
                    address, path, scan.problem)
    if shrunk:
        assert recorded_size is not None
        log.warning("paging %r: %s is %d bytes, %d fewer than its summary recorded when it was closed: "
                    "its end was lost to damage (not a torn append); the page is kept (set aside, never "
                    "deleted)", address, path, len(data), recorded_size - len(data))
        scan.damaged = True
    for damage in scan.damage:
        if damage.torn and not bad_header and not shrunk:
            log.warning(
                "paging %r: %s: torn tail at offset %d (%s); truncating, dropping %d bytes",
                address, path, damage.offset, damage.reason, damage.length,
            )
            fileio.truncate(path, damage.offset)
        else:
            lost = "" if damage.lost is None else f", {damage.lost} record(s) lost"
            after = (f"read on from offset {damage.end}" if damage.resumed
                     else "to the end of the file" if damage.torn
                     else "valid frames follow but format-1 frames carry no position, so they are not read")
            log.warning("paging %r: %s: damaged bytes at offset %d (%s): %d bytes unreadable%s, %s; "
                        "the page is kept (set aside, never deleted)",
                        address, path, damage.offset, damage.reason, damage.length, lost, after)
    if scan.count == 0 and not scan.damaged:
        log.info("paging %r: %s holds no record; removed", address, path)
        fileio.remove(path)
        return None, True
    return RecoveredPage(page_no, scan, None, scan.damaged, scan.version), False


def _frames_after_bad_header(data: bytes, problem: str | None) -> PageScan:
    """A page whose header is unreadable: its (format-2) frames, found by their magic."""
    scan = PageScan(good_size=FILE_HEADER.size, problem=problem, damaged=True, version=FORMAT_VERSION,
                    soonest_expiration=0)
    for offset, size, first, entries in read_frames(data, FILE_HEADER.size, len(data), damage=scan.damage):
        scan.add(entries, offset, size, first)
        scan.note_expirations(entries)
    return scan

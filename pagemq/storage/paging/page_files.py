"""Read-only access to an address's page files, for readers outside the broker process.

The Spark batch source reads page files straight from a data directory, beside a broker
that may be writing, reading and deleting them. Nothing here opens a file for writing,
repairs, truncates or takes the data-directory lock: a page being appended to is read up to
what is on disk now, and what recovery would do (cut a torn tail, rewrite a summary) is left
to the broker. A summary is trusted only while it still describes the page file's current
size (the rule of docs/formats/page.md), so a stale one never prunes or counts anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    FORMAT_VERSION,
    PAGE_SUFFIX,
    FrameDamage,
    FrameError,
    PagedRecord,
    PageSummaryRecord,
    decode_file_header,
    folder_name,
    page_format_version,
    page_number,
    read_frames,
    summary_file_name,
)
from pagemq.storage.paging.page_writer import ADDRESS_FILE

__all__ = ["PageFileInfo", "address_folder", "list_page_files", "read_page_bytes", "read_page_file"]


@dataclass(frozen=True, slots=True)
class PageFileInfo:
    """One page file as listed now. `summary` is None for the live page (no summary yet) and
    for a page whose summary is missing, damaged or describes another size."""

    path: Path
    page_no: int
    size: int
    summary: PageSummaryRecord | None


def address_folder(paging_directory: Path, address: str) -> Path | None:
    """The folder of `address` under a paging (or archived paging) directory, or None.

    Found by its computed name and confirmed by its `address.txt`, as `PageStore` does, so
    a hash collision or a folder still being created is never taken for the address.
    """
    folder = Path(paging_directory) / folder_name(address)
    try:
        named = (folder / ADDRESS_FILE).read_bytes().decode("utf-8", "surrogatepass")
    except (OSError, UnicodeDecodeError):
        return None
    return folder if named == address else None


def list_page_files(folder: Path) -> list[PageFileInfo]:
    """The `*.page` files of a folder in page-number order, each with its summary if valid.

    A file removed while the folder is listed (the broker deleted an acknowledged page) is
    left out; `*.page.damaged` files are never listed (the broker reads them no more).
    """
    pages: list[PageFileInfo] = []
    try:
        names = sorted(entry.name for entry in Path(folder).iterdir())
    except FileNotFoundError:
        return pages
    for name in names:
        page_no = page_number(name)
        if page_no is None or not name.endswith(PAGE_SUFFIX):
            continue
        path = Path(folder) / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        summary = _valid_summary(path.with_name(summary_file_name(page_no)), page_no, size)
        pages.append(PageFileInfo(path, page_no, size, summary))
    pages.sort(key=lambda page: page.page_no)
    return pages


def _valid_summary(path: Path, page_no: int, size: int) -> PageSummaryRecord | None:
    try:
        summary = PageSummaryRecord.decode(path.read_bytes())
    except (OSError, FrameError):
        return None
    if summary.page_no != page_no or summary.file_size != size:
        return None
    return summary


def read_page_file(path: Path, page_no: int, damage: list[FrameDamage], *, limit: int | None = None
                   ) -> Iterator[tuple[int, PagedRecord]]:
    """(ordinal, record) of every intact frame of a page file, in file order, up to `limit`
    bytes (default: the whole file as it is now).

    Damage is read past (`page_format.read_frames`) and noted in `damage`; a last entry with
    `torn` set is bytes no intact frame follows, which is what an append in progress looks
    like as much as a torn tail: the caller tells the two apart (a page whose valid summary
    covers those bytes was complete). FileNotFoundError if the file is gone.
    """
    page = read_page_bytes(path, page_no, damage, limit=limit)
    if page is None:
        return
    data, version = page
    for _offset, _size, first, entries in read_frames(data, FILE_HEADER.size, len(data), version=version,
                                                      damage=damage):
        yield from enumerate(entries, first)


def read_page_bytes(path: Path, page_no: int, damage: list[FrameDamage], *, limit: int | None = None
                    ) -> tuple[bytes, int] | None:
    """A page file's bytes (one read, up to `limit`) and its format version, for a reader
    that walks the frames itself from `FILE_HEADER.size` on; None for a file shorter than
    its header (a page just created: no record, no damage). A damaged or foreign file
    header is noted as damage at offset 0 and the frames after it are to be read all the
    same, as recovery does. FileNotFoundError if the file is gone."""
    with open(path, "rb") as file:
        data = file.read() if limit is None else file.read(limit)
    if len(data) < FILE_HEADER.size:
        return None
    version = FORMAT_VERSION
    try:
        found = decode_file_header(data)
        version = page_format_version(data)
        problem = None if found == page_no else f"file header names page {found}"
    except FrameError as exc:
        problem = str(exc)
    if problem is not None:
        damage.append(FrameDamage(0, FILE_HEADER.size, problem, resumed=True))
    return data, version

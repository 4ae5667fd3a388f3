"""`pagemq data print` for page files: what is on disk, readable by a person, broker stopped.

Like ZODB's fsdump.py, it reads the bytes itself (no PageStore, no writer, no repair), so it
works on damaged folders: a bad file header, a torn tail or a CRC mismatch is reported with
its offset and the walk goes on with the next file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pagemq.storage.message_codec import CodecError, decode_fields
from pagemq.storage.paging.page_format import (
    FILE_HEADER,
    PAGE_SUFFIX,
    SUMMARY_SUFFIX,
    FrameDamage,
    FrameError,
    PagedRecord,
    PageSummaryRecord,
    decode_file_header,
    page_format_version,
    page_number,
    read_frames,
)
from pagemq.storage.paging.page_recovery import unfinished_folder
from pagemq.storage.paging.page_writer import ADDRESS_FILE

__all__ = ["describe_paging"]

_HEADERS_SHOWN = 4


def describe_paging(
    paging_directory: Path, address: str | None = None, verbose: bool = False
) -> Iterator[str]:
    """Lines for each address folder (or only `address`'s), its pages and their records."""
    if not paging_directory.is_dir():
        yield f"no paging directory at {paging_directory}"
        return
    shown = 0
    for folder in sorted(p for p in paging_directory.iterdir() if p.is_dir()):
        if unfinished_folder(folder):
            if address is None:
                shown += 1
                yield (f"folder {folder.name}: left by a folder creation a crash interrupted, no "
                       "page (the next start removes it)")
            continue
        name = _address_of(folder)
        if address is not None and name != address:
            continue
        shown += 1
        yield from _describe_folder(folder, name, verbose)
    if shown == 0:
        yield "no page folder" + (f" for address {address!r}" if address is not None else "")


def _address_of(folder: Path) -> str | None:
    try:
        return (folder / ADDRESS_FILE).read_bytes().decode("utf-8", "surrogatepass")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _describe_folder(folder: Path, address: str | None, verbose: bool) -> Iterator[str]:
    pages = sorted(
        (p for p in folder.iterdir() if p.name.endswith(PAGE_SUFFIX)),
        key=lambda p: page_number(p.name) or 0,
    )
    label = repr(address) if address is not None else f"(no {ADDRESS_FILE})"
    yield f"address {label}: folder {folder.name}, {len(pages)} page file(s)"
    for path in pages:
        yield from _describe_page(path, verbose)
    others = sorted(
        p.name for p in folder.iterdir()
        if not p.name.endswith((PAGE_SUFFIX, SUMMARY_SUFFIX)) and p.name != ADDRESS_FILE
    )
    if others:
        yield f"  other files: {', '.join(others)}"


def _describe_page(path: Path, verbose: bool) -> Iterator[str]:
    data = path.read_bytes()
    try:
        decode_file_header(data)
    except FrameError as exc:
        yield f"  {path.name}: {len(data)} bytes, unreadable file header ({exc})"
        return
    records: list[tuple[int, PagedRecord]] = []
    damage: list[FrameDamage] = []
    for offset, _size, _first, entries in read_frames(
        data, FILE_HEADER.size, len(data), version=page_format_version(data), damage=damage
    ):
        records.extend((offset, entry) for entry in entries)
    persistent = sum(1 for _, r in records if r.persistent)
    yield (f"  {path.name}: {len(data)} bytes, {len(records)} records ({persistent} persistent), "
           f"{_summary_state(path, len(data))}")
    for found in damage:
        what = "torn tail" if found.torn else "damaged"
        lost = "" if found.lost is None else f", {found.lost} record(s) lost"
        after = f", read on from offset {found.end}" if found.resumed else ""
        yield (f"    {what}: {found.reason}; {found.length} bytes at offset {found.offset} "
               f"unreadable{lost}{after}")
    shown = records if verbose else records[:1] + records[-1:] if len(records) > 1 else records
    for ordinal, (offset, record) in enumerate(shown):
        which = "record" if verbose else ("first" if ordinal == 0 else "last")
        yield f"    {which} @{offset}: {_record_line(record)}"


def _summary_state(path: Path, size: int) -> str:
    summary_path = path.with_name(path.name.removesuffix(PAGE_SUFFIX) + SUMMARY_SUFFIX)
    if not summary_path.exists():
        return "no summary (live or not closed)"
    try:
        summary = PageSummaryRecord.decode(summary_path.read_bytes())
    except FrameError as exc:
        return f"summary damaged ({exc})"
    if summary.file_size != size:
        return f"summary stale (describes {summary.file_size} bytes)"
    blob = "none" if summary.selector_summary is None else f"{len(summary.selector_summary)}B"
    queues = ", ".join(f"{q}:{n}" for q, n in sorted(summary.queue_counts.items()))
    return f"summary ok (queues {queues}; selector summary {blob})"


def _record_line(record: PagedRecord) -> str:
    flags = "persistent" if record.persistent else "non-persistent"
    queues = ",".join(str(q) for q in record.queue_ids)
    try:
        message = decode_fields(record.message)
    except CodecError as exc:
        return f"id={record.message_id} queues=[{queues}] {flags} undecodable message ({exc})"
    items = list(message.headers.items())
    headers = ", ".join(f"{k}={v!r}" for k, v in items[:_HEADERS_SHOWN])
    more = f", +{len(items) - _HEADERS_SHOWN} more" if len(items) > _HEADERS_SHOWN else ""
    return (f"id={record.message_id} queues=[{queues}] {flags} priority={message.priority} "
            f"headers={{{headers}{more}}} body={len(message.body)}B")

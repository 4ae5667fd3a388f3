"""Human-readable journal contents for `pagemq data print` (after ZODB's `fsdump.py`).

Works without a running broker and on damaged files: it reads through the same scanner
recovery uses, replays read-only (`Journal.load(repair=False)`, which changes no byte) to
count live records per file, and prints damage where recovery would report it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from pagemq.storage import records as rec
from pagemq.storage.fileio import REAL_FILE_IO, FileIO
from pagemq.storage.journal import DataFileInfo, Journal

__all__ = ["describe_journal"]


def describe_journal(
    directory: Path, *, verbose: bool = False, fileio: FileIO = REAL_FILE_IO
) -> Iterator[str]:
    """One summary line per data file (plus damage); with `verbose`, one line per record."""
    directory = Path(directory)
    if not directory.is_dir():
        yield f"no journal directory at {directory}"
        return
    journal = Journal(directory, fileio=fileio)
    result = journal.load(repair=False)
    infos = {info.file_no: info for info in journal.files()}
    paths = fileio.list(directory, rec.FILE_SUFFIX)
    total = 0
    for path in paths:
        file_no = rec.parse_file_number(path.name)
        total += fileio.size(path)
        yield from _describe_file(fileio, path, infos.get(file_no) if file_no is not None else None,
                                  verbose)
    for path in fileio.list(directory, rec.TEMP_SUFFIX):
        yield f"{path.name}: unfinished compaction output ({fileio.size(path)} bytes); load removes it"
    damaged = f", {len(result.dropped)} damaged" if result.dropped else ""
    yield (f"total: {len(paths)} data files, {total} bytes, {len(result.records)} live records, "
           f"max id {result.max_id}{damaged}")


def _describe_file(fileio: FileIO, path: Path, info: DataFileInfo | None, verbose: bool) -> Iterator[str]:
    scan = rec.FileScan(path, fileio.size(path))
    kinds: Counter[str] = Counter()
    types: Counter[int] = Counter()
    seqs: list[int] = []
    details: list[str] = []
    for offset, record in rec.scan_file(fileio, path, scan, file_no=rec.parse_file_number(path.name)):
        kinds[type(record).__name__.removesuffix("Record").upper()] += 1
        for op in rec.record_ops(record, offset):
            seqs.append(op.seq)
            if op.kind != rec.OpKind.DELETE:
                types[op.type] += 1
        if verbose:
            details.extend(_describe_record(offset, record))
    if scan.header is None:
        yield f"{path.name}: {scan.size} bytes, unreadable header: {scan.error}"
        return
    seq_range = f"seq {min(seqs)}..{max(seqs)}" if seqs else f"no ops (base seq {scan.header.base_seq})"
    counts = ", ".join(f"{name} {count}" for name, count in sorted(kinds.items())) or "none"
    by_type = ", ".join(f"{t}: {n}" for t, n in sorted(types.items())) or "none"
    live = f"live ops {info.live}" if info is not None else "not replayed (replaced by a compaction)"
    yield (f"{path.name}: file {scan.header.file_no}, {scan.size} bytes, {seq_range}, "
           f"records: {counts}; add/update ops by type: {by_type}; {live}")
    if scan.sources is not None:
        yield f"  compacted from files {', '.join(str(n) for n in scan.sources) or '(none)'}"
    for damage in scan.damage:
        what = "torn tail" if scan.torn else "damage"
        after = f", read on from offset {damage.end}" if damage.resumed else " (to the end of the file)"
        yield f"  {what} at offset {damage.offset}: {damage.reason}; {damage.length} bytes unreadable{after}"
    yield from details


def _describe_record(offset: int, record: rec.Record) -> Iterator[str]:
    if isinstance(record, rec.CompactedRecord):
        yield f"  @{offset} COMPACTED sources={list(record.sources)}"
        return
    ops = rec.record_ops(record, offset)
    if isinstance(record, rec.TransactionRecord):
        yield f"  @{offset} TRANSACTION seq={record.seq} ops={len(ops)}"
        indent = "    "
    else:
        indent = "  "
    for op in ops:
        where = f"@{offset} " if indent == "  " else ""
        yield (f"{indent}{where}{op.kind.name} seq={op.seq} id={op.id} type={op.type} "
               f"payload={len(op.payload)} bytes")

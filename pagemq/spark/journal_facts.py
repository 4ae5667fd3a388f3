"""What the batch reader needs from the journal: queue names, and which paged transactions
committed. Read from the journal's files without the broker, and without changing a byte.

A page record names its queues by id; the names are in the journal's queue records (type 2).
A TX_BATCH frame counts only once its transaction's commit record (type 8: transaction id,
page, address) is in the journal (docs/formats/page.md). A type-8 or type-2 ADD found in any
data file, live or since deleted, is a fact that stays true: a transaction that committed
stays committed, a queue id is never reused for another queue. So the scan keeps every such
ADD it meets and needs no replay. Archived data files (`archive-data-logs`) still hold the
commit records of archived pages, which the live journal deleted with those pages.

Cleanup and compaction may remove a file between listing and reading it; the ops it held
are then in a compacted file listed since, so the scan starts over (a few times at most).
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pagemq.storage import records as rec
from pagemq.storage.fileio import REAL_FILE_IO
from pagemq.storage.message_store import RecordType, page_tx_commit

__all__ = ["JournalFacts", "read_journal_facts"]

log = logging.getLogger("pagemq.spark")

_ATTEMPTS = 5


@dataclass(slots=True)
class JournalFacts:
    """Of one address: queue id -> name, and the (transaction id, page number) pairs of its
    paged transactions that committed."""

    queue_names: dict[int, str] = field(default_factory=dict)
    committed: set[tuple[int, int]] = field(default_factory=set)


def read_journal_facts(directories: Iterable[Path], address: str) -> JournalFacts:
    """Scan every data file of the given journal directories (missing ones are skipped)."""
    folders = [Path(directory) for directory in directories]
    for _attempt in range(_ATTEMPTS):
        facts = JournalFacts()
        try:
            for folder in folders:
                for path in REAL_FILE_IO.list(folder, rec.FILE_SUFFIX):
                    _scan(path, address, facts)
        except FileNotFoundError as exc:
            log.info("journal file %s went while it was read (cleanup or compaction): reading again",
                     exc.filename)
            continue
        return facts
    raise RuntimeError(f"the journal in {', '.join(map(str, folders))} kept changing while it was read "
                       f"({_ATTEMPTS} attempts)")


def _scan(path: Path, address: str, facts: JournalFacts) -> None:
    scan = rec.FileScan(path, REAL_FILE_IO.size(path))
    for offset, record in rec.scan_file(REAL_FILE_IO, path, scan, file_no=rec.parse_file_number(path.name)):
        for op in rec.record_ops(record, offset):
            if op.kind != rec.OpKind.ADD:
                continue
            if op.type == RecordType.QUEUE:
                _note_queue(op.id, op.payload, address, facts)
            elif op.type == RecordType.PAGE_TX_COMMIT:
                try:
                    commit = page_tx_commit(op.id, op.payload)
                except (struct.error, UnicodeDecodeError):
                    continue
                if commit.address == address:
                    facts.committed.add((commit.txid, commit.page_no))


def _note_queue(queue_id: int, payload: bytes, address: str, facts: JournalFacts) -> None:
    try:
        data = json.loads(payload)
    except ValueError:
        return
    if isinstance(data, dict) and data.get("address") == address and isinstance(data.get("name"), str):
        facts.queue_names[queue_id] = data["name"]

"""`pagemq data print` and `pagemq data check`: a stopped broker's data directory, read only.

Both open every file read-only and change nothing. They take the data directory's lock
shared (`storage/lock.py`), without creating the lock file: while one runs a broker cannot
start on the directory, and while a broker runs `check` refuses (exit 2: files being written
would look torn) and `print` warns that what it shows may be changing.

Exit codes: 0 done (for `check`: sound, notes only), 1 (`check`) problems found, each with
its file and offset, 2 the command could not run (no data directory, a broker holds it).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from pagemq.storage.inventory import AddressState, DataState, read_state
from pagemq.storage.journal_print import describe_journal
from pagemq.storage.lock import DataDirectoryLock, DataDirectoryLocked
from pagemq.storage.paging.page_writer import ADDRESS_FILE
from pagemq.storage.paging.paging_print import describe_paging

__all__ = ["EXIT_CANNOT_RUN", "EXIT_PROBLEMS", "check", "print_data"]

EXIT_PROBLEMS = 1
EXIT_CANNOT_RUN = 2


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Recovery code logs what it finds; these commands report it themselves."""
    logger = logging.getLogger("pagemq")
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.CRITICAL)
    logger.propagate = False
    try:
        yield
    finally:
        logger.setLevel(level)
        logger.propagate = propagate


def _open(data_dir: Path, *, refuse_running: bool, err: TextIO,
          journal_dir: Path | None = None, paging_dir: Path | None = None) -> DataDirectoryLock | None:
    if not data_dir.is_dir():
        print(f"pagemq: no data directory at {data_dir}", file=err)
        return None
    misplaced = _misplaced(data_dir, journal_dir, paging_dir)
    if misplaced is not None:
        print(f"pagemq: {data_dir} is not a data directory: {misplaced}", file=err)
        return None
    lock = DataDirectoryLock(data_dir)
    try:
        lock.acquire_shared()
    except DataDirectoryLocked as exc:
        if refuse_running:
            print(f"pagemq: {exc}; stop the broker first", file=err)
            return None
        print(f"pagemq: warning: {exc}; what is shown may be changing", file=err)
    return lock


def _misplaced(data_dir: Path, journal_dir: Path | None, paging_dir: Path | None) -> str | None:
    """What says `data_dir` is the journal or paging directory itself (a path one level too
    deep), whose check would otherwise find "no journal directory" and call it sound."""
    if journal_dir is None and not (data_dir / "journal").exists() and any(data_dir.glob("*.jnl")):
        return ("it holds journal files (it is a journal directory): give the data directory, or "
                "--config for a journal-directory configured outside it")
    if paging_dir is None and not (data_dir / "paging").exists() and any(
            data_dir.glob(f"*/{ADDRESS_FILE}")):
        return ("it holds page folders (it is a paging directory): give the data directory, or "
                "--config for a paging-directory configured outside it")
    return None


def print_data(data_dir: Path, address: str | None = None, *, records: bool = False,
               out: TextIO = sys.stdout, err: TextIO = sys.stderr,
               journal_dir: Path | None = None, paging_dir: Path | None = None) -> int:
    """Addresses and queues with their messages, then journal files and page folders.

    `journal_dir` / `paging_dir`: where the broker's config puts them, when not inside
    `data_dir` (`journal-directory`, `paging-directory`)."""
    lock = _open(data_dir, refuse_running=False, err=err, journal_dir=journal_dir, paging_dir=paging_dir)
    if lock is None:
        return EXIT_CANNOT_RUN
    try:
        with _quiet():
            state = read_state(data_dir, journal_dir=journal_dir, paging_dir=paging_dir)
            for line in _overview(state, address):
                print(line, file=out)
            if address is None:
                print(f"journal: {state.journal_dir}", file=out)
                for line in describe_journal(state.journal_dir, verbose=records):
                    print(f"  {line}", file=out)
            print(f"paging: {state.paging_dir}", file=out)
            for line in describe_paging(state.paging_dir, address, verbose=records):
                print(f"  {line}", file=out)
        if state.problems:
            print(f"({len(state.problems)} problem(s) found: see `pagemq data check`)", file=out)
    finally:
        lock.release()
    return 0


def _overview(state: DataState, only: str | None) -> Iterator[str]:
    addresses = [a for name, a in sorted(state.addresses.items()) if only is None or name == only]
    queues = [q for a in addresses for q in a.queues]
    yield (f"data directory {state.data_dir}: {len(addresses)} address(es), {len(queues)} queue(s); "
           f"messages not yet acknowledged: {sum(q.journal for q in queues)} in the journal, "
           f"{sum(q.paged for q in queues)} paged")
    if only is not None and not addresses:
        yield f"  no address {only!r}"
    for address in addresses:
        yield _address_line(address)
        for queue in sorted(address.queues, key=lambda q: q.name):
            selector = f", filter {queue.filter!r}" if queue.filter else ""
            yield (f"    queue {queue.name!r} (id {queue.queue_id}, {queue.routing_type}{selector}): "
                   f"{queue.messages} messages ({queue.journal} in the journal, {queue.paged} paged)")


def _address_line(address: AddressState) -> str:
    pages = "no page folder"
    if address.folder is not None:
        pages = f"page folder {address.folder.name}, {len(address.pages)} page file(s)"
    remembered = f"; {address.duplicate_ids} duplicate id(s) remembered" if address.duplicate_ids else ""
    return (f"  address {address.name!r} ({address.routing_type}): {address.messages} messages "
            f"for {len(address.queues)} queue(s); {pages}{remembered}")


def check(data_dir: Path, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
          journal_dir: Path | None = None, paging_dir: Path | None = None) -> int:
    """Read every journal and page file; one line per problem and note; 0 sound, 1 problems."""
    lock = _open(data_dir, refuse_running=True, err=err, journal_dir=journal_dir, paging_dir=paging_dir)
    if lock is None:
        return EXIT_CANNOT_RUN
    try:
        with _quiet():
            state = read_state(data_dir, journal_dir=journal_dir, paging_dir=paging_dir)
    finally:
        lock.release()
    for finding in state.findings:
        print(finding.line(state.data_dir), file=out)
    pages = sum(len(a.pages) for a in state.addresses.values())
    problems = len(state.problems)
    verdict = "sound" if not problems else f"{problems} problem(s)"
    print(f"checked {state.journal_files} journal file(s) ({state.journal_bytes} bytes, "
          f"{state.live_records} live records) and {pages} page file(s): {verdict}, "
          f"{len(state.findings) - problems} note(s)", file=out)
    if problems:
        print("the broker reads past damaged records and keeps the files (set aside once spent); "
              "see docs/formats/journal.md and page.md", file=out)
    return EXIT_PROBLEMS if problems else 0

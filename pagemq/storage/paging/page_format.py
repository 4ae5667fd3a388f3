"""Bytes of page files and their summary sidecars; the only module that packs them.

The byte tables live in docs/formats/page.md (a golden test keeps the two in step). In short:

- a page file `000000001.page` is a 24-byte file header, then frames;
- a frame (format 2) is `"PMQF", u32 crc32, u32 length, u32 first ordinal, body`; the body is
  one record: a MESSAGE entry, a BATCH of entries written as one frame so a crash keeps all
  of them or none, or a TX_BATCH: a batch that belongs to a transaction spanning more than
  this page file, counted only once its commit record is in the journal (the page store
  lists each page's TX_BATCHes, the core decides which committed). The magic and the
  ordinal let a reader resynchronise past a damaged frame and still know the position of
  every record after it (`read_frames`).
  Format 1 frames (`u32 length, u32 crc32(body), body`) are still read;
- a summary `000000001.summary` is written when the page is closed: counts, ids, per-queue
  counts, a sparse ordinal -> offset index and the caller's selector-summary blob, so opening
  a store reads summaries only (Artemis rescans every page at start: ARTEMIS-4065).

Unlike Artemis' `{ size body }` framing (PageReadWriter.java), every frame carries a CRC, so
a torn or damaged tail is found, not decoded as a message.
"""

from __future__ import annotations

import enum
import hashlib
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from pagemq.storage.message_codec import CodecError, read_expiration

__all__ = [
    "FILE_HEADER",
    "FORMAT_VERSION",
    "FRAME_HEADER",
    "INDEX_EVERY_BYTES",
    "PAGE_MAGIC",
    "SUMMARY_MAGIC",
    "FrameError",
    "PageScan",
    "PageSummaryRecord",
    "PagedRecord",
    "RecordType",
    "decode_file_header",
    "encode_file_header",
    "encode_frame",
    "encode_frames",
    "folder_name",
    "iter_frames",
    "page_file_name",
    "page_number",
    "scan_page",
    "summary_file_name",
]

PAGE_MAGIC = b"PMQP"
SUMMARY_MAGIC = b"PMQS"
FRAME_MAGIC = b"PMQF"
FORMAT_VERSION = 2  # of page files written now; version 1 (frames without magic/ordinal) is read
SUMMARY_VERSION = 2  # of summaries written now; version 1 (no transaction section) is read
READABLE_SUMMARY_VERSIONS = (1, 2)
READABLE_VERSIONS = (1, 2)
PAGE_SUFFIX = ".page"
SUMMARY_SUFFIX = ".summary"
# A frame longer than this is damage, not data: it stops a scan from trusting a wild length.
MAX_FRAME = 1 << 31
# The summary keeps one (ordinal, offset) pair per this many bytes of page, so a reader
# resuming mid-page seeks instead of decoding everything before its position.
INDEX_EVERY_BYTES = 256 * 1024
PERSISTENT = 0x01

FILE_HEADER = struct.Struct("<4sHHQII")      # magic, version, header size, page no, flags, crc
FRAME_HEADER = struct.Struct("<4sIII")       # magic, crc32 of all that follows it, body length, first ordinal
FRAME_CRC_FROM = 8                           # the CRC covers length, ordinal and body: bytes 8..end
V1_FRAME_HEADER = struct.Struct("<II")       # format 1: body length, crc32 of body
ENTRY_HEAD = struct.Struct("<BQHI")          # flags, message id, queue count, message length
BATCH_COUNT = struct.Struct("<I")
TX_BATCH_HEAD = struct.Struct("<QI")         # transaction id, entry count
TX_ENTRY = struct.Struct("<QII")             # summary: transaction id, first ordinal, records
SUMMARY_HEAD = struct.Struct("<4sHHQQIIQQIIIII")
QUEUE_ENTRY = struct.Struct("<QII")          # queue id, records, persistent records
INDEX_ENTRY = struct.Struct("<IQ")           # ordinal, byte offset of the frame
CRC = struct.Struct("<I")
NO_SELECTOR_SUMMARY = 0xFFFFFFFF
SUMMARY_DAMAGED = 0x0001  # summary flags (bytes 6-7)
assert FILE_HEADER.size == 24
assert FRAME_HEADER.size == 16
assert V1_FRAME_HEADER.size == 8
assert ENTRY_HEAD.size == 15
assert SUMMARY_HEAD.size == 68
assert QUEUE_ENTRY.size == 16
assert INDEX_ENTRY.size == 12

_QUEUE_IDS: dict[int, struct.Struct] = {}


class RecordType(enum.IntEnum):
    """First byte of a frame body. Numbers are never reused."""

    MESSAGE = 1
    BATCH = 2
    TX_BATCH = 3


class FrameError(ValueError):
    """Bytes that are not a complete, intact frame (torn tail or damage)."""


@dataclass(slots=True)
class PagedRecord:
    """One paged message: one copy per address, listing every queue it was routed to.

    `message` is the `message_codec` encoding; the page store looks inside it only for its
    head's expiration, when it reads a page whole (`PageScan.note_expirations`).
    `txid` (0 for none) marks a record written by a transaction whose outcome is decided
    outside the page file: records of one append share it and go in one TX_BATCH frame.
    """

    message_id: int
    queue_ids: tuple[int, ...]
    persistent: bool
    message: bytes
    txid: int = 0


def _queue_ids(count: int) -> struct.Struct:
    layout = _QUEUE_IDS.get(count)
    if layout is None:
        layout = _QUEUE_IDS[count] = struct.Struct(f"<{count}Q")
    return layout


# ----- names ---------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_PAGE_NAME = re.compile(r"^(\d{9,})\.(page|summary)$")


def folder_name(address: str) -> str:
    """Readable and collision-free: sanitised name (capped) plus 12 hex digits of SHA-256.

    Two addresses that sanitise alike ("a/b", "a:b") or differ only in case still get
    different folders; `address.txt` inside holds the exact name.
    """
    readable = _UNSAFE.sub("_", address).strip("._")[:48] or "address"
    digest = hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}-{digest}"


def page_file_name(page_no: int) -> str:
    return f"{page_no:09d}{PAGE_SUFFIX}"


def summary_file_name(page_no: int) -> str:
    return f"{page_no:09d}{SUMMARY_SUFFIX}"


def page_number(name: str) -> int | None:
    """The page number in a page or summary file name, None for any other file."""
    match = _PAGE_NAME.match(name)
    return int(match.group(1)) if match else None


# ----- file header ---------------------------------------------------------------------------


def encode_file_header(page_no: int) -> bytes:
    head = FILE_HEADER.pack(PAGE_MAGIC, FORMAT_VERSION, FILE_HEADER.size, page_no, 0, 0)
    crc = zlib.crc32(head[:-4])
    return head[:-4] + CRC.pack(crc)


def decode_file_header(data: bytes | memoryview) -> int:
    """The page number; FrameError if the header is short, foreign or damaged."""
    if len(data) < FILE_HEADER.size:
        raise FrameError(f"file header torn: {len(data)} of {FILE_HEADER.size} bytes")
    magic, version, size, page_no, _flags, crc = FILE_HEADER.unpack_from(data, 0)
    if magic != PAGE_MAGIC:
        raise FrameError(f"not a page file (magic {bytes(magic)!r})")
    if zlib.crc32(data[: FILE_HEADER.size - 4]) != crc:
        raise FrameError("file header CRC mismatch")
    if version not in READABLE_VERSIONS or size != FILE_HEADER.size:
        raise FrameError(f"unsupported page format version {version}")
    return int(page_no)


def page_format_version(data: bytes | memoryview) -> int:
    """The version of a file header `decode_file_header` accepted."""
    return int(FILE_HEADER.unpack_from(data, 0)[1])


# ----- frames --------------------------------------------------------------------------------


_MESSAGE_PREFIX = struct.Struct("<B" + ENTRY_HEAD.format.lstrip("<"))  # type byte + entry head
_MESSAGE = int(RecordType.MESSAGE)
_BATCH = int(RecordType.BATCH)
_TX_BATCH = int(RecordType.TX_BATCH)
_LENGTH_ORDINAL = struct.Struct("<II")


def encode_frame(records: Sequence[PagedRecord], first_ordinal: int = 0) -> bytes:
    """One frame: a MESSAGE for a single record, a BATCH (all or nothing) for several.

    `first_ordinal` is the ordinal the first record gets in its page. A frame's length does
    not depend on it, so a caller may encode, find the page too full, and encode again with
    ordinal 0 for the next page.
    """
    txid = records[0].txid
    if txid:
        if any(record.txid != txid for record in records):
            raise ValueError("records of one frame must share one transaction id")
        parts = [bytes((_TX_BATCH,)) + TX_BATCH_HEAD.pack(txid, len(records))]
    elif len(records) == 1:
        return _encode_message_frame(records[0], first_ordinal)
    else:
        parts = [bytes((_BATCH,)) + BATCH_COUNT.pack(len(records))]
    # A batch is a transaction's or a socket read's messages, by the thousand: its entries
    # are made in one loop, joined once and checksummed in one call (zlib lets go of the GIL
    # over a large buffer), the queue ids packed once while they repeat.
    pack_head = ENTRY_HEAD.pack
    qids: tuple[int, ...] = ()
    packed_qids = b""
    for record in records:
        if record.queue_ids != qids:
            qids = record.queue_ids
            packed_qids = _queue_ids(len(qids)).pack(*qids)
        message = record.message
        parts += (pack_head(PERSISTENT if record.persistent else 0, record.message_id, len(qids),
                            len(message)) + packed_qids, message)
    body = b"".join(parts)
    length = len(body)
    if length >= MAX_FRAME:
        raise FrameError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    crc = zlib.crc32(body, zlib.crc32(_LENGTH_ORDINAL.pack(length, first_ordinal)))
    return FRAME_HEADER.pack(FRAME_MAGIC, crc, length, first_ordinal) + body


def encode_frames(records: Sequence[PagedRecord], first_ordinal: int = 0) -> bytes:
    """Records that share one write but not their fate: a MESSAGE frame each, in a row, so
    damage to one costs that one only (the SENDs of one socket read, core/routing)."""
    return b"".join([_encode_message_frame(record, ordinal)
                     for ordinal, record in enumerate(records, first_ordinal)])


def _encode_message_frame(record: PagedRecord, first_ordinal: int) -> bytes:
    """The common case, one message, kept to a few calls: it runs for every paged message."""
    qids = record.queue_ids
    message = record.message
    prefix = _MESSAGE_PREFIX.pack(
        _MESSAGE, PERSISTENT if record.persistent else 0, record.message_id, len(qids), len(message)
    ) + _queue_ids(len(qids)).pack(*qids)
    length = len(prefix) + len(message)
    if length >= MAX_FRAME:
        raise FrameError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    crc = zlib.crc32(message, zlib.crc32(prefix, zlib.crc32(_LENGTH_ORDINAL.pack(length, first_ordinal))))
    return b"".join((FRAME_HEADER.pack(FRAME_MAGIC, crc, length, first_ordinal), prefix, message))


def encode_v1_frame(records: Sequence[PagedRecord]) -> bytes:
    """A format-1 frame (no magic, no ordinal): what older versions wrote; for tests."""
    body = encode_frame(records)[FRAME_HEADER.size:]
    return V1_FRAME_HEADER.pack(len(body), zlib.crc32(body)) + body


_QUEUE_ID_TUPLES: dict[bytes, tuple[int, ...]] = {}
_QUEUE_ID_TUPLES_MAX = 4096


def _decode_entry(body: memoryview, pos: int, txid: int = 0) -> tuple[PagedRecord, int]:
    flags, message_id, qcount, mlen = ENTRY_HEAD.unpack_from(body, pos)
    pos += ENTRY_HEAD.size
    layout = _queue_ids(qcount)
    # Records of one address mostly list the same queues: one shared tuple for each list seen
    # (a multicast record read back by 200 queues is 200 ids; one tuple each was most of
    # what reading back held in memory). Safe across threads: dict get/set are atomic.
    raw = body[pos:pos + layout.size].tobytes()
    qids = _QUEUE_ID_TUPLES.get(raw)
    if qids is None:
        qids = layout.unpack_from(body, pos)
        if len(_QUEUE_ID_TUPLES) < _QUEUE_ID_TUPLES_MAX:
            _QUEUE_ID_TUPLES[raw] = qids
    pos += layout.size
    end = pos + mlen
    if end > len(body):
        raise FrameError("entry runs past its frame")
    return PagedRecord(message_id, qids, bool(flags & PERSISTENT), bytes(body[pos:end]), txid), end


def decode_body(body: memoryview) -> list[PagedRecord]:
    """The entries of one frame body whose CRC already matched."""
    try:
        kind = body[0]
        if kind == RecordType.MESSAGE:
            entry, end = _decode_entry(body, 1)
            entries = [entry]
        elif kind == RecordType.BATCH or kind == RecordType.TX_BATCH:
            if kind == RecordType.BATCH:
                (count,) = BATCH_COUNT.unpack_from(body, 1)
                txid, end = 0, 1 + BATCH_COUNT.size
            else:
                txid, count = TX_BATCH_HEAD.unpack_from(body, 1)
                end = 1 + TX_BATCH_HEAD.size
                if not txid:
                    raise FrameError("transaction batch without a transaction id")
            entries = []
            for _ in range(count):
                entry, end = _decode_entry(body, end, txid)
                entries.append(entry)
        else:
            raise FrameError(f"unknown record type {kind}")
    except (struct.error, IndexError) as exc:
        raise FrameError(f"frame body malformed: {exc}") from exc
    if end != len(body) or not entries:
        raise FrameError("frame body length does not match its entries")
    return entries


@dataclass(frozen=True, slots=True)
class FrameDamage:
    """Bytes of a page from which no frame could be read.

    `offset` is where the bad frame starts; reading resumed at `end` (a valid frame starts
    there) when `resumed`, else the damage runs to the end of the data. `lost` is the number
    of ordinals (records) the damage took, when known (format 2 frames carry their ordinal).
    `more` (format 1 only) says valid frames do follow but their ordinals cannot be known,
    so they were not read: never a torn tail. `first_lost` is the ordinal the bad frame's
    first record had (the one expected there): the damage took ordinals `first_lost` to
    `first_lost + lost - 1`, or every ordinal from `first_lost` on when it did not resume.
    """

    offset: int
    end: int
    reason: str
    resumed: bool
    lost: int | None = None
    more: bool = False
    first_lost: int | None = None

    @property
    def length(self) -> int:
        return self.end - self.offset

    @property
    def torn(self) -> bool:
        """Nothing valid after it: what an interrupted append leaves (recovery may cut)."""
        return not self.resumed and not self.more


Frame = tuple[int, int, int, list[PagedRecord]]  # offset, size, first ordinal, entries


def read_frames(
    data: bytes | memoryview,
    start: int,
    end: int,
    *,
    version: int = FORMAT_VERSION,
    ordinal: int = 0,
    damage: list[FrameDamage] | None = None,
) -> Iterator[Frame]:
    """(offset, frame size, first ordinal, entries) for each intact frame in data[start:end].

    `ordinal` is the ordinal of the first record at `start` (format 1 frames do not carry
    it). A frame not complete within `end` ends the iteration quietly when `damage` is None
    (a chunk boundary, or a torn tail the caller handles); a damaged frame raises
    FrameError. With a `damage` list, `end` must be the end of the readable data: every bad
    stretch is noted there and reading resynchronises on the next valid frame (format 2),
    so damage costs the damaged frames only (`_resync` says how a frame is recognised).
    """
    view = memoryview(data)
    pos = start
    header = FRAME_HEADER if version >= 2 else V1_FRAME_HEADER
    unpack, crc32, magic_ok = FRAME_HEADER.unpack_from, zlib.crc32, FRAME_MAGIC
    while pos < end:
        if version >= 2 and pos + FRAME_HEADER.size <= end:  # the common case, inline
            magic, crc, length, first = unpack(view, pos)
            stop = pos + FRAME_HEADER.size + length
            if (magic == magic_ok and 0 < length < MAX_FRAME and stop <= end and first >= ordinal
                    and crc32(view[pos + FRAME_CRC_FROM:stop]) == crc):
                try:
                    entries = decode_body(view[pos + FRAME_HEADER.size:stop])
                except FrameError:
                    entries = None
                if entries is not None:
                    yield pos, stop - pos, first, entries
                    pos = stop
                    ordinal = first + len(entries)
                    continue
        try:
            if pos + header.size > end:
                raise _Incomplete
            size, first, entries = _frame_at(view, pos, end, version, ordinal)
        except (_Incomplete, FrameError) as exc:
            if damage is None:
                if isinstance(exc, _Incomplete):
                    return
                raise
            # An incomplete frame may be a torn tail, or a damaged length in mid-page: only
            # what follows can tell.
            reason = str(exc) if isinstance(exc, FrameError) else f"incomplete frame at offset {pos}"
            resume = _note_damage(view, pos, end, version, ordinal, reason, damage)
            if resume is None:
                return
            pos, ordinal = resume
            continue
        yield pos, size, first, entries
        pos += size
        ordinal = first + len(entries)


class _Incomplete(Exception):
    """The frame at hand runs past the end of the data (not damage by itself)."""


def _frame_at(view: memoryview, pos: int, end: int, version: int, ordinal: int
              ) -> tuple[int, int, list[PagedRecord]]:
    """(frame size, first ordinal, entries) of the frame at `pos`; FrameError if damaged."""
    if version >= 2:
        magic, crc, length, first = FRAME_HEADER.unpack_from(view, pos)
        if magic != FRAME_MAGIC:
            raise FrameError(f"no frame magic at offset {pos}")
        body_at = pos + FRAME_HEADER.size
    else:
        length, crc = V1_FRAME_HEADER.unpack_from(view, pos)
        first = ordinal
        body_at = pos + V1_FRAME_HEADER.size
    if length == 0 or length >= MAX_FRAME:
        raise FrameError(f"frame length {length} at offset {pos}")
    if body_at + length > end:
        raise _Incomplete
    body = view[body_at:body_at + length]
    expected = zlib.crc32(view[pos + FRAME_CRC_FROM:body_at + length]) if version >= 2 else zlib.crc32(body)
    if expected != crc:
        raise FrameError(f"frame CRC mismatch at offset {pos}")
    if first < ordinal:
        raise FrameError(f"frame at offset {pos} says ordinal {first}, below {ordinal}")
    return body_at + length - pos, first, decode_body(body)


def _note_damage(view: memoryview, pos: int, end: int, version: int, ordinal: int, reason: str,
                 damage: list[FrameDamage]) -> tuple[int, int] | None:
    """Record the damage at `pos`; (offset, ordinal) to read on from, None if nothing follows."""
    if version < 2:
        damage.append(FrameDamage(pos, end, reason, False, more=_v1_frame_after(view, pos, end),
                                  first_lost=ordinal))
        return None
    resume = _resync(view, pos, end, ordinal)
    if resume is None:
        damage.append(FrameDamage(pos, end, reason, False, first_lost=ordinal))
        return None
    first = FRAME_HEADER.unpack_from(view, resume)[3]
    damage.append(FrameDamage(pos, resume, reason, True, lost=first - ordinal, first_lost=ordinal))
    return resume, first


_MIN_ENTRY = ENTRY_HEAD.size


def _resync(view: memoryview, pos: int, end: int, ordinal: int) -> int | None:
    """The first offset after the bad frame at `pos` where a valid format-2 frame starts.

    First the bad frame's own length (damage inside a body leaves its header intact; then
    the body, which holds whatever a client sent, is never searched); then every later
    occurrence of the frame magic. A candidate must carry an ordinal at or above `ordinal`
    and at most one more per 15 bytes skipped (the smallest entry), a good CRC and a body
    whose entries add up; one found by its magic must also be followed by the end of the
    data, a frame cut short by it, a valid frame whose ordinal continues exactly, or a
    damaged one whose magic or next ordinal survived.
    """
    if pos + FRAME_HEADER.size <= end:
        magic, _crc, length, _first = FRAME_HEADER.unpack_from(view, pos)
        skip: int = pos + FRAME_HEADER.size + length
        intact_header = magic == FRAME_MAGIC and 0 < length < MAX_FRAME
        if intact_header and skip < end and _frame_fits(view, skip, end, pos, ordinal, follow=False):
            return skip
    data = view.obj if isinstance(view.obj, bytes) and len(view.obj) == len(view) else bytes(view)
    at = pos + 1
    while True:
        candidate = data.find(FRAME_MAGIC, at, end)
        if candidate < 0:
            return None
        if _frame_fits(view, candidate, end, pos, ordinal, follow=True):
            return candidate
        at = candidate + 1


def _frame_fits(view: memoryview, at: int, end: int, damaged_at: int, ordinal: int, *,
                follow: bool) -> bool:
    if at + FRAME_HEADER.size > end:
        return False
    first = FRAME_HEADER.unpack_from(view, at)[3]
    if not ordinal <= first <= ordinal + 1 + (at - damaged_at) // _MIN_ENTRY:
        return False
    try:
        size, first, entries = _frame_at(view, at, end, 2, ordinal)
    except (FrameError, _Incomplete):
        return False
    follower = at + size
    if not follow or follower + FRAME_HEADER.size > end:
        return True
    try:
        _size, next_first, _entries = _frame_at(view, follower, end, 2, first + len(entries))
    except _Incomplete:
        return True
    except FrameError:
        # Damaged too, but where a frame should start (its magic, or the ordinal that comes
        # next, survived): the candidate sits between two damaged frames.
        magic, _crc, _length, next_first = FRAME_HEADER.unpack_from(view, follower)
        return bool(magic == FRAME_MAGIC or next_first == first + len(entries))
    return next_first == first + len(entries)


def _v1_frame_after(view: memoryview, pos: int, end: int) -> bool:
    """Format 1: does any intact frame start after `pos`? (Probing every offset; such pages
    are only those older versions wrote.)"""
    for candidate in range(pos + 1, end - V1_FRAME_HEADER.size + 1):
        length = V1_FRAME_HEADER.unpack_from(view, candidate)[0]
        if not 0 < length < MAX_FRAME or candidate + V1_FRAME_HEADER.size + length > end:
            continue
        try:
            _frame_at(view, candidate, end, 1, 0)
        except (FrameError, _Incomplete):
            continue
        return True
    return False


def iter_frames(data: bytes, start: int, end: int, *, version: int = FORMAT_VERSION
                ) -> Iterator[tuple[int, int, list[PagedRecord]]]:
    """(offset, frame size, entries) of each intact frame; see `read_frames`."""
    for offset, size, _first, entries in read_frames(data, start, end, version=version):
        yield offset, size, entries


# ----- scan of a whole page ------------------------------------------------------------------


@dataclass(slots=True)
class PageScan:
    """What a page holds, from its frames: the input of a summary when none can be trusted."""

    count: int = 0
    persistent_count: int = 0
    first_id: int = 0
    last_id: int = 0
    queue_counts: dict[int, int] = field(default_factory=dict)
    queue_persistent: dict[int, int] = field(default_factory=dict)
    index: list[tuple[int, int]] = field(default_factory=list)
    good_size: int = FILE_HEADER.size
    problem: str | None = None
    damage: list[FrameDamage] = field(default_factory=list)
    damaged: bool = False  # holds bytes no frame could be read from (kept, never cut)
    version: int = FORMAT_VERSION
    # (transaction id, first ordinal, records) of each TX_BATCH frame, in page order
    tx_batches: list[tuple[int, int, int]] = field(default_factory=list)
    # The soonest expiration of its records (ms since the epoch, 0: none expires), known
    # (not None) only for a page read whole in this run (`scan_page`): an expiry scan of
    # page files need not read one that holds nothing due (not stored in the summary).
    soonest_expiration: int | None = None

    def note_expirations(self, entries: Sequence[PagedRecord]) -> None:
        """Fold the entries' expirations (from their codec heads) into `soonest_expiration`."""
        soonest = self.soonest_expiration or 0
        for entry in entries:
            try:
                expiration = read_expiration(entry.message)
            except CodecError:
                continue
            if expiration and (not soonest or expiration < soonest):
                soonest = expiration
        self.soonest_expiration = soonest

    def add(self, entries: Sequence[PagedRecord], offset: int, frame_size: int,
            first_ordinal: int | None = None) -> None:
        """Fold one frame in; the index gains an entry at each INDEX_EVERY_BYTES boundary.

        `first_ordinal` (above `count` after damage) leaves the lost ordinals unused."""
        if first_ordinal is not None and first_ordinal > self.count:
            self.count = first_ordinal
        if not self.index:
            self.first_id = entries[0].message_id
        if not self.index or offset // INDEX_EVERY_BYTES > self.index[-1][1] // INDEX_EVERY_BYTES:
            self.index.append((self.count, offset))
        if entries[0].txid:
            self.tx_batches.append((entries[0].txid, self.count, len(entries)))
        # Counted per run of entries with the same queues and persistence (a transaction's
        # thousand messages to one queue are one run), not entry by entry.
        counts, persistent = self.queue_counts, self.queue_persistent
        for (qids, durable), run in groupby(entries, _run_key):
            n = sum(1 for _ in run)
            for qid in qids:
                counts[qid] = counts.get(qid, 0) + n
            if durable:
                self.persistent_count += n
                for qid in qids:
                    persistent[qid] = persistent.get(qid, 0) + n
        if entries:
            self.count += len(entries)
            self.last_id = entries[-1].message_id
        self.good_size = offset + frame_size


def _run_key(entry: PagedRecord) -> tuple[tuple[int, ...], bool]:
    return entry.queue_ids, entry.persistent


def scan_page(data: bytes, expected_page_no: int) -> PageScan:
    """Every intact frame of a page file's bytes, reading past damage (`read_frames`).

    `good_size` is where the last intact frame ends; `damage` lists the bad stretches:
    one at the end that nothing valid follows (`FrameDamage.torn`) is a torn tail, any
    other sets `damaged`. `problem` says what the first one was.
    """
    scan = PageScan(good_size=0)
    try:
        page_no = decode_file_header(data)
    except FrameError as exc:
        scan.problem = str(exc)
        return scan
    if page_no != expected_page_no:
        scan.problem = f"header names page {page_no}"
        return scan
    scan.version = page_format_version(data)
    scan.good_size = FILE_HEADER.size
    scan.soonest_expiration = 0
    for offset, size, first, entries in read_frames(data, FILE_HEADER.size, len(data),
                                                   version=scan.version, damage=scan.damage):
        scan.add(entries, offset, size, first)
        scan.note_expirations(entries)
    if scan.damage:
        scan.problem = scan.damage[0].reason
        scan.damaged = any(not d.torn for d in scan.damage)
    return scan


# ----- summary sidecar -----------------------------------------------------------------------


@dataclass(slots=True)
class PageSummaryRecord:
    """The contents of a `.summary` file: enough to use a closed page without reading it."""

    page_no: int
    file_size: int
    count: int
    persistent_count: int
    first_id: int
    last_id: int
    queue_counts: dict[int, int]
    queue_persistent: dict[int, int]
    index: list[tuple[int, int]]
    selector_summary: bytes | None
    damaged: bool = False  # flags bit 0: the page holds unreadable bytes (set aside, not deleted)
    tx_batches: list[tuple[int, int, int]] = field(default_factory=list)  # see PageScan

    @classmethod
    def from_scan(
        cls, page_no: int, scan: PageScan, selector_summary: bytes | None
    ) -> PageSummaryRecord:
        return cls(
            page_no, scan.good_size, scan.count, scan.persistent_count, scan.first_id,
            scan.last_id, dict(scan.queue_counts), dict(scan.queue_persistent), list(scan.index),
            selector_summary, scan.damaged, list(scan.tx_batches),
        )

    def encode(self) -> bytes:
        blob = self.selector_summary
        head = SUMMARY_HEAD.pack(
            SUMMARY_MAGIC, SUMMARY_VERSION, SUMMARY_DAMAGED if self.damaged else 0, self.page_no,
            self.file_size, self.count,
            self.persistent_count, self.first_id, self.last_id, 0, max(self.count - 1, 0),
            len(self.queue_counts), len(self.index),
            NO_SELECTOR_SUMMARY if blob is None else len(blob),
        )
        parts = [head]
        for qid in sorted(self.queue_counts):
            parts.append(QUEUE_ENTRY.pack(qid, self.queue_counts[qid], self.queue_persistent.get(qid, 0)))
        parts.extend(INDEX_ENTRY.pack(ordinal, offset) for ordinal, offset in self.index)
        if blob is not None:
            parts.append(blob)
        parts.append(BATCH_COUNT.pack(len(self.tx_batches)))
        parts.extend(TX_ENTRY.pack(*batch) for batch in self.tx_batches)
        data = b"".join(parts)
        return data + CRC.pack(zlib.crc32(data))

    @classmethod
    def decode(cls, data: bytes) -> PageSummaryRecord:
        """FrameError unless the bytes are a complete summary with a matching CRC."""
        if len(data) < SUMMARY_HEAD.size + CRC.size:
            raise FrameError(f"summary too short: {len(data)} bytes")
        (crc,) = CRC.unpack_from(data, len(data) - CRC.size)
        if zlib.crc32(memoryview(data)[: len(data) - CRC.size]) != crc:
            raise FrameError("summary CRC mismatch")
        (magic, version, flags, page_no, file_size, count, persistent, first_id, last_id,
         _first_ord, _last_ord, queues, index_len, blob_len) = SUMMARY_HEAD.unpack_from(data, 0)
        if magic != SUMMARY_MAGIC or version not in READABLE_SUMMARY_VERSIONS:
            raise FrameError(f"not a summary of a known version ({bytes(magic)!r} v{version})")
        tx_batches: list[tuple[int, int, int]] = []
        try:
            queue_counts, queue_persistent, index, blob, pos = _summary_sections(
                data, queues, index_len, blob_len
            )
            if version >= 2:
                (batches,) = BATCH_COUNT.unpack_from(data, pos)
                pos += BATCH_COUNT.size
                end = pos + batches * TX_ENTRY.size
                if end > len(data) - CRC.size:
                    raise FrameError("summary transaction section runs past its end")
                tx_batches = [tuple(entry) for entry in TX_ENTRY.iter_unpack(data[pos:end])]
                pos = end
        except struct.error as exc:
            raise FrameError(f"summary sections malformed: {exc}") from exc
        if pos != len(data) - CRC.size or len(queue_counts) != queues:
            raise FrameError("summary sections do not add up to its length")
        return cls(page_no, file_size, count, persistent, first_id, last_id, queue_counts,
                   queue_persistent, index, blob, bool(flags & SUMMARY_DAMAGED), tx_batches)


def _summary_sections(
    data: bytes, queues: int, index_len: int, blob_len: int
) -> tuple[dict[int, int], dict[int, int], list[tuple[int, int]], bytes | None, int]:
    pos = SUMMARY_HEAD.size
    queue_counts: dict[int, int] = {}
    queue_persistent: dict[int, int] = {}
    end = pos + queues * QUEUE_ENTRY.size
    for qid, total, durable in QUEUE_ENTRY.iter_unpack(data[pos:end]):
        queue_counts[qid] = total
        if durable:
            queue_persistent[qid] = durable
    pos, end = end, end + index_len * INDEX_ENTRY.size
    index = [(ordinal, offset) for ordinal, offset in INDEX_ENTRY.iter_unpack(data[pos:end])]
    pos = end
    if blob_len == NO_SELECTOR_SUMMARY:
        return queue_counts, queue_persistent, index, None, pos
    return queue_counts, queue_persistent, index, data[pos:pos + blob_len], pos + blob_len

"""A set of record ordinals of one page, as a bitmap: one bit per record, not ~40 bytes.

A queue keeps, per page it still has records in, which ordinals it acknowledged, read and
claimed (taken ahead by a selective consumer).
As Python sets those cost ~40 bytes per ordinal (hash slot plus int object): a selective
consumer that acknowledged every other message of a 10M-message backlog held 5M of them, some
200 MB; 200 subscribers of a topic, each two pages of 10,000 records into its backlog, as
much. As bits the same is 1.25 KB per 10,000-record page, whatever is marked.

Loop-only, like the bookkeeping that holds it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

__all__ = ["OrdinalSet"]

_BULK = 64  # `update` with at least this many ordinals sets them as one bitmap


class OrdinalSet:
    """Set-like (add, discard, in, len, iteration, |=) over non-negative ints.

    `count` is len() and `top` an upper bound of the ordinals in it (the highest added since
    it was last empty), as plain attributes: a queue's reading asks `ordinal in acked` for
    every record it reads, and `ordinal > acked.top` answers most of those without a call.
    """

    __slots__ = ("_bits", "count", "top")

    def __init__(self, ordinals: Iterable[int] = ()) -> None:
        self._bits = bytearray()
        self.count = 0
        self.top = -1
        for ordinal in ordinals:
            self.add(ordinal)

    def __contains__(self, ordinal: object) -> bool:
        if not isinstance(ordinal, int):
            return False
        byte = ordinal >> 3
        bits = self._bits
        return 0 <= byte < len(bits) and bool(bits[byte] >> (ordinal & 7) & 1)

    def add(self, ordinal: int) -> bool:
        """Whether it was not in the set (set.add answers nothing; one call here does both)."""
        byte = ordinal >> 3
        bits = self._bits
        if byte >= len(bits):
            # Grow by half again at least: pages fill in order, one ordinal at a time.
            bits.extend(bytes(max(byte + 1 - len(bits), len(bits) // 2, 16)))
        mask = 1 << (ordinal & 7)
        if bits[byte] & mask:
            return False
        bits[byte] |= mask
        self.count += 1
        if ordinal > self.top:
            self.top = ordinal
        return True

    def discard(self, ordinal: int) -> None:
        byte = ordinal >> 3
        bits = self._bits
        if byte < len(bits):
            mask = 1 << (ordinal & 7)
            if bits[byte] & mask:
                bits[byte] &= ~mask & 0xFF
                self.count -= 1
                if not self.count:  # emptied (claims, all settled): hold no bytes for it
                    self._bits = bytearray()
                    self.top = -1

    def update(self, ordinals: Iterable[int]) -> None:
        if not isinstance(ordinals, list | tuple | array | range) or len(ordinals) < _BULK:
            for ordinal in ordinals:
                self.add(ordinal)
            return
        # Many at once (a streaming reader served a page's records): set the bits in a
        # bitmap of their own, then OR it in whole, instead of a call per ordinal.
        top = max(ordinals)
        if min(ordinals) < 0:
            raise ValueError("ordinals are non-negative")
        new = bytearray((top >> 3) + 1)
        for ordinal in ordinals:
            new[ordinal >> 3] |= 1 << (ordinal & 7)
        merged = self.as_int() | int.from_bytes(new, "little")
        size = max(len(self._bits), len(new))
        self._bits = bytearray(merged.to_bytes(size, "little"))
        self.count = merged.bit_count()
        self.top = max(self.top, top)

    def __ior__(self, ordinals: Iterable[int]) -> OrdinalSet:
        self.update(ordinals)
        return self

    def as_int(self) -> int:
        """The bitmap as one int (bit n set: ordinal n is in), for whole-set AND and counts."""
        return int.from_bytes(self._bits, "little")

    def count_outside(self, *others: OrdinalSet) -> int:
        """How many of these ordinals are in none of `others` (whole bitmaps at once)."""
        mine = self.as_int()
        for other in others:
            if other.count:
                mine &= ~other.as_int()
        return mine.bit_count()

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[int]:
        for index, value in enumerate(self._bits):
            if value:
                base = index << 3
                for bit in range(8):
                    if value >> bit & 1:
                        yield base + bit

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OrdinalSet | set | frozenset):
            return set(self) == set(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OrdinalSet({sorted(self)!r})"

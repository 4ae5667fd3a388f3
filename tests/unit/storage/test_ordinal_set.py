"""OrdinalSet: a page's acked/read ordinals as a bitmap, behaving as the set it replaced."""

from __future__ import annotations

import random
import sys

from pagemq.storage.paging.ordinal_set import OrdinalSet


def test_ordinal_set_behaves_like_a_set_of_ints() -> None:
    rnd = random.Random(7)
    bits, plain = OrdinalSet(), set()
    for _ in range(5000):
        ordinal = rnd.randrange(3000)
        if rnd.random() < 0.7:
            bits.add(ordinal)
            plain.add(ordinal)
        else:
            bits.discard(ordinal)
            plain.discard(ordinal)
        assert len(bits) == len(plain)
    assert sorted(bits) == sorted(plain)
    assert all((n in bits) == (n in plain) for n in range(-5, 3100))
    assert bits == plain
    bits |= {4000, 1}
    assert 4000 in bits and len(bits) == len(plain | {4000, 1})
    assert "x" not in bits and not OrdinalSet()


def test_half_of_a_large_page_marked_costs_bits_not_set_entries() -> None:
    bits = OrdinalSet(range(0, 100_000, 2))
    assert len(bits) == 50_000
    assert sys.getsizeof(bits._bits) < 20_000  # a set of the same: ~2 MB with its int objects


def test_an_emptied_set_holds_no_bytes() -> None:
    claimed = OrdinalSet(range(0, 9000, 2))
    for ordinal in range(0, 9000, 2):
        claimed.discard(ordinal)
    assert not claimed and len(claimed._bits) == 0 and claimed.top == -1
    claimed.add(5)
    assert list(claimed) == [5] and claimed.top == 5


def test_bulk_update_marks_the_same_ordinals_as_one_add_each() -> None:
    from array import array

    rnd = random.Random(11)
    for _ in range(200):
        bits, plain = OrdinalSet(), set()
        for _step in range(4):
            start = rnd.randrange(0, 5000)
            size = rnd.choice((1, 63, 64, 500, 2999))
            kind = rnd.choice(("array", "list", "range"))
            if kind == "range":
                many: list[int] | array[int] | range = range(start, start + size)
            else:
                picked = sorted(rnd.sample(range(start, start + 3000), size))
                many = array("q", picked) if kind == "array" else picked
            bits.update(many)
            plain.update(many)
            assert len(bits) == len(plain) and bits.top >= max(plain)  # an upper bound
            if rnd.random() < 0.3:
                gone = rnd.choice(sorted(plain))
                bits.discard(gone)
                plain.discard(gone)
        assert set(bits) == plain

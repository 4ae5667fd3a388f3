"""`StreamReader`: which ids a commit may acknowledge (core/stream_reader.py)."""

from __future__ import annotations

import random
from array import array

from pagemq.core.stream_reader import StreamReader


def test_before_any_read_every_id_counts_as_served():
    reader = StreamReader("r")
    assert reader.was_served(1) and reader.was_served(10**15)


def test_only_served_ids_above_the_first_read_count():
    reader = StreamReader("r")
    reader.note_read(100, 200)
    reader.note_served(array("q", [101, 103, 150]))
    assert reader.was_served(99) and reader.was_served(100)  # not read this run: every one
    assert [i for i in range(101, 201) if reader.was_served(i)] == [101, 103, 150]


def test_chunks_out_of_order_and_reads_of_the_same_range_again_merge():
    rng = random.Random(7)
    reader = StreamReader("r")
    reader.note_read(0, 10_000)
    served = sorted(rng.sample(range(1, 10_001), 3000))
    chunks = [served[i:i + 97] for i in range(0, len(served), 97)]
    rng.shuffle(chunks)
    for chunk in chunks + chunks[:5]:  # some read twice
        reader.note_served(array("q", chunk))
    wanted = set(served)
    assert all(reader.was_served(i) == (i in wanted) for i in range(1, 10_001))
    reader.note_served(array("q", [served[10], 5, 9_999]))  # spans many chunks
    wanted |= {5, 9_999}
    assert all(reader.was_served(i) == (i in wanted) for i in range(1, 10_001))


def test_a_commit_forgets_what_was_served_below_it_and_never_goes_back():
    reader = StreamReader("r")
    reader.note_read(0, 100)
    reader.note_served(array("q", [1, 2, 3]))
    reader.note_served(array("q", [10, 20]))
    reader.committed_to(5)
    assert reader.committed == 5 and reader.served == [array("q", [10, 20])]
    reader.committed_to(2)
    assert reader.committed == 5
    assert reader.was_served(20) and not reader.was_served(15)

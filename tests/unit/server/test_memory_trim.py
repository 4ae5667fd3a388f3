"""When the broker hands freed memory back to the OS (malloc_trim)."""

from __future__ import annotations

import itertools

from pagemq.server.memory_trim import MAX_INTERVAL, MemoryTrimmer

MIB = 1 << 20


class FakeProcess:
    """RSS that a trim brings down to `floor` (what is really in use)."""

    def __init__(self, rss: int, floor: int) -> None:
        self.value = rss
        self.floor = floor
        self.now = 0.0
        self.trims = 0

    def rss(self) -> int:
        return self.value

    def trim(self) -> None:
        self.trims += 1
        self.value = max(self.floor, min(self.value, self.floor))

    def trimmer(self) -> MemoryTrimmer:
        return MemoryTrimmer(self.trim, self.rss, threshold=32 * MIB, clock=lambda: self.now)


def test_memory_held_as_messages_is_not_trimmed() -> None:
    process = FakeProcess(rss=40 * MIB, floor=40 * MIB)
    trimmer = process.trimmer()
    trimmer.baseline(0)
    process.value = 440 * MIB
    assert not trimmer.check(400 * MIB)
    assert process.trims == 0


def test_a_drained_backlog_is_trimmed_back_to_the_start_up_size() -> None:
    process = FakeProcess(rss=40 * MIB, floor=40 * MIB)
    trimmer = process.trimmer()
    trimmer.baseline(0)
    process.value = 440 * MIB
    assert trimmer.check(0)
    assert process.value == 40 * MIB
    assert not trimmer.check(0)


def test_a_little_growth_is_left_alone() -> None:
    process = FakeProcess(rss=40 * MIB, floor=40 * MIB)
    trimmer = process.trimmer()
    trimmer.baseline(0)
    process.value = 60 * MIB
    assert not trimmer.check(0)


def test_trims_that_free_nothing_back_off_to_once_a_minute() -> None:
    process = FakeProcess(rss=200 * MIB, floor=200 * MIB)  # all of it really in use
    trimmer = process.trimmer()
    trimmer.base_overhead = 40 * MIB
    times = []
    while process.now < 600:
        if trimmer.check(0):
            times.append(process.now)
        process.now += 1
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[:5] == [2, 4, 8, 16, 32]
    assert max(gaps) <= MAX_INTERVAL
    assert len(times) < 20


def test_without_malloc_trim_nothing_happens() -> None:
    trimmer = MemoryTrimmer(lambda: None, lambda: None)
    assert not trimmer.check(0)


def test_a_further_drop_in_accounted_memory_ends_the_back_off() -> None:
    process = FakeProcess(rss=300 * MIB, floor=300 * MIB)
    trimmer = process.trimmer()
    trimmer.base_overhead = 40 * MIB
    assert trimmer.check(100 * MIB)  # frees nothing: backs off
    process.now += 1
    assert not trimmer.check(100 * MIB)
    process.floor = 60 * MIB
    assert trimmer.check(20 * MIB)  # 80 MiB more freed since: at once
    assert process.value == 60 * MIB

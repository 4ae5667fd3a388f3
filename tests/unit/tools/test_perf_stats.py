"""pagemq perf statistics: histogram percentiles against exact ones, merging, rates."""

from __future__ import annotations

import random

import pytest

from pagemq.tools.perf_stats import LatencyHistogram, RoleStats, percentile_of_sorted, summarize


def _histogram(samples_ns: list[int]) -> LatencyHistogram:
    histogram = LatencyHistogram()
    for sample in samples_ns:
        histogram.record(sample)
    return histogram


@pytest.mark.parametrize("percent", [1, 50, 90, 99, 99.9, 100])
def test_percentiles_below_two_ms_are_exact_to_the_microsecond(percent: float) -> None:
    rng = random.Random(7)
    samples = [rng.randrange(0, 2_000) * 1000 for _ in range(5000)]
    exact = percentile_of_sorted(sorted(s / 1e6 for s in samples), percent)
    assert _histogram(samples).percentile_ms(percent) == pytest.approx(exact, abs=1e-9)


@pytest.mark.parametrize("percent", [50, 99, 99.99])
def test_percentiles_above_two_ms_are_within_a_tenth_of_a_percent(percent: float) -> None:
    rng = random.Random(11)
    samples = [int(rng.lognormvariate(17, 2)) for _ in range(20_000)]  # ~ms .. minutes, in ns
    exact = percentile_of_sorted(sorted(s / 1e6 for s in samples), percent)
    measured = _histogram(samples).percentile_ms(percent)
    assert measured is not None
    assert measured <= exact + 1e-3  # a bucket's lower bound, never above the sample
    assert measured == pytest.approx(exact, rel=1e-3, abs=1e-3)


def test_maximum_is_exact_and_p100_is_the_maximum() -> None:
    histogram = _histogram([5_000, 123_456_789, 3_000_000])
    assert histogram.max_ms() == 123.456789
    assert histogram.percentile_ms(100) == 123.456789


def test_a_single_sample_is_every_percentile() -> None:
    histogram = _histogram([4_321_000])
    assert histogram.percentile_ms(1) == histogram.percentile_ms(99) == pytest.approx(4.321, rel=1e-3)


def test_empty_histogram_has_no_percentiles() -> None:
    histogram = LatencyHistogram()
    assert histogram.percentile_ms(50) is None
    assert histogram.max_ms() is None


def test_negative_latency_from_clock_steps_counts_as_zero() -> None:
    histogram = _histogram([-5_000_000, 1_000_000])
    assert histogram.count == 2
    assert histogram.percentile_ms(50) == 0.0


def test_merging_histograms_equals_recording_everything_in_one() -> None:
    rng = random.Random(3)
    samples = [rng.randrange(1, 10**10) for _ in range(3000)]
    merged = _histogram(samples[:1000])
    merged.merge(_histogram(samples[1000:]))
    whole = _histogram(samples)
    assert merged.counts == whole.counts
    assert (merged.count, merged.max_ns) == (whole.count, whole.max_ns)


def test_histogram_stays_small_for_a_wide_range_of_latencies() -> None:
    histogram = _histogram(list(range(0, 10**11, 10**6 + 7)))  # 1 ms .. 100 s: 100k samples
    assert len(histogram.counts) < 20_000


def test_summary_rates_run_from_the_phase_start_to_the_last_event() -> None:
    start = 1_000_000_000_000
    one = RoleStats(connections=2, messages=30_000, body_bytes=30_000 * 1024, last_ns=start + 2 * 10**9)
    two = RoleStats(connections=2, messages=10_000, body_bytes=10_000 * 1024, last_ns=start + 4 * 10**9)
    two.latency.record(2_000_000)
    summary = summarize("produce", "producers", [one, two], start, complete=True)
    assert summary.connections == 4
    assert summary.messages == 40_000
    assert summary.seconds == 4.0
    assert summary.msgs_per_s == 10_000
    assert summary.mb_per_s == pytest.approx(40_000 * 1024 / 4 / 1e6)
    assert summary.latency_kind == "send-receipt"
    assert summary.p50_ms == summary.p99_ms == summary.max_ms == 2.0
    assert summary.complete


def test_summary_without_messages_has_zero_rates_not_a_division_error() -> None:
    summary = summarize("consume", "consumers", [RoleStats(connections=1)], 10**18, complete=True)
    assert (summary.messages, summary.seconds, summary.msgs_per_s, summary.mb_per_s) == (0, 0.0, 0.0, 0.0)
    assert summary.p50_ms is None
    assert summary.as_json()["latency_ms"] is None


def test_summary_with_errors_is_incomplete_and_lists_them() -> None:
    failed = RoleStats(connections=1, errors=["consumer: connection lost"])
    summary = summarize("consume", "consumers", [failed], 0, complete=True)
    assert not summary.complete
    assert summary.as_json()["errors"] == ["consumer: connection lost"]

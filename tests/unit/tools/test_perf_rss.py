"""pagemq perf broker memory: the RSS of a whole process tree, and its peak per phase."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pagemq.tools.perf_rss import RssSampler, tree_pids, tree_rss_bytes

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


def test_tree_includes_children_and_their_memory() -> None:
    alone = tree_rss_bytes(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; x = b'x' * (64 << 20); time.sleep(30)"],
                             stdout=subprocess.PIPE)
    try:
        for _ in range(200):  # until the child has allocated its 64 MiB
            rss = tree_rss_bytes(os.getpid())
            assert rss is not None and alone is not None
            if rss - alone > 60 << 20:
                break
            time.sleep(0.05)
        assert child.pid in tree_pids(os.getpid())
        assert rss - alone > 60 << 20
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def test_a_process_that_is_gone_has_no_rss() -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    assert tree_rss_bytes(int(finished.stdout)) is None


def test_sampler_keeps_the_peak_until_reset() -> None:
    sampler = RssSampler(os.getpid())
    sampler.sample()
    first = sampler.peak
    assert first is not None and first > 0
    sampler.sample()
    assert sampler.peak is not None and sampler.peak >= first
    sampler.reset()
    assert sampler.peak is None


def test_sampler_without_a_pid_reports_nothing() -> None:
    sampler = RssSampler(None)
    sampler.sample()
    assert sampler.peak is None

"""pagemq perf command line: defaults, value parsing, refused combinations, phase plans."""

from __future__ import annotations

import argparse
import os

import pytest

from pagemq.tools.perf import build_parser, client_options, main, phase_plans, worker_count
from pagemq.tools.perf_runner import PhasePlan, split_count, split_plan
from pagemq.tools.perf_worker import WorkerPlan


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_defaults_are_the_fair_comparison_settings() -> None:
    args = _args()
    options = client_options(args)
    assert (options.host, options.port, options.destination) == ("127.0.0.1", 61613, "/queue/perf")
    assert (options.size, options.persistent, options.receipt_window) == (1024, True, 1000)
    assert (options.ack, options.prefetch, options.ack_every) == ("client-individual", 1000, 500)
    assert args.phase == "both"
    assert phase_plans(args)[0].duration == 10.0


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10.0), ("500ms", 0.5), ("2m", 120.0), ("3", 3.0),
                                               ("1.5", 1.5)])
def test_duration_accepts_units_and_bare_seconds(text: str, seconds: float) -> None:
    assert _args("--duration", text).duration == seconds


@pytest.mark.parametrize(("text", "count"), [("100000", 100_000), ("100k", 100_000), ("2M", 2_000_000)])
def test_count_accepts_k_and_m_suffixes(text: str, count: int) -> None:
    assert _args("--count", text).count == count


def test_size_accepts_units() -> None:
    assert _args("--size", "4KiB").size == 4096


def test_url_gives_host_port_and_default_credentials_flags_override() -> None:
    options = client_options(_args("--url", "stomp://guest:guest@127.0.0.1:61615", "--passcode", "pw"))
    assert (options.host, options.port) == ("127.0.0.1", 61615)
    assert (options.login, options.passcode) == ("guest", "pw")


def test_stomp_ssl_url_means_tls_verified_with_the_given_ca() -> None:
    options = client_options(_args("--url", "stomp+ssl://localhost:61614", "--tls-ca", "ca.pem"))
    assert (options.host, options.port, options.tls, options.tls_ca) == ("localhost", 61614, True, "ca.pem")
    assert client_options(_args("--url", "stomp://127.0.0.1:61613")).tls is False


def test_headers_and_vhost_reach_the_client_options() -> None:
    options = client_options(_args("--header", "x-queue-type:quorum", "--header", "a:b:c", "--vhost", "/"))
    assert options.headers == (("x-queue-type", "quorum"), ("a", "b:c"))
    assert options.vhost == "/"


def test_no_persistent_and_no_receipts() -> None:
    options = client_options(_args("--no-persistent", "--receipt-window", "0"))
    assert (options.persistent, options.receipt_window) == (False, 0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--count", "10", "--duration", "5s"],
        ["--ack", "sometimes"],
        ["--phase", "produce", "--producers", "0"],
        ["--phase", "sequential", "--consumers", "0"],
        ["--ack", "client", "--prefetch", "10", "--ack-every", "11"],
        ["--url", "http://127.0.0.1:61613"],
        ["--url", "stomp://127.0.0.1:99999"],
        ["--duration", "0s"],
        ["--count", "0"],
        ["--count", "ten"],
        ["--header", "no-colon"],
        ["--processes", "0"],
    ],
)
def test_bad_flags_exit_2_before_connecting(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "pagemq perf" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--receipt-window" in capsys.readouterr().out


def test_processes_default_to_cpus_capped_by_the_connections_in_use() -> None:
    cpus = os.cpu_count() or 1
    assert worker_count(_args("--producers", "1", "--consumers", "1")) == min(cpus, 2)
    assert worker_count(_args("--producers", "64", "--consumers", "64")) == cpus
    assert worker_count(_args("--phase", "produce", "--producers", "1", "--consumers", "9")) == 1
    assert worker_count(_args("--processes", "3")) == 3


def test_count_is_split_over_producers_and_is_the_consumers_target() -> None:
    (plan,) = phase_plans(_args("--phase", "both", "--count", "10", "--producers", "4", "--consumers", "2"))
    assert plan.producer_quotas == (3, 3, 2, 2)
    assert (plan.consumers, plan.consume_target, plan.duration) == (2, 10, None)


def test_duration_gives_producers_no_quota() -> None:
    (plan,) = phase_plans(_args("--phase", "produce", "--duration", "5s", "--producers", "2"))
    assert plan.producer_quotas == (None, None)
    assert plan.duration == 5.0


def test_sequential_fills_with_no_consumer_then_drains_what_was_produced() -> None:
    args = _args("--phase", "sequential", "--count", "100", "--producers", "4", "--consumers", "4")
    (fill,) = phase_plans(args)
    assert (fill.name, fill.consumers, sum(q or 0 for q in fill.producer_quotas)) == ("produce", 0, 100)
    (drain,) = phase_plans(args, produced=97)
    assert (drain.name, drain.producer_quotas, drain.consumers) == ("consume", (), 4)
    assert (drain.consume_target, drain.duration) == (97, None)


def test_consume_phase_alone_stops_at_the_count() -> None:
    (plan,) = phase_plans(_args("--phase", "consume", "--count", "50", "--consumers", "3"))
    assert (plan.producer_quotas, plan.consumers, plan.consume_target) == ((), 3, 50)


@pytest.mark.parametrize(("total", "parts"), [(10, 3), (3, 5), (100_000, 4), (0, 2)])
def test_split_count_is_near_equal_and_sums_to_the_total(total: int, parts: int) -> None:
    shares = split_count(total, parts)
    assert len(shares) == parts and sum(shares) == total
    assert max(shares) - min(shares) <= 1


def test_connections_are_dealt_round_robin_and_idle_workers_get_nothing() -> None:
    plan = PhasePlan("both", producer_quotas=(5, 5, 5), consumers=4)
    assert split_plan(plan, 2) == [WorkerPlan("both", (5, 5), 2), WorkerPlan("both", (5,), 2)]
    assert split_plan(PhasePlan("produce", producer_quotas=(1,)), 3) == [
        WorkerPlan("produce", (1,), 0), None, None]

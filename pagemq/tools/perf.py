"""`pagemq perf`: a STOMP load generator for any broker, pagemq or a peer.

Producers and consumers are spread over worker processes (see perf_worker), because one
Python process is easily slower than the broker it is measuring, and then the figure would
describe the client. Everything that makes brokers comparable (persistent SENDs with
pipelined receipts, client-individual acks, equal prefetch, same frames) is a flag with the
fair default; see benchmarks/README.md and the project's notes/benchmarking.md.

Phases: `produce` (producers only), `consume` (consumers only, draining what is there),
`both` (at the same time) and `sequential` (fill with no consumer, then drain: the deep
queue case).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from urllib.parse import urlsplit

from pagemq.protocol.stomp.events import ACK_MODES
from pagemq.tools.perf_client import ClientOptions, PerfError
from pagemq.tools.perf_runner import PhasePlan, PhaseReport, WorkerPool, split_count
from pagemq.tools.perf_stats import RoleSummary
from pagemq.units import ConfigError, parse_duration, parse_size

__all__ = ["build_parser", "client_options", "main", "phase_plans", "worker_count"]

PHASES = ("produce", "consume", "both", "sequential")
TLS_SCHEMES = ("stomp+ssl", "stomps", "ssl")  # stomp+ssl://HOST:PORT: STOMP over TLS
DEFAULT_DURATION = 10.0


def _duration(text: str) -> float:
    """Seconds from "10s", "500ms", "2m"; a bare number means seconds (not ns) on the command line."""
    try:
        seconds = float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text, "")
    except ConfigError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (a bare number counts seconds; "
                                         'or use a unit like "5s" or "500ms")') from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return seconds


def _size(text: str) -> int:
    try:
        return parse_size(text, "", disabled_ok=False)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    """A non-negative integer; `100k` and `1M` spare counting zeros."""
    factors = {"k": 1000, "m": 1000**2}
    factor = factors.get(text[-1:].lower(), 1)
    digits = text[:-1] if factor != 1 else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return int(digits) * factor


def _header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r}")
    return name, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagemq perf",
        description="Load any STOMP broker with producers and consumers spread over processes; "
        "prints rates and latency percentiles per phase.",
    )
    target = parser.add_argument_group("broker")
    target.add_argument("--url", default="stomp://127.0.0.1:61613",
                        help="stomp://HOST:PORT, or stomp+ssl://HOST:PORT for TLS (default %(default)s)")
    target.add_argument("--tls-ca", metavar="FILE",
                        help="with a stomp+ssl:// URL: the CA file that signs the broker's certificate "
                        "(default: the system's CAs)")
    target.add_argument("--login", help="CONNECT login (RabbitMQ: guest)")
    target.add_argument("--passcode", help="CONNECT passcode (RabbitMQ: guest)")
    target.add_argument("--vhost",
                        help="CONNECT host header (RabbitMQ: the vhost, e.g. /); default the URL's host")
    target.add_argument("--destination", default="/queue/perf", help="default %(default)s")
    target.add_argument("--header", action="append", type=_header, default=[], metavar="NAME:VALUE",
                        help="extra header on SEND and SUBSCRIBE (repeatable), e.g. x-queue-type:quorum")
    load = parser.add_argument_group("load")
    load.add_argument("--producers", type=_count, default=1, metavar="N")
    load.add_argument("--consumers", type=_count, default=1, metavar="M")
    load.add_argument("--processes", type=_count, metavar="P",
                      help="worker processes (default: min(CPUs, connections in use))")
    load.add_argument("--phase", choices=PHASES, default="both",
                      help="produce | consume | both (at once) | sequential (fill, then drain); default both")
    amount = load.add_mutually_exclusive_group()
    amount.add_argument("--count", type=_count, metavar="N", help="messages per phase, over all connections")
    amount.add_argument("--duration", type=_duration, metavar="TIME",
                        help="length of each phase (default 10s)")
    load.add_argument("--size", type=_size, default=1024, help="body bytes (default %(default)s)")
    load.add_argument("--persistent", action=argparse.BooleanOptionalAction, default=True,
                      help="persistent:true on every SEND (default on)")
    load.add_argument("--receipt-window", type=_count, default=1000, metavar="W",
                      help="SENDs awaiting their RECEIPT per connection; 0 = no receipts "
                      "(default %(default)s)")
    load.add_argument("--ack", choices=ACK_MODES, default="client-individual", help="default %(default)s")
    load.add_argument("--ack-every", type=_count, metavar="K",
                      help="client mode: one cumulative ACK per K messages (default prefetch/2)")
    load.add_argument("--prefetch", type=_count, default=1000,
                      help="activemq.prefetchSize and prefetch-count (default %(default)s)")
    limits = parser.add_argument_group("limits and output")
    limits.add_argument("--idle-timeout", type=_duration, default=30.0, metavar="TIME",
                        help="end a phase that made no progress for this long (default 30s)")
    limits.add_argument("--connect-timeout", type=_duration, default=10.0, metavar="TIME")
    limits.add_argument("--broker-pid", type=_count, metavar="PID",
                        help="report the peak RSS of this process and its descendants per phase (Linux)")
    limits.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations argparse cannot express; each would otherwise hang or mislead."""
    if args.phase in ("produce", "both", "sequential") and args.producers < 1:
        parser.error(f"--phase {args.phase} needs --producers >= 1")
    if args.phase in ("consume", "both", "sequential") and args.consumers < 1:
        parser.error(f"--phase {args.phase} needs --consumers >= 1")
    if args.count is not None and args.count < 1:
        parser.error("--count must be at least 1")
    if args.prefetch < 1:
        parser.error("--prefetch must be at least 1")
    if args.ack_every is not None and not 1 <= args.ack_every <= args.prefetch:
        parser.error("--ack-every must be between 1 and --prefetch (or the broker stops delivering)")
    if args.processes is not None and args.processes < 1:
        parser.error("--processes must be at least 1")
    url = urlsplit(args.url)
    if url.scheme not in ("stomp", "tcp", *TLS_SCHEMES) or not url.hostname:
        parser.error(f"--url must look like stomp://HOST:PORT (or stomp+ssl://), got {args.url!r}")
    try:
        url.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        parser.error(f"--url has a bad port: {args.url!r}")


def client_options(args: argparse.Namespace) -> ClientOptions:
    url = urlsplit(args.url)
    return ClientOptions(
        host=url.hostname or "127.0.0.1",
        port=url.port or 61613,
        tls=url.scheme in TLS_SCHEMES,
        tls_ca=args.tls_ca,
        login=args.login if args.login is not None else url.username,
        passcode=args.passcode if args.passcode is not None else url.password,
        vhost=args.vhost,
        destination=args.destination,
        size=args.size,
        persistent=args.persistent,
        receipt_window=args.receipt_window,
        ack=args.ack,
        ack_every=args.ack_every or max(1, args.prefetch // 2),
        prefetch=args.prefetch,
        headers=tuple(args.header),
        connect_timeout=args.connect_timeout,
        # After a stop, outstanding receipts and the DISCONNECT receipt get this long at most.
        close_timeout=min(5.0, args.idle_timeout),
    )


def worker_count(args: argparse.Namespace) -> int:
    if args.processes is not None:
        return int(args.processes)
    used = {"produce": args.producers, "consume": args.consumers}.get(
        args.phase, args.producers + args.consumers
    )
    return max(1, min(os.cpu_count() or 1, used))


def effective_duration(args: argparse.Namespace) -> float | None:
    """Seconds per phase: --duration, else 10 s, unless --count bounds the phases instead."""
    if args.count is not None:
        return None
    return float(args.duration) if args.duration is not None else DEFAULT_DURATION


def phase_plans(args: argparse.Namespace, produced: int | None = None) -> list[PhasePlan]:
    """The phases to run; for `sequential`, call again with what the fill phase produced."""
    duration = effective_duration(args)
    quotas: tuple[int | None, ...] = (
        tuple(split_count(args.count, args.producers)) if args.count is not None
        else (None,) * args.producers
    )
    common = {"idle_timeout": args.idle_timeout}
    fill = PhasePlan("produce", producer_quotas=quotas, duration=duration, **common)
    drain = PhasePlan("consume", consumers=args.consumers, consume_target=args.count,
                      duration=duration, **common)
    if args.phase == "produce":
        return [fill]
    if args.phase == "consume":
        return [drain]
    if args.phase == "both":
        return [PhasePlan("both", producer_quotas=quotas, consumers=args.consumers,
                          consume_target=args.count, duration=duration, **common)]
    if produced is None:
        return [fill]
    # Drain exactly what the fill phase put in, however long that takes.
    return [PhasePlan("consume", consumers=args.consumers, consume_target=produced, **common)]


def _format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _describe(args: argparse.Namespace, options: ClientOptions, processes: int) -> str:
    amount = f"{args.count} messages" if args.count is not None else f"{effective_duration(args):g} s"
    acks = args.ack + (f" every {options.ack_every}" if args.ack == "client" else "")
    return (
        f"pagemq perf: {args.url} {options.destination}, phase {args.phase}, {amount} per phase, "
        f"{args.producers} producers, {args.consumers} consumers, {processes} processes, "
        f"{options.size}-byte {'persistent' if options.persistent else 'non-persistent'} bodies, "
        f"receipt window {options.receipt_window}, ack {acks}, prefetch {options.prefetch}"
    )


_COLUMNS = ("phase", "role", "conns", "messages", "seconds", "msg/s", "MB/s", "latency", "p50 ms",
            "p99 ms", "max ms", "")
_ROW = "{:<8} {:<9} {:>5} {:>9} {:>8} {:>9} {:>7}  {:<12} {:>8} {:>8} {:>8} {}"


def _row(summary: RoleSummary) -> str:
    note = "" if summary.complete else "INCOMPLETE"
    return _ROW.format(
        summary.phase, summary.role, summary.connections, summary.messages, f"{summary.seconds:.3f}",
        f"{summary.msgs_per_s:.0f}", f"{summary.mb_per_s:.2f}",
        summary.latency_kind if summary.p50_ms is not None else "-",
        _format_ms(summary.p50_ms), _format_ms(summary.p99_ms), _format_ms(summary.max_ms), note,
    )


def _roles(report: PhaseReport) -> list[RoleSummary]:
    return [role for role in (report.producers, report.consumers) if role is not None]


def _mib(size: int | None) -> float | None:
    return None if size is None else round(size / 2**20, 1)


def render_text(reports: Sequence[PhaseReport]) -> str:
    lines = [_ROW.format(*_COLUMNS).rstrip()]
    for report in reports:
        for summary in _roles(report):
            lines.append(_row(summary).rstrip())
            lines.extend(f"  error: {error}" for error in dict.fromkeys(summary.errors))
    peaks = [f"{r.name} {_mib(r.broker_peak_rss)} MiB" for r in reports if r.broker_peak_rss is not None]
    if peaks:
        lines.append("broker peak RSS (process tree): " + ", ".join(peaks))
    return "\n".join(lines)


def render_json(args: argparse.Namespace, options: ClientOptions, processes: int,
                reports: Sequence[PhaseReport], error: str | None = None) -> str:
    document = {
        "tool": "pagemq perf",
        "url": args.url,
        "destination": options.destination,
        "phase": args.phase,
        "options": {
            "producers": args.producers, "consumers": args.consumers, "processes": processes,
            "count": args.count, "duration": effective_duration(args), "size": options.size,
            "persistent": options.persistent, "receipt_window": options.receipt_window,
            "ack": options.ack, "ack_every": options.ack_every, "prefetch": options.prefetch,
            "headers": dict(options.headers),
        },
        "results": [
            {**summary.as_json(), "broker_peak_rss_mib": _mib(report.broker_peak_rss)}
            for report in reports for summary in _roles(report)
        ],
        "complete": error is None and all(report.complete for report in reports),
        "error": error,
    }
    return json.dumps(document, separators=(",", ":"))


def run(args: argparse.Namespace) -> tuple[list[PhaseReport], str | None]:
    """Run every phase; a PerfError (cannot connect, worker died) ends the run with a reason."""
    options = client_options(args)
    reports: list[PhaseReport] = []
    try:
        with WorkerPool(options, worker_count(args), args.broker_pid) as pool:
            for plan in phase_plans(args):
                reports.append(pool.run_phase(plan))
            if args.phase == "sequential":
                filled = reports[0].producers.messages if reports[0].producers else 0
                for plan in phase_plans(args, produced=filled):
                    reports.append(pool.run_phase(plan))
    except PerfError as exc:
        return reports, str(exc)
    return reports, None


def main(argv: list[str] | None = None) -> int:
    """Entry point of `pagemq perf`; 0 when every phase completed, 1 otherwise, 2 for bad flags."""
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else 2
    try:
        _check(parser, args)
    except SystemExit:
        return 2
    options = client_options(args)
    processes = worker_count(args)
    if not args.json:
        print(_describe(args, options, processes), flush=True)
    try:
        reports, error = run(args)
    except KeyboardInterrupt:
        print("pagemq perf: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(render_json(args, options, processes, reports, error), flush=True)
    else:
        if reports:
            print(render_text(reports), flush=True)
        if error is not None:
            print(f"pagemq perf: {error}", file=sys.stderr)
    return 0 if error is None and all(report.complete for report in reports) else 1


if __name__ == "__main__":
    sys.exit(main())

"""`pagemq` command line: serve, perf, data print, data check (also `python -m pagemq`)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

EXIT_CONFIG = 2
EXIT_LOCKED = 1  # another broker holds the data directory (docs/storage-format.md)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagemq", description="A STOMP broker that pages huge queues to disk"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker in the foreground")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--data-dir", help="data directory (default ./data)")
    serve.add_argument("--stomp", metavar="HOST:PORT", help="STOMP acceptor (default 127.0.0.1:61613)")
    serve.add_argument("--http", metavar="HOST:PORT", help="HTTP acceptor (default 127.0.0.1:8161)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands.add_parser("perf", help="STOMP load generator (see `pagemq perf --help`)", add_help=False)
    data = commands.add_parser("data", help="inspect a data directory without a running broker")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    show = data_commands.add_parser(
        "print", help="addresses and queues with their message counts, journal files, page folders")
    show.add_argument("--data-dir", type=Path, default=Path("data"))
    show.add_argument("--address", help="only this address (its queues and page folder)")
    show.add_argument("--records", "--verbose", "-v", dest="records", action="store_true",
                      help="also every journal record and paged message")
    check = data_commands.add_parser(
        "check", help="verify every journal and page file and their references; exit 1 on problems")
    check.add_argument("--data-dir", type=Path, default=Path("data"))
    from pagemq.integrations import queue_cli

    queue_cli.add_parser(commands)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from pagemq.server.config import ConfigError, load_config

    logging.basicConfig(
        level=args.log_level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = load_config(args.config, data_dir=args.data_dir, stomp=args.stomp, http=args.http)
    except ConfigError as exc:
        print(f"pagemq: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from pagemq.server.app import serve
    from pagemq.storage.lock import DataDirectoryLocked
    from pagemq.storage.message_codec import CodecError

    try:
        return serve(config)
    except DataDirectoryLocked as exc:
        print(f"pagemq: cannot start: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    except OSError as exc:
        print(f"pagemq: cannot start: {exc}", file=sys.stderr)
        return 1
    except CodecError as exc:
        # A record whose CRC is right but whose content this version cannot read: stop
        # rather than start without it (its messages would be lost on the next cleanup).
        print(f"pagemq: cannot start: unreadable record in {config.broker.data_directory}: {exc}",
              file=sys.stderr)
        return 1


def _data(args: argparse.Namespace) -> int:
    from pagemq.storage import data_commands

    if args.data_command == "check":
        return data_commands.check(args.data_dir)
    return data_commands.print_data(args.data_dir, args.address, records=args.records)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "perf":
        from pagemq.tools.perf import main as perf_main

        return perf_main(argv[1:])
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_CONFIG if exc.code not in (0, None) else 0
    if args.command == "serve":
        return _serve(args)
    if args.command == "queue":
        from pagemq.integrations import queue_cli

        return queue_cli.run(args)
    return _data(args)


if __name__ == "__main__":
    sys.exit(main())

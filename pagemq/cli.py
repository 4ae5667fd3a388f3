"""`pagemq` command line: serve, perf, data print, data check, config import-artemis, user
(also `python -m pagemq`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

EXIT_CONFIG = 2
EXIT_LOCKED = 1  # another broker holds the data directory (docs/storage-format.md)


class _OneLineParser(argparse.ArgumentParser):
    """A bad flag is one line naming it, exit 2 (the usage text is what `--help` is for);
    subcommands' parsers are made of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_CONFIG, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _OneLineParser(
        prog="pagemq", description="A STOMP broker that pages huge queues to disk"
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker in the foreground")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--data-dir", help="data directory (default ./data)")
    serve.add_argument("--stomp", metavar="HOST:PORT", help="STOMP acceptor (default 127.0.0.1:61613)")
    serve.add_argument("--http", metavar="HOST:PORT", help="HTTP acceptor (default 127.0.0.1:8161)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.add_argument("--log-format", default="text", choices=["text", "json"],
                       help="text lines, or one JSON object per line (docs/operations.md)")
    serve.add_argument("--log-config", type=Path, metavar="FILE",
                       help="a logging dictConfig file (.json, .toml; .yaml with PyYAML); "
                            "replaces --log-level and --log-format")
    commands.add_parser("perf", help="STOMP load generator (see `pagemq perf --help`)", add_help=False)
    data = commands.add_parser("data", help="inspect a data directory without a running broker")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    show = data_commands.add_parser(
        "print", help="addresses and queues with their message counts, journal files, page folders")
    _data_location(show)
    show.add_argument("--address", help="only this address (its queues and page folder)")
    show.add_argument("--records", "--verbose", "-v", dest="records", action="store_true",
                      help="also every journal record and paged message")
    check = data_commands.add_parser(
        "check", help="verify every journal and page file and their references; exit 1 on problems")
    _data_location(check)
    config = commands.add_parser("config", help="configuration tools")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    artemis = config_commands.add_parser(
        "import-artemis", help="print the pagemq TOML equivalent of an Artemis broker.xml")
    artemis.add_argument("broker_xml", type=Path, metavar="broker.xml")
    from pagemq.integrations import queue_cli
    from pagemq.security import user_cli

    user_cli.add_parser(commands)
    queue_cli.add_parser(commands)
    return parser


def _data_location(command: argparse.ArgumentParser) -> None:
    command.add_argument("--data-dir", type=Path,
                         help="data directory (default: the config file's data-directory, else ./data)")
    command.add_argument("--config", type=Path,
                         help="the broker's TOML configuration: its data, journal and paging directories")


class _VersionAction(argparse.Action):
    """`--version`: the installed package's version (read only when asked: start-up pays nothing)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help=str(kwargs.get("help")))

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from pagemq.version import package_version

        print(f"pagemq {package_version()}")
        parser.exit(0)


def _serve(args: argparse.Namespace) -> int:
    from pagemq.server.config import ConfigError, load_config
    from pagemq.server.log_setup import LogConfigError, configure_logging

    try:
        configure_logging(args.log_level, args.log_format, args.log_config)
    except LogConfigError as exc:
        print(f"pagemq: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
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
    from pagemq.server.config import ConfigError, load_config
    from pagemq.storage import data_commands

    data_dir = args.data_dir if args.data_dir is not None else Path("data")
    journal_dir = paging_dir = None
    if args.config is not None:
        try:
            flag = None if args.data_dir is None else str(data_dir)
            broker = load_config(args.config, data_dir=flag).broker
        except ConfigError as exc:
            print(f"pagemq: configuration error: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        data_dir, journal_dir = broker.data_directory, broker.journal_directory
        paging_dir = broker.paging_directory
    if args.data_command == "check":
        return data_commands.check(data_dir, journal_dir=journal_dir, paging_dir=paging_dir)
    return data_commands.print_data(data_dir, args.address, records=args.records,
                                    journal_dir=journal_dir, paging_dir=paging_dir)


def _config(args: argparse.Namespace) -> int:
    from pagemq.tools.artemis_import import main as import_artemis

    return import_artemis(args.broker_xml)


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
    try:
        return _run(args)
    except BrokenPipeError:
        # Piped into `head`, which has stopped reading (`pagemq data print | head`, `pagemq
        # queue list | head`): end quietly, as `cat` does. Python would flush stdout again at
        # exit and fail on the same pipe: point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return _serve(args)
    if args.command == "config":
        return _config(args)
    if args.command == "user":
        from pagemq.security import user_cli

        return user_cli.run(args)
    if args.command == "queue":
        from pagemq.integrations import queue_cli

        return queue_cli.run(args)
    return _data(args)


if __name__ == "__main__":
    sys.exit(main())

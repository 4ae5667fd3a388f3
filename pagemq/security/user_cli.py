"""`pagemq user add|remove|list|passwd`: edit the users file.

Passwords come from a prompt (asked twice) or, with `--password-stdin`, from the first line
of standard input; never from the command line, where `ps` and shell history would show
them. The file is rewritten atomically; the broker picks the change up within a second.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from pagemq.security.hashing import hash_password
from pagemq.security.users import User, UsersFileError, check_name, check_role, load_users, write_users

__all__ = ["add_parser", "run"]

DEFAULT_USERS_FILE = Path("users.toml")
EXIT_FAILED = 1
EXIT_USAGE = 2


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    user = commands.add_parser("user", help="manage the users file (add, remove, list, passwd)")
    actions = user.add_subparsers(dest="user_command", required=True)

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--users-file", type=Path, default=DEFAULT_USERS_FILE,
                            help="the users file (default ./users.toml)")

    add = actions.add_parser("add", help="add a user with roles and a password")
    add.add_argument("name")
    add.add_argument("--role", action="append", required=True, help="a role (repeat for more)")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    common(add)
    remove = actions.add_parser("remove", help="remove a user")
    remove.add_argument("name")
    common(remove)
    listing = actions.add_parser("list", help="list users and their roles")
    common(listing)
    passwd = actions.add_parser("passwd", help="set a user's password")
    passwd.add_argument("name")
    passwd.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    common(passwd)


def run(args: argparse.Namespace) -> int:
    path: Path = args.users_file
    try:
        users = dict(load_users(path).by_name) if path.exists() or args.user_command != "add" else {}
    except UsersFileError as exc:
        return _fail(str(exc))
    command = args.user_command
    if command == "list":
        for user in sorted(users.values(), key=lambda u: u.name):
            print(f"{user.name}\t{','.join(sorted(user.roles))}")
        return 0
    try:
        name = check_name(args.name)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if command == "remove":
        if users.pop(name, None) is None:
            return _fail(f"no user {name!r} in {path}")
        write_users(path, users.values())
        print(f"removed user {name} from {path}")
        return 0
    if command == "add" and name in users:
        return _fail(f"user {name!r} already exists in {path} (use `pagemq user passwd`)")
    if command == "passwd" and name not in users:
        return _fail(f"no user {name!r} in {path}")
    try:
        roles = frozenset(check_role(role) for role in args.role) if command == "add" else users[name].roles
        password = _read_password(args.password_stdin)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    users[name] = User(name, hash_password(password), roles)
    write_users(path, users.values())
    print(f"{'added' if command == 'add' else 'changed the password of'} user {name} in {path}")
    return 0


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            raise ValueError("the passwords do not match")
    if not password:
        raise ValueError("the password is empty")
    return password


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"pagemq user: {message}", file=sys.stderr)
    return code

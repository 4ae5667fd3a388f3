"""`pagemq user add|remove|list|passwd`: edit the users file.

Passwords come from a prompt (asked twice) or, with `--password-stdin`, from the first line
of standard input; never from the command line, where `ps` and shell history would show
them. The file is rewritten atomically; the broker picks the change up within a second.

A change holds an exclusive lock (`flock` on `.NAME.lock` beside the file) from reading the
file to writing it back, so two commands at once (a script adding users in parallel, two
operators) both land: without it each would write the file as it had read it, and all but
one change would be lost. The password is asked and hashed before the lock is taken, so a
prompt never holds it; what was checked before (the user exists or not) is checked again
under it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import getpass
import os
import sys
from collections.abc import Iterator
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
    command = args.user_command
    try:
        users = _load(path, command)
    except UsersFileError as exc:
        return _fail(str(exc))
    if command == "list":
        for user in sorted(users.values(), key=lambda u: u.name):
            print(f"{user.name}\t{','.join(sorted(user.roles))}")
        return 0
    try:
        name = check_name(args.name)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    refused = _refused(command, name, users, path)
    if refused:
        return _fail(refused)  # before asking for a password; checked again under the lock
    hashed = None
    if command in ("add", "passwd"):
        try:
            roles = frozenset(check_role(role) for role in args.role) if command == "add" else frozenset()
            hashed = hash_password(_read_password(args.password_stdin))
        except ValueError as exc:
            return _fail(str(exc), EXIT_USAGE)
    with _locked(path):
        try:
            users = _load(path, command)
        except UsersFileError as exc:
            return _fail(str(exc))
        refused = _refused(command, name, users, path)
        if refused:
            return _fail(refused)
        if command == "remove":
            del users[name]
        else:
            assert hashed is not None
            users[name] = User(name, hashed, roles if command == "add" else users[name].roles)
        write_users(path, users.values())
    done = {"add": "added user {} in", "passwd": "changed the password of user {} in",
            "remove": "removed user {} from"}[command]
    print(f"{done.format(name)} {path}")
    return 0


def _load(path: Path, command: str) -> dict[str, User]:
    """The users by name; a missing file is empty for `add` (it makes the file)."""
    return dict(load_users(path).by_name) if path.exists() or command != "add" else {}


def _refused(command: str, name: str, users: dict[str, User], path: Path) -> str | None:
    if command == "add" and name in users:
        return f"user {name!r} already exists in {path} (use `pagemq user passwd`)"
    if command in ("remove", "passwd") and name not in users:
        return f"no user {name!r} in {path}"
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock for changing the users file (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


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

"""The users file: TOML, one `[users.NAME]` table per user with its password hash and roles.

```toml
[users.alice]
password = "scrypt$n=16384,r=8,p=1$...$..."
roles = ["amq", "admin"]
```

Read strictly (an unknown key, a plain-text password or a role that is not a string is an
error naming the key), because a users file that silently loses a user or a role is an
outage or a hole. Written atomically (temporary file, fsync, rename) with mode 0600, so the
broker polling it never reads half a file and other local users cannot read the hashes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pagemq.security.hashing import HashError, parse_hash
from pagemq.units import ConfigError, key_path, read_utf8, show_value

__all__ = ["User", "Users", "UsersFileError", "load_users", "parse_users", "write_users"]

_USER_KEYS = ("password", "roles")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]+$")


class UsersFileError(ConfigError):
    """The users file cannot be used; `str()` is one line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str
    roles: frozenset[str]


@dataclass(frozen=True)
class Users:
    """One consistent snapshot of the users file (the broker swaps whole snapshots)."""

    by_name: Mapping[str, User]

    def get(self, name: str) -> User | None:
        return self.by_name.get(name)

    def __len__(self) -> int:
        return len(self.by_name)


EMPTY = Users({})


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"user name {name!r}: use letters, digits, '_', '.', '@' or '-'")
    return name


def check_role(role: str) -> str:
    if not _NAME.match(role):
        raise ValueError(f"role {role!r}: use letters, digits, '_', '.', '@' or '-'")
    return role


def load_users(path: Path) -> Users:
    """Read and check the users file; UsersFileError (one line, naming it) otherwise."""
    return parse_users(read_utf8(path, "users file", UsersFileError), str(path))


def parse_users(text: str, where: str) -> Users:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsersFileError(where, f"invalid TOML: {exc}") from None
    for key in document:
        if key != "users":
            raise UsersFileError(f"{where}: {key}", 'unknown section (expected only "users")')
    table = document.get("users", {})
    if not isinstance(table, Mapping):
        raise UsersFileError(f"{where}: users", f"expected a table, got {show_value(table)}")
    users: dict[str, User] = {}
    for name, raw in table.items():
        path = key_path("users", name)
        try:
            check_name(name)
        except ValueError as exc:
            raise UsersFileError(f"{where}: {path}", str(exc)) from None
        users[name] = _user(name, raw, f"{where}: {path}")
    return Users(users)


def _user(name: str, raw: object, where: str) -> User:
    if not isinstance(raw, Mapping):
        raise UsersFileError(where, f"expected a table, got {show_value(raw)}")
    for key in raw:
        if key not in _USER_KEYS:
            raise UsersFileError(f"{where}.{key}", "unknown key (expected password, roles)")
    password = raw.get("password")
    if not isinstance(password, str):
        raise UsersFileError(f"{where}.password", "missing or not a string")
    try:
        parse_hash(password)
    except HashError as exc:
        raise UsersFileError(f"{where}.password", f"{exc}: set it with `pagemq user passwd`") from None
    roles = raw.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
        raise UsersFileError(f"{where}.roles", f"expected a list of strings, got {show_value(roles)}")
    return User(name, password, frozenset(roles))


def render_users(users: Iterable[User]) -> str:
    lines = ["# pagemq users: edit with `pagemq user add|remove|passwd`; passwords are scrypt hashes"]
    for user in sorted(users, key=lambda u: u.name):
        lines += [
            "",
            f"[users.{json.dumps(user.name)}]",
            f"password = {json.dumps(user.password_hash)}",
            f"roles = [{', '.join(json.dumps(role) for role in sorted(user.roles))}]",
        ]
    return "\n".join(lines) + "\n"


def write_users(path: Path, users: Iterable[User]) -> None:
    """Replace the file atomically: a reader sees the old file or the new one, never half."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(render_users(users))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)

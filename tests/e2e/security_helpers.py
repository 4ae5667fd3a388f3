"""Helpers for the security tests: a users file, a secured broker config, a test CA.

The users file is written with the broker's own hashing (`pagemq.security`), as
`pagemq user add` would (tests/e2e/test_security_cli.py runs the command itself). The CA,
server and client certificates are made by the `openssl` command line for each test run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pagemq.security.hashing import hash_password
from pagemq.security.users import User, write_users

OPENSSL = "/usr/bin/openssl"

# Users of the worked example in docs/security.md: password = name + "-pw".
USERS = {
    "alice": ("admin",),
    "producer": ("producers",),
    "consumer": ("consumers",),
    "builder": ("producers", "builders"),
    "orders-reader": ("order-readers",),
}


def password(name: str) -> str:
    return f"{name}-pw"


def write_users_file(path: Path, users: Mapping[str, tuple[str, ...]] = USERS) -> Path:
    write_users(path, [User(name, hash_password(password(name)), frozenset(roles))
                       for name, roles in users.items()])
    return path


def secure_config(users_file: Path, settings: Mapping[str, Any] | None = None,
                  extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`extra`: more config, section by section (a table's keys are merged into it)."""
    config: dict[str, Any] = {
        "broker": {"security-enabled": True, "users-file": str(users_file)},
        "security-settings": dict(settings if settings is not None else DEFAULT_SETTINGS),
    }
    for section, values in (extra or {}).items():
        if isinstance(values, Mapping):
            config.setdefault(section, {}).update(values)
        else:
            config[section] = values
    return config


DEFAULT_SETTINGS: dict[str, Any] = {
    "#": {
        "send": ["producers", "admin"],
        "consume": ["consumers", "admin"],
        "browse": ["consumers", "admin"],
        "create-address": ["builders", "admin"],
        "create-durable-queue": ["builders", "admin"],
        "delete-durable-queue": ["admin"],
        "create-non-durable-queue": ["consumers", "admin"],
        "manage": ["admin"],
        "view": ["admin", "viewers"],
    },
}


def login(name: str) -> dict[str, str]:
    """CONNECT headers for one of USERS."""
    return {"login": name, "passcode": password(name)}


# -- a test CA -----------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path) -> dict[str, Path]:
    """ca.pem, server.pem/.key (CN and SAN 127.0.0.1/localhost), client.pem/.key, and a
    second server certificate (server2.pem/.key) for the reload test."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=pagemq test CA", cwd=directory)
    ext = directory / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, cn in (("server", "pagemq-server"), ("server2", "pagemq-server-renewed"),
                     ("client", "pagemq-client")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=directory)
        extra = ["-extfile", "server.ext"] if name.startswith("server") else []
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *extra, cwd=directory)
    return {name: directory / name for name in (
        "ca.pem", "server.pem", "server.key", "server2.pem", "server2.key", "client.pem", "client.key")}


def start_secured(workdir: Path, settings: Mapping[str, Any] | None = None,
                  users: Mapping[str, tuple[str, ...]] = USERS,
                  extra: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """A running broker with security enabled; its users file is `workdir/users.toml`.
    `kwargs` go to BrokerProcess (extra_args, ports)."""
    from brokerproc import BrokerProcess

    workdir.mkdir(parents=True, exist_ok=True)
    users_file = write_users_file(workdir / "users.toml", users)
    return BrokerProcess(workdir, secure_config(users_file, settings, extra), **kwargs).start()


def admin_get(proc: Any, path: str, user: str = "alice") -> tuple[int, Any]:
    """GET `path` on the HTTP API with Basic credentials of one of USERS -> (status, JSON)."""
    import base64
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}{path}")
    token = base64.b64encode(f"{user}:{password(user)}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())

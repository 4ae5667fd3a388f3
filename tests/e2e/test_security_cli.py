"""`pagemq user add|remove|list|passwd`: the users file as an operator makes it, and a broker
that accepts the users it holds."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from brokerproc import PAGEMQ, BrokerProcess, StompClient
from security_helpers import secure_config


def _user(users_file: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PAGEMQ, "user", *args, "--users-file", str(users_file)], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_user_commands_keep_only_salted_hashes_in_a_private_file(tmp_path: Path) -> None:
    users_file = tmp_path / "conf" / "users.toml"
    added = _user(users_file, "add", "alice", "--role", "amq", "--role", "admin", "--password-stdin",
                  stdin="correct horse\n")
    assert added.returncode == 0, added.stderr
    assert _user(users_file, "add", "bob", "--role", "amq", "--password-stdin", stdin="correct horse\n"
                 ).returncode == 0
    text = users_file.read_text()
    assert "correct horse" not in text
    hashes = [line for line in text.splitlines() if line.startswith("password = ")]
    assert len(hashes) == 2 and all('"scrypt$n=' in line for line in hashes)
    assert hashes[0] != hashes[1], "same password, different salts"
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600
    listed = _user(users_file, "list")
    assert listed.stdout.splitlines() == ["alice\tadmin,amq", "bob\tamq"]

    again = _user(users_file, "add", "alice", "--role", "amq", "--password-stdin", stdin="x\n")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert _user(users_file, "add", "carol", "--role", "amq", "--password", "x").returncode == 2
    assert _user(users_file, "add", "carol", "--role", "amq", "--password-stdin", stdin="\n").returncode == 2
    assert _user(users_file, "passwd", "nobody", "--password-stdin", stdin="x\n").returncode == 1

    before = users_file.read_text()
    assert _user(users_file, "passwd", "bob", "--password-stdin", stdin="new one\n").returncode == 0
    assert users_file.read_text() != before
    assert _user(users_file, "remove", "alice").returncode == 0
    assert _user(users_file, "list").stdout.splitlines() == ["bob\tamq"]
    assert _user(users_file, "remove", "alice").returncode == 1


def test_a_user_made_with_the_command_can_connect(tmp_path: Path) -> None:
    users_file = tmp_path / "users.toml"
    assert _user(users_file, "add", "app", "--role", "apps", "--password-stdin", stdin="s3cret\n"
                 ).returncode == 0
    config = secure_config(Path("users.toml"), {"#": {"send": ["apps"]}})  # relative to the config
    proc = BrokerProcess(tmp_path, config).start()
    try:
        StompClient(proc.stomp_port, connect_headers={"login": "app", "passcode": "s3cret"}
                    ).connect().disconnect()
    finally:
        proc.stop()


def test_broken_users_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    users_file = tmp_path / "users.toml"
    users_file.write_text("[users.alice]\npassword = 'hunter2'\n")
    result = _user(users_file, "add", "bob", "--role", "amq", "--password-stdin", stdin="pw\n")
    assert result.returncode == 1
    assert "users.alice.password" in result.stderr and "pagemq user passwd" in result.stderr
    assert users_file.read_text() == "[users.alice]\npassword = 'hunter2'\n"


def test_security_config_mistakes_are_one_line_errors_at_start(tmp_path: Path) -> None:
    from brokerproc import HOST, free_port, to_toml

    def serve(config: dict[str, object]) -> subprocess.CompletedProcess[str]:
        (tmp_path / "pagemq.toml").write_text(to_toml(config))
        return subprocess.run(
            [PAGEMQ, "serve", "--config", str(tmp_path / "pagemq.toml"), "--data-dir", str(tmp_path / "d"),
             "--stomp", f"{HOST}:{free_port()}", "--http", f"{HOST}:{free_port()}"],
            capture_output=True, text=True, timeout=30)

    cases = [
        ({"broker": {"security-enabled": True}}, "broker.users-file: missing"),
        ({"broker": {"security-enabled": True, "users-file": "nope.toml"}}, "broker.users-file: "),
        ({"broker": {"security-enabled": True, "users-file": "."}}, "broker.users-file: "),
        ({"security-settings": {"#": {"sned": ["amq"]}}}, 'security-settings."#".sned: unknown permission'),
        ({"security-settings": {"#": {"send": "amq"}}}, "expected a list of role names"),
        ({"acceptors": {"stomp-tls": f"{HOST}:{free_port()}"}}, "acceptors.stomp-tls: a TLS listener needs"),
        ({"tls": {"cert-file": "missing.pem", "key-file": "missing.key"}}, "tls.cert-file: cannot load"),
        ({"acceptors": {"max-connections": 0}}, "acceptors.max-connections"),
    ]
    for config, expected in cases:
        result = serve(config)
        assert result.returncode == 2, (config, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert expected in result.stderr, (expected, result.stderr)


def test_queue_command_takes_the_password_from_stdin_or_the_environment_not_argv(tmp_path: Path) -> None:
    from security_helpers import password, start_secured

    proc = start_secured(tmp_path / "broker")
    try:
        url = f"http://127.0.0.1:{proc.http_port}"

        def queue_list(*args: str, stdin: str | None = None,
                       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run([PAGEMQ, "queue", "list", "--url", url, "--user", "alice", *args],
                                  input=stdin, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, **(env or {})})

        by_stdin = queue_list("--password-stdin", stdin=f"{password('alice')}\n")
        assert by_stdin.returncode == 0 and "queue(s)" in by_stdin.stdout, by_stdin.stderr
        by_env = queue_list(stdin="", env={"PAGEMQ_PASSWORD": password("alice")})
        assert by_env.returncode == 0 and not by_env.stderr, by_env.stderr
        wrong = queue_list("--password-stdin", stdin="not-it\n")
        assert wrong.returncode == 1 and "401 Authentication failed" in wrong.stderr
        on_argv = queue_list("--password", password("alice"), stdin="")
        assert on_argv.returncode == 0 and "use --password-stdin or PAGEMQ_PASSWORD" in on_argv.stderr
        both = queue_list("--password", "x", "--password-stdin", stdin="y\n")
        assert both.returncode == 2 and "not both" in both.stderr
    finally:
        proc.stop()


def test_user_commands_run_at_once_all_land_in_the_file(tmp_path: Path) -> None:
    users_file = tmp_path / "users.toml"
    adds = [subprocess.Popen([PAGEMQ, "user", "add", f"app{n}", "--role", "apps", "--password-stdin",
                              "--users-file", str(users_file)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for n in range(8)]
    for process in adds:
        process.communicate(f"pw{process.pid}\n", timeout=60)
        assert process.returncode == 0
    listed = _user(users_file, "list").stdout.splitlines()
    assert sorted(listed) == sorted(f"app{n}\tapps" for n in range(8)), "a change was lost"

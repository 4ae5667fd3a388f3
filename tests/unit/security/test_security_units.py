"""The security parts without a broker: hashes, the users file, permissions and their
precedence, the authentication cache and failure delays, the listener policy."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from pathlib import Path

import pytest

from pagemq.security import access as access_module
from pagemq.security.access import Access, PermissionDenied
from pagemq.security.config import check_listeners, parse_security
from pagemq.security.hashing import HashError, hash_password, parse_hash, verify_password
from pagemq.security.listener import ListenerPolicy
from pagemq.security.permissions import SecuritySettings
from pagemq.security.users import User, Users, UsersFileError, load_users, parse_users, write_users
from pagemq.units import ConfigError


def test_hash_is_salted_slow_scrypt_and_verifies_only_the_password() -> None:
    first, second = hash_password("pw"), hash_password("pw")
    assert first.startswith("scrypt$n=16384,r=8,p=1$") and first != second
    assert verify_password("pw", first) and verify_password("pw", second)
    assert not verify_password("pW", first) and not verify_password("", first)
    n, r, p, salt, key = parse_hash(first)
    assert (n, r, p, len(salt), len(key)) == (16384, 8, 1, 16, 32)
    for bad in ("pw", "md5$x$y$z", "scrypt$n=3,r=8,p=1$AAAA$AAAA", "scrypt$n=16384$AAAA$AAAA"):
        with pytest.raises(HashError):
            parse_hash(bad)


def test_users_file_round_trips_and_rejects_what_it_cannot_trust(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    write_users(path, [User("alice", hash_password("a"), frozenset({"admin", "amq"})),
                       User("bob@corp", hash_password("b"), frozenset())])
    users = load_users(path)
    assert sorted(users.by_name) == ["alice", "bob@corp"]
    assert users.by_name["alice"].roles == {"admin", "amq"}
    bad = [
        ('[users.alice]\npassword = "secret"\nroles = []\n', "users.alice.password"),
        ("[users.alice]\nroles = []\n", "users.alice.password: missing"),
        (f'[users.alice]\npassword = "{hash_password("x")}"\nroles = "admin"\n', "users.alice.roles"),
        (f'[users.alice]\npassword = "{hash_password("x")}"\nrole = ["a"]\n', "users.alice.role: unknown"),
        ('[people.alice]\npassword = "x"\n', "people: unknown section"),
        ("[users.alice\n", "invalid TOML"),
    ]
    for text, expected in bad:
        with pytest.raises(UsersFileError, match=re.escape(expected)):
            parse_users(text, "f.toml")


def test_most_specific_security_match_replaces_the_others() -> None:
    settings = SecuritySettings()
    settings.add("#", {"send": ["amq"], "consume": ["amq"]})
    settings.add("orders.#", {"send": ["producers"]})
    settings.add("orders.*", {"consume": ["readers"]})
    settings.add("orders.secret", {"browse": ["auditors"]})
    assert settings.roles("send", "jobs") == {"amq"}
    assert settings.roles("send", "orders.eu.west") == {"producers"}
    assert settings.roles("consume", "orders.eu.west") == set()  # not inherited from "#"
    assert settings.roles("consume", "orders.eu") == {"readers"}  # '*' beats '#'
    assert settings.roles("send", "orders.eu") == set()
    assert settings.roles("browse", "orders.secret") == {"auditors"}
    assert settings.roles("send", "orders.secret") == set()
    assert SecuritySettings().roles("send", "anything") == set()  # no match: nobody


def test_security_settings_errors_name_the_key() -> None:
    settings = SecuritySettings()
    with pytest.raises(ConfigError, match=r'security-settings\."#"\.sendd: unknown permission'):
        settings.add("#", {"sendd": ["a"]})
    with pytest.raises(ConfigError, match=r"security-settings\.\"orders#\""):
        settings.add("orders#", {"send": ["a"]})


def test_safe_by_default_refuses_only_non_loopback_listeners_without_security() -> None:
    off = parse_security({}, {}, Path("."))
    check_listeners(off, [("acceptors.stomp", "127.0.0.1"), ("acceptors.http", "::1"),
                          ("x", "localhost"), ("y", None)])
    for host in ("0.0.0.0", "10.1.2.3", "::", "broker.example.com"):
        with pytest.raises(ConfigError, match=r"acceptors\.stomp: .* not a loopback address"):
            check_listeners(off, [("acceptors.stomp", host)])
    allowed = parse_security({"allow-anonymous-remote": True}, {}, Path("."))
    check_listeners(allowed, [("acceptors.stomp", "0.0.0.0")])


def _access(users: dict[str, tuple[str, ...]]) -> Access:
    settings = SecuritySettings()
    settings.add("#", {"send": ["amq"]})
    return Access(settings, Users({name: User(name, hash_password(f"{name}-pw"), frozenset(roles))
                                   for name, roles in users.items()}))


def test_verified_passwords_are_cached_and_a_changed_hash_drops_the_entry() -> None:
    async def run() -> None:
        access = _access({"alice": ("amq",)})
        try:
            first = access.authenticate("alice", "alice-pw", "127.0.0.1:1")
            assert not first.done()  # scrypt runs in a thread
            assert (await first) is not None
            cached = access.authenticate("alice", "alice-pw", "127.0.0.1:2")
            assert cached.done() and cached.result() is not None
            assert not access.authenticate("alice", "other", "127.0.0.1:3").done()
            access.replace_users(Users({"alice": User("alice", hash_password("new"), frozenset())}))
            assert (await access.authenticate("alice", "alice-pw", "127.0.0.1:4")) is None
        finally:
            access.close()

    asyncio.run(run())


def test_failures_from_one_address_wait_longer_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_module, "FAILURE_DELAY_BASE", 0.02)
    monkeypatch.setattr(access_module, "FAILURES_FREE", 1)

    async def run() -> list[float]:
        access = _access({"alice": ("amq",)})
        times = []
        try:
            for login in ("alice", "nobody", "alice", "nobody", "alice"):
                started = time.monotonic()
                assert (await access.authenticate(login, "wrong", "10.0.0.1:5")) is None
                times.append(time.monotonic() - started)
            await access.authenticate("alice", "wrong", "10.0.0.2:5")
            # per address (any port); another address starts afresh
            assert access._note_failure("10.0.0.1:6") == (0.32, 6)
            assert access._note_failure("10.0.0.2:6") == (0.02, 2)
        finally:
            access.close()
        return times

    times = asyncio.run(run())
    assert times[4] >= 0.16 and times[3] >= 0.08, times  # 0, 20, 40, 80, 160 ms after the hash


def test_guesses_sent_at_once_from_one_address_are_checked_one_after_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_module, "FAILURE_DELAY_BASE", 0.05)
    monkeypatch.setattr(access_module, "FAILURES_FREE", 1)
    monkeypatch.setattr(access_module, "GATE_WAITERS", 4)
    checked: list[float] = []
    real_verify = access_module.verify_password

    def counting_verify(password: str, stored: str) -> bool:
        checked.append(time.monotonic())
        return real_verify(password, stored)

    monkeypatch.setattr(access_module, "verify_password", counting_verify)

    async def run() -> tuple[list[User | None], float]:
        access = _access({"alice": ("amq",)})
        try:
            started = time.monotonic()
            # six guesses at once (six connections): four wait their turn, two are refused
            answers = await asyncio.gather(*(access.authenticate("alice", f"guess{n}", f"10.0.0.1:{n}")
                                             for n in range(6)))
            answers.append(await access.authenticate("alice", "alice-pw", "10.0.0.1:99"))
            return answers, started
        finally:
            access.close()

    answers, started = asyncio.run(run())
    assert answers[:6] == [None] * 6 and answers[6] is not None
    assert len(checked) == 5  # four guesses and the right password: two were never checked
    # each check began after the previous failure's delay: 0, 50, 100, 200 ms (at least)
    gaps = [later - earlier for earlier, later in itertools.pairwise(checked)]
    assert gaps[1] >= 0.05 and gaps[2] >= 0.1 and gaps[3] >= 0.2, gaps
    assert checked[-1] - started >= 0.35


def test_the_first_failures_from_an_address_are_answered_without_delay() -> None:
    access = _access({"alice": ("amq",)})
    try:
        delays = [access._note_failure("10.0.0.1:5")[0] for _ in range(access_module.FAILURES_FREE + 3)]
        assert delays == [0.0] * access_module.FAILURES_FREE + [0.05, 0.1, 0.2]
    finally:
        access.close()


def test_permission_denied_names_user_permission_and_address() -> None:
    access = _access({"alice": ("amq",), "bob": ("other",)})
    try:
        access.require("alice", "send", "orders")
        with pytest.raises(PermissionDenied, match=r"^User bob lacks permission send on address orders$"):
            access.require("bob", "send", "orders")
        with pytest.raises(PermissionDenied, match="User ghost lacks"):
            access.require("ghost", "send", "orders")  # removed from the file: no roles
    finally:
        access.close()


def test_listener_policy_refuses_past_the_limit_and_logs_once_per_burst(
    caplog: pytest.LogCaptureFixture
) -> None:
    policy = ListenerPolicy("stomp", max_connections=2)
    assert policy.admit(0) and policy.admit(1)
    assert not policy.admit(2) and not policy.admit(2) and not policy.admit(5)
    assert policy.admit(1)
    assert not policy.admit(2)
    messages = [record.getMessage() for record in caplog.records]
    assert sum("max-connections 2 reached" in m for m in messages) == 2
    assert any("after refusing 3" in m for m in messages)
    assert ListenerPolicy("stomp").admit(1_000_000)


def test_a_users_file_others_may_read_is_loaded_with_a_warning(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "users.toml"
    write_users(path, [User("alice", hash_password("pw"), frozenset({"amq"}))])
    with caplog.at_level("WARNING", logger="pagemq.security"):
        assert load_users(path).get("alice") is not None
        assert not caplog.records  # written 0600
        path.chmod(0o644)
        assert load_users(path).get("alice") is not None
    assert [r.getMessage() for r in caplog.records] == [
        f"users file {path} can be read or written by other users (mode 0644): chmod 600 it, "
        "as `pagemq user` writes it"]


def test_security_enabled_without_any_settings_warns_that_everything_is_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    users_file = tmp_path / "users.toml"
    write_users(users_file, [User("alice", hash_password("pw"), frozenset({"amq"}))])
    with caplog.at_level("WARNING", logger="pagemq.security"):
        parse_security({"security-enabled": True, "users-file": str(users_file)},
                       {"#": {"send": ["amq"]}}, tmp_path)
        parse_security({}, {}, tmp_path)  # security off: nothing to say
        assert not caplog.records
        parse_security({"security-enabled": True, "users-file": str(users_file)}, {}, tmp_path)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "security-enabled = true and no [security-settings] match"]

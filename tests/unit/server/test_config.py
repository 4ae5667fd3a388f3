"""Loading the TOML config: defaults, every key, strict validation, flag overrides."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from pagemq.core.settings import AddressSettings
from pagemq.server.config import (
    AddressConfig,
    ConfigError,
    Endpoint,
    QueueConfig,
    load_config,
)

KiB, MiB, GiB = 1024, 1024**2, 1024**3
ROOT = Path(__file__).resolve().parents[3]

FULL_CONFIG = """
[broker]
data-directory = "/srv/mq"
paging-directory = "/fast/paging"
journal-directory = "/fast/journal"
global-max-size = "256MiB"
global-max-messages = 100000
max-disk-usage = 80
min-disk-free = "2GiB"
disk-scan-period = "10s"
page-sync-timeout = 3333333
journal-file-size = "64MiB"
journal-sync = false
archive-data-logs = true
cleanup-period = "1m"
disk-full-policy = "FAIL"
allow-anonymous-remote = true   # 0.0.0.0 below: no security, on purpose (a test)

[acceptors]
stomp = "0.0.0.0:61614"
http = "[::1]:8162"

[stomp]
max-frame-size = "1MiB"
max-headers = 50
max-header-length = "8KiB"

[address-settings."#"]
max-size-bytes = "64MiB"
max-size-messages = 5000
page-size-bytes = "1MiB"
address-full-policy = "BLOCK"
max-read-page-bytes = "3MiB"
max-read-page-messages = 300
prefetch-page-bytes = "1MiB"
prefetch-page-messages = 100
page-limit-bytes = "1GiB"
page-limit-messages = 1000000
page-full-policy = "DROP"
max-delivery-attempts = 3
dead-letter-address = "DEAD"
expiry-address = "EXPIRED"
auto-create-addresses = false

[[addresses]]
name = "orders"
routing-type = "anycast"

[[addresses]]
name = "events"
routing-type = "multicast"
[[addresses.queues]]
name = "eu-events"
filter = "region = 'eu'"
[[addresses.queues]]
name = "audit"
durable = false
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pagemq.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_for(tmp_path: Path, text: str, **flags: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), **flags)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_no_file_gives_the_embedded_defaults() -> None:
    config = load_config()
    broker = config.broker
    assert broker.data_directory == Path("data")
    assert broker.paging_directory == Path("data/paging")
    assert broker.journal_directory == Path("data/journal")
    assert broker.global_max_size == 512 * MiB
    assert broker.global_max_messages == -1
    assert broker.max_disk_usage == 90
    assert broker.min_disk_free == -1
    assert broker.disk_scan_period == 5.0
    assert broker.page_sync_timeout == pytest.approx(0.003)
    assert broker.journal_file_size == 32 * MiB
    assert broker.journal_sync is True
    assert broker.archive_data_logs is False
    assert broker.cleanup_period == 30.0
    assert broker.disk_full_policy == "BLOCK"
    assert config.acceptors.stomp == Endpoint("127.0.0.1", 61613)
    assert config.acceptors.http == Endpoint("127.0.0.1", 8161)
    assert (config.stomp.max_frame_size, config.stomp.max_headers) == (16 * MiB, 1000)
    assert config.stomp.max_header_length == 64 * KiB
    assert config.address_settings.match("anything") == AddressSettings()
    assert config.addresses == ()


def test_every_key_of_a_full_file_is_parsed(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL_CONFIG))
    broker = config.broker
    assert broker.data_directory == Path("/srv/mq")
    assert broker.paging_directory == Path("/fast/paging")
    assert broker.journal_directory == Path("/fast/journal")
    assert (broker.global_max_size, broker.global_max_messages) == (256 * MiB, 100000)
    assert (broker.max_disk_usage, broker.min_disk_free) == (80, 2 * GiB)
    assert broker.disk_scan_period == 10.0
    assert broker.page_sync_timeout == pytest.approx(0.003333333)
    assert broker.journal_file_size == 64 * MiB
    assert (broker.journal_sync, broker.archive_data_logs) == (False, True)
    assert (broker.cleanup_period, broker.disk_full_policy) == (60.0, "FAIL")
    assert config.acceptors.stomp == Endpoint("0.0.0.0", 61614)
    assert config.acceptors.http == Endpoint("::1", 8162)
    assert (config.stomp.max_frame_size, config.stomp.max_headers) == (MiB, 50)
    assert config.stomp.max_header_length == 8 * KiB
    assert config.address_settings.match("x") == AddressSettings(
        max_size_bytes=64 * MiB,
        max_size_messages=5000,
        page_size_bytes=MiB,
        address_full_policy="BLOCK",
        max_read_page_bytes=3 * MiB,
        max_read_page_messages=300,
        prefetch_page_bytes=MiB,
        prefetch_page_messages=100,
        page_limit_bytes=GiB,
        page_limit_messages=1000000,
        page_full_policy="DROP",
        max_delivery_attempts=3,
        dead_letter_address="DEAD",
        expiry_address="EXPIRED",
        auto_create_addresses=False,
    )
    assert config.addresses == (
        AddressConfig("orders", "anycast", (QueueConfig("orders"),)),
        AddressConfig(
            "events",
            "multicast",
            (QueueConfig("eu-events", "region = 'eu'"), QueueConfig("audit", durable=False)),
        ),
    )


def test_paging_and_journal_directories_follow_the_data_directory(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[broker]\ndata-directory = "/var/mq"\n'))
    assert config.broker.paging_directory == Path("/var/mq/paging")
    assert config.broker.journal_directory == Path("/var/mq/journal")


def test_flags_override_the_file(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, FULL_CONFIG), data_dir="/tmp/other", stomp="127.0.0.1:0", http="off"
    )
    assert config.broker.data_directory == Path("/tmp/other")
    assert config.broker.paging_directory == Path("/fast/paging"), "explicit keys stay"
    assert config.acceptors.stomp == Endpoint("127.0.0.1", 0)
    assert config.acceptors.http is None


def test_data_dir_flag_moves_directories_that_were_not_set_explicitly(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, '[broker]\ndata-directory = "a"\njournal-directory = "j"\n'), data_dir="b"
    )
    assert config.broker.data_directory == Path("b")
    assert config.broker.paging_directory == Path("b/paging")
    assert config.broker.journal_directory == Path("j")
    assert load_config(data_dir="x").broker.paging_directory == Path("x/paging")


def test_an_acceptor_can_be_switched_off_in_the_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[acceptors]\nhttp = false\n"))
    assert config.acceptors.http is None
    assert config.acceptors.stomp == Endpoint("127.0.0.1", 61613)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("stomp", "61613"), ("stomp", "host:port"), ("http", "::1:80"), ("http", "h:70000")],
)
def test_a_bad_endpoint_flag_names_the_flag(flag: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^--{flag}: "):
        load_config(**{flag: value})


def test_an_empty_data_dir_flag_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"^--data-dir: must not be empty$"):
        load_config(data_dir="")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[brokr]\n", "brokr: unknown section (did you mean broker?)"),
        ("[broker]\nglobal-max-sise = 1\n", "broker.global-max-sise: unknown key"),
        ("[acceptors]\namqp = '1:2'\n", "acceptors.amqp: unknown key"),
        ("[stomp]\nmax-frames = 1\n", "stomp.max-frames: unknown key"),
        (
            '[address-settings."orders.#"]\nmax-sise-bytes = 1\n',
            'address-settings."orders.#".max-sise-bytes: unknown key',
        ),
        ("[[addresses]]\nname = 'a'\ntype = 'anycast'\n", "addresses[0].type: unknown key"),
        (
            "[[addresses]]\nname='a'\n[[addresses]]\nname='b'\n[[addresses.queues]]\nname='q'\n"
            "selector='x'\n",
            "addresses[1].queues[0].selector: unknown key",
        ),
    ],
)
def test_unknown_sections_and_keys_are_named_with_their_full_path(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert error_for(tmp_path, text).startswith(expected)


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ('[broker]\nglobal-max-size = "12 parsecs"\n', "broker.global-max-size", "not a size"),
        ("[broker]\nglobal-max-messages = -3\n", "broker.global-max-messages", "out of range"),
        ("[broker]\nmax-disk-usage = 101\n", "broker.max-disk-usage", "percentage"),
        ("[broker]\nmin-disk-free = true\n", "broker.min-disk-free", "not a size"),
        ("[broker]\ndisk-scan-period = '0s'\n", "broker.disk-scan-period", "at least 1ms"),
        ("[broker]\ndisk-scan-period = 0\n", "broker.disk-scan-period", "at least 1ms"),
        ("[broker]\ncleanup-period = '500us'\n", "broker.cleanup-period", "at least 1ms"),
        ("[broker]\ncleanup-period = -1\n", "broker.cleanup-period", "zero or more"),
        ("[broker]\npage-sync-timeout = -1\n", "broker.page-sync-timeout", "zero or more"),
        ('[broker]\npage-sync-timeout = "soon"\n', "broker.page-sync-timeout", "not a duration"),
        ("[broker]\njournal-file-size = 100\n", "broker.journal-file-size", "must be >= 1024"),
        ("[broker]\njournal-file-size = -1\n", "broker.journal-file-size", "out of range"),
        ('[broker]\njournal-sync = "yes"\n', "broker.journal-sync", "expected true or false"),
        ("[broker]\narchive-data-logs = 1\n", "broker.archive-data-logs", "true or false"),
        ("[broker]\ncleanup-period = 2.5\n", "broker.cleanup-period", "not a duration"),
        ('[broker]\ndisk-full-policy = "PAGE"\n', "broker.disk-full-policy", "BLOCK | FAIL"),
        ("[broker]\ndata-directory = 5\n", "broker.data-directory", "expected a string"),
        ('[broker]\npaging-directory = ""\n', "broker.paging-directory", "must not be empty"),
        ('[acceptors]\nstomp = "localhost"\n', "acceptors.stomp", "HOST:PORT"),
        ('[acceptors]\nhttp = "x:99999"\n', "acceptors.http", "out of range"),
        ("[acceptors]\nhttp = 8161\n", "acceptors.http", "HOST:PORT"),
        ("[stomp]\nmax-frame-size = -1\n", "stomp.max-frame-size", "out of range"),
        ("[stomp]\nmax-headers = 0\n", "stomp.max-headers", "out of range"),
        ('[stomp]\nmax-header-length = "big"\n', "stomp.max-header-length", "not a size"),
        ('[address-settings."#"]\npage-size-bytes = 0\n', 'address-settings."#".page-size-bytes',
         "out of range"),
        (
            '[address-settings."orders.#"]\naddress-full-policy = "SPILL"\n',
            'address-settings."orders.#".address-full-policy',
            "PAGE | DROP | FAIL | BLOCK",
        ),
        ('[address-settings]\n"#" = 5\n', 'address-settings."#"', "expected a table"),
        ('address-settings = 5\n', "address-settings", "expected a table"),
        ('[address-settings."a#"]\n', 'address-settings."a#"', "whole words"),
        ("broker = 5\n", "broker", "expected a table"),
        ("addresses = 5\n", "addresses", "expected an array of tables"),
        ("[[addresses]]\nrouting-type = 'anycast'\n", "addresses[0].name", "missing"),
        ("[[addresses]]\nname = ''\n", "addresses[0].name", "must not be empty"),
        ("[[addresses]]\nname='a'\nrouting-type='fanout'\n", "addresses[0].routing-type",
         "anycast | multicast"),
        ("[[addresses]]\nname='a'\nqueues = 3\n", "addresses[0].queues", "array of tables"),
        ("[[addresses]]\nname='a'\n[[addresses.queues]]\nfilter='x'\n",
         "addresses[0].queues[0].name", "missing"),
        ("[[addresses]]\nname='a'\n[[addresses.queues]]\nname='q'\ndurable='no'\n",
         "addresses[0].queues[0].durable", "true or false"),
        ("[[addresses]]\nname='a'\n[[addresses]]\nname='a'\n", "addresses[1].name",
         'address "a" is already defined at addresses[0]'),
        (
            "[[addresses]]\nname='a'\nrouting-type='multicast'\n[[addresses.queues]]\nname='q'\n"
            "[[addresses]]\nname='q'\n",
            "addresses[1].name",
            'queue "q" is already defined at addresses[0].queues[0]',
        ),
    ],
)
def test_bad_values_give_one_line_naming_the_key(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    message = error_for(tmp_path, text)
    assert message.startswith(f"{key}: "), message
    assert problem in message


@pytest.mark.parametrize(
    ("key", "value", "seconds"),
    [
        # Periods take Artemis' milliseconds: disk-scan-period (default 5000) and the
        # clean-up period (KahaDB's cleanupInterval, default 30000).
        ("disk-scan-period", 5000, 5.0),
        ("disk-scan-period", 1, 0.001),
        ("cleanup-period", 30000, 30.0),
        ("cleanup-period", 30, 0.03),
        ("cleanup-period", '"30s"', 30.0),
        # page-sync-timeout takes Artemis' nanoseconds (default 3333333 with ASYNCIO).
        ("page-sync-timeout", 3333333, 0.003333333),
        ("page-sync-timeout", 0, 0.0),
        ("page-sync-timeout", '"3ms"', 0.003),
    ],
)
def test_a_bare_integer_duration_is_in_artemis_unit_for_its_key(
    tmp_path: Path, key: str, value: object, seconds: float
) -> None:
    broker = load_config(write(tmp_path, f"[broker]\n{key} = {value}\n")).broker
    assert getattr(broker, key.replace("-", "_")) == pytest.approx(seconds)


def test_a_period_error_says_what_a_bare_integer_means(tmp_path: Path) -> None:
    problem = error_for(tmp_path, "[broker]\ncleanup-period = 0\n")
    assert problem.startswith("broker.cleanup-period: 0 is too short (must be at least 1ms;")
    assert "a bare integer counts milliseconds" in problem
    assert "\n" not in problem


def test_invalid_toml_reports_the_file_and_line(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[broker]\nglobal-max-size = \n")
    assert message.startswith(f"{tmp_path / 'pagemq.toml'}: invalid TOML: ")
    assert "line 2" in message


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "absent.toml")


def test_a_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_settings_from_the_file_merge_by_specificity(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
[address-settings."#"]
address-full-policy = "BLOCK"
[address-settings."orders.#"]
max-size-messages = 10
page-size-bytes = "2MiB"
[address-settings."orders.*"]
max-size-messages = 20
[address-settings."orders.eu"]
max-size-messages = 30
""",
        )
    )
    match = config.address_settings.match
    assert match("orders.eu").max_size_messages == 30
    assert match("orders.us").max_size_messages == 20
    assert match("orders.us.west").max_size_messages == 10
    assert match("invoices").max_size_messages == -1
    assert match("orders.eu").address_full_policy == "BLOCK"
    assert match("orders.eu").max_read_page_bytes == 4 * MiB


def test_routing_types_are_case_insensitive_and_multicast_gets_no_implicit_queue(
    tmp_path: Path,
) -> None:
    text = "[[addresses]]\nname='t'\nrouting-type='MULTICAST'\n[[addresses]]\nname='q'\n"
    config = load_config(write(tmp_path, text))
    assert config.addresses == (
        AddressConfig("t", "multicast", ()),
        AddressConfig("q", "anycast", (QueueConfig("q"),)),
    )


def test_an_empty_filter_means_no_filter(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "[[addresses]]\nname='a'\n[[addresses.queues]]\nname='q'\nfilter=''\n")
    )
    assert config.addresses[0].queues == (QueueConfig("q"),)


class FakeSelectorError(ValueError):
    pass


def _fake_compile(text: str) -> object:
    if "===" in text:
        raise FakeSelectorError("unexpected '=' at position 7")
    return object()


def test_queue_filters_are_compiled_when_the_selector_module_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = types.ModuleType("pagemq.selector")
    fake.compile = _fake_compile  # type: ignore[attr-defined]
    fake.SelectorError = FakeSelectorError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pagemq.selector", fake)
    bad = "[[addresses]]\nname='a'\n[[addresses.queues]]\nname='q'\nfilter=\"x === 'y'\"\n"
    message = error_for(tmp_path, bad)
    assert message.startswith("addresses[0].queues[0].filter: bad selector")
    assert "position 7" in message
    good = "[[addresses]]\nname='a'\n[[addresses.queues]]\nname='q'\nfilter=\"x = 'y'\"\n"
    assert load_config(write(tmp_path, good)).addresses[0].queues[0].filter == "x = 'y'"


def test_filters_are_not_checked_when_the_selector_module_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pagemq.selector", None)  # import raises ImportError
    text = "[[addresses]]\nname='a'\n[[addresses.queues]]\nname='q'\nfilter='x ==='\n"
    assert load_config(write(tmp_path, text)).addresses[0].queues[0].filter == "x ==="


def test_the_documented_example_file_loads() -> None:
    config = load_config(ROOT / "examples" / "pagemq.toml")
    assert config.acceptors.stomp == Endpoint("127.0.0.1", 61613)
    assert config.address_settings.match("orders").address_full_policy == "PAGE"
    assert {address.name for address in config.addresses} >= {"orders", "events"}


def test_the_interface_example_loads(tmp_path: Path) -> None:
    """The TOML block of the user-facing contract must load as written."""
    interface = ROOT.parent / "shared" / "interface.md"
    if not interface.exists():
        pytest.skip("the shared interface document is not next to this checkout")
    text = interface.read_text(encoding="utf-8")
    block = text.split("```toml", 1)[1].split("```", 1)[0]
    config = load_config(write(tmp_path, block))
    events = next(a for a in config.addresses if a.name == "events")
    assert events.queues == (QueueConfig("eu-events", "region = 'eu'"),)

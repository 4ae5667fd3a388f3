"""`pagemq config import-artemis` on real broker.xml files from Artemis (tests/data/artemis,
see its README for where each comes from): the TOML it prints starts a real broker whose
`GET /api/addresses/{name}` settings match the XML, and every element it cannot map is named
on stderr by its path.

The expected settings are read from the XML here, independently of the importer: the
address-setting matches in these files are exact names, `prefix.#` or `#`, and Artemis sizes
are powers of 1024 (`10M`, `10Mb`).
"""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from brokerproc import BrokerProcess, run_cli

DATA = Path(__file__).parent.parent / "data" / "artemis"
FILES = sorted(DATA.glob("*.xml"))
NS = {"c": "urn:activemq:core"}


def _import(path: Path) -> tuple[str, list[str]]:
    result = run_cli("config", "import-artemis", str(path))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.strip()]
    assert all(line.startswith("pagemq: warning: ") for line in warnings), warnings
    return result.stdout, warnings


def _artemis_value(key: str, text: str) -> object:
    text = text.strip()
    if match := re.fullmatch(r"(-?\d+)\s*([kmg])?i?b?", text, re.IGNORECASE):
        factor = {"k": 1024, "m": 1024**2, "g": 1024**3}.get((match.group(2) or "").lower(), 1)
        return int(match.group(1)) * factor
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text.upper() if key.endswith("policy") else text


def _applies(match: str, name: str) -> int | None:
    """Specificity of `match` for address `name` (higher wins), None if it does not apply."""
    if match == name:
        return 1_000
    if match == "#":
        return 0
    if match.endswith(".#"):  # '#' is zero or more words
        prefix = match[:-2]
        return match.count(".") if name == prefix or name.startswith(prefix + ".") else None
    assert "*" not in match and "#" not in match, f"the test cannot judge match {match!r}"
    return None


def _expected_settings(core: ET.Element, name: str) -> dict[str, object]:
    settings = []
    for setting in core.findall("c:address-settings/c:address-setting", NS):
        rank = _applies(setting.get("match", ""), name)
        if rank is not None:
            settings.append((rank, setting))
    expected: dict[str, object] = {}
    for _, setting in sorted(settings, key=lambda item: item[0]):  # least specific first
        for child in setting:
            if isinstance(child.tag, str) and "${" not in (child.text or ""):
                key = child.tag.split("}")[-1]
                expected[key] = _artemis_value(key, child.text or "")
    return expected


def _core(path: Path) -> ET.Element:
    core = ET.parse(path).getroot().find("c:core", NS)
    assert core is not None
    return core


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_imported_toml_starts_a_broker_whose_address_settings_match_the_xml(path, tmp_path):
    text, _ = _import(path)
    tomllib.loads(text)
    config = tmp_path / "pagemq.toml"
    config.write_text(text)
    core = _core(path)
    addresses = core.findall("c:addresses/c:address", NS)
    compared = 0
    with BrokerProcess(tmp_path, extra_args=["--config", str(config)]) as proc:
        for address in addresses:
            name = address.get("name")
            info = proc.address(name)
            routing = "anycast" if address.find("c:anycast", NS) is not None else "multicast"
            assert info["routing_type"] == routing, info
            for queue in address.findall(f"c:{routing}/c:queue", NS):
                assert proc.queue(queue.get("name"))["address"] == name
            for key, value in _expected_settings(core, name).items():
                if key in info["settings"]:  # a key this pagemq has: it must carry the XML's value
                    assert info["settings"][key] == value, (name, key, info["settings"])
                    compared += 1
    assert not proc.tracebacks(), proc.log_tail()
    # the files whose addresses have address settings pagemq knows: they were all compared
    least = {"example-paging-broker": 10, "example-dead-letter-broker": 2,
             "smoke-paging-max-messages-broker": 10, "distribution-template-broker": 10}
    assert compared >= least.get(path.stem, 0), compared


def test_the_paging_example_keeps_its_limits_exactly():
    text, _ = _import(DATA / "example-paging-broker.xml")
    document = tomllib.loads(text)
    limited = document["address-settings"]["pagingQueueLimited"]
    assert limited == {"address-full-policy": "PAGE", "max-size-messages": 100, "page-limit-messages": 1000,
                       "page-full-policy": "FAIL"}
    example = document["address-settings"]["exampleQueue"]
    assert example == {"max-size-bytes": "10MiB", "page-size-bytes": "1MiB"}  # Artemis' "10Mb" is MiB
    assert document["broker"]["paging-directory"] == "./data/messaging/paging"
    assert document["broker"]["journal-directory"] == "./data/messaging/journal"


def test_every_element_it_cannot_map_is_named_by_its_path():
    _, warnings = _import(DATA / "smoke-paging-max-messages-broker.xml")
    text = "\n".join(warnings)
    for path in ("configuration/core/journal-type", "configuration/core/bindings-directory",
                 "configuration/core/large-messages-directory",
                 'configuration/core/address-settings/address-setting[@match="#"]/redelivery-delay',
                 'configuration/core/acceptors/acceptor[@name="amqp"]'):
        assert f"pagemq: warning: {path}" in text, (path, text)
    # mapped elements are not warned about
    assert not [w for w in warnings if re.search(r"/(max-size-messages|page-size-bytes|max-disk-usage):", w)]


def test_the_stomp_acceptor_becomes_the_stomp_listener():
    document = tomllib.loads(_import(DATA / "example-stomp-broker.xml")[0])
    assert document["acceptors"] == {"stomp": "localhost:61613"}  # the CORE-only acceptor is not it
    text, warnings = _import(DATA / "smoke-paging-max-messages-broker.xml")
    # the dedicated STOMP acceptor first; on loopback, as security is off (safe by default)
    assert tomllib.loads(text)["acceptors"] == {"stomp": "127.0.0.1:61613"}
    assert any("not 0.0.0.0:61613" in w and "security-enabled" in w for w in warnings), warnings


def test_security_settings_become_role_lists_or_are_named_when_this_pagemq_has_none():
    text, warnings = _import(DATA / "example-security-broker.xml")
    document = tomllib.loads(text)
    if "security-settings" in document:
        europe = document["security-settings"]["news.europe.#"]
        assert europe["send"] == ["europe-user"] and europe["consume"] == ["news-user"]
        assert europe["create-durable-queue"] == ["user"]
    else:
        assert any('security-setting[@match="news.europe.#"]/permission[@type="send"]' in w for w in warnings)


def test_the_distribution_template_placeholders_are_named_not_guessed():
    text, warnings = _import(DATA / "distribution-template-broker.xml")
    assert "${" not in text.split("\n# ", 1)[-1].split("\n\n", 1)[-1]  # not in any value
    assert any("core/journal-datasync: unresolved placeholder '${fsync}'" in w for w in warnings), warnings
    assert any('acceptor[@name="artemis"]: unresolved placeholder' in w for w in warnings), warnings


def test_an_unreadable_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "broker.xml"
    bad.write_text("<configuration><core>")
    result = run_cli("config", "import-artemis", str(bad))
    assert result.returncode == 2 and "not well-formed XML" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr

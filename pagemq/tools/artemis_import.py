"""`pagemq config import-artemis broker.xml`: an Artemis broker.xml as pagemq TOML.

What maps (names are the seeds' in both, see docs/operations.md):
- `<address-settings>`: every `<address-setting match>` becomes `[address-settings."match"]`
  with its children under their own names (`max-size-bytes`, `page-size-bytes`,
  `address-full-policy`, `max-read-page-*`, `prefetch-page-*`, `page-limit-*`,
  `page-full-policy`, `max-delivery-attempts`, `dead-letter-address`, `expiry-address`,
  `auto-create-addresses`, ...). Artemis sizes (`10M`, `10Mb`, `512KiB`: all powers of 1024,
  `ByteUtil.convertTextBytes`) become exact byte counts.
- `<addresses>`: `[[addresses]]` with `routing-type` and `[[addresses.queues]]` (`filter`,
  `durable`).
- broker settings: `global-max-size`, `global-max-messages`, `max-disk-usage`,
  `min-disk-free`, `disk-scan-period` (ms), `message-expiry-scan-period` (ms),
  `page-sync-timeout` (ns), `journal-file-size`,
  `journal-datasync` / `journal-sync-non-transactional` (→ `journal-sync`),
  `paging-directory`, `journal-directory` (and `data-directory`, their parent),
  `security-enabled`; `id-cache-size` (an address setting in pagemq).
- `<acceptors>`: the first acceptor serving STOMP (no `protocols` parameter means every
  protocol, as in Artemis) becomes `[acceptors] stomp = "host:port"` (`stomp-tls` with
  `sslEnabled=true`).
- `<security-settings>`: `[security-settings."match"]`, each permission type in kebab case
  (`createDurableQueue` → `create-durable-queue`) with its role list.

Whatever cannot be mapped is named on stderr by its element path
(`core/address-settings/address-setting[@match="#"]/redelivery-delay`), and also kept as a
comment at the top of the TOML. The result is checked with pagemq's own configuration
loader: a key this pagemq does not know or a value it refuses is taken out and named the
same way, so the printed TOML always starts a broker.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qsl, urlsplit

from pagemq.units import ConfigError, key_path

__all__ = ["ImportResult", "import_broker_xml", "main", "to_toml"]

EXIT_CANNOT_READ = 2

_ARTEMIS_SIZE = re.compile(r"^\s*(-?\d+)\s*(?:([kmg])i?)?b?\s*$", re.IGNORECASE)
_FACTORS = {"k": 1024, "m": 1024**2, "g": 1024**3}
_PLACEHOLDER = re.compile(r"\$\{[^}]*\}")

_SIZE_SETTINGS = frozenset({
    "max-size-bytes", "page-size-bytes", "max-read-page-bytes", "prefetch-page-bytes", "page-limit-bytes",
})
_INT_SETTINGS = frozenset({
    "max-size-messages", "max-read-page-messages", "prefetch-page-messages", "page-limit-messages",
    "max-delivery-attempts", "id-cache-size", "auto-delete-queues-message-count",
    "auto-delete-queues-delay", "auto-delete-addresses-delay",
})
_CHOICE_SETTINGS = frozenset({"address-full-policy", "page-full-policy"})
_TEXT_SETTINGS = frozenset({"dead-letter-address", "expiry-address"})
_PERMISSIONS = ("send", "consume", "browse", "createAddress", "deleteAddress", "createDurableQueue",
                "deleteDurableQueue", "createNonDurableQueue", "deleteNonDurableQueue", "manage", "view",
                "edit")
_MAX_VALIDATION_ROUNDS = 200

_Key = str | int
_Parts = tuple[_Key, ...]


@dataclass
class ImportResult:
    """The TOML document (nested dicts and lists) and the elements that were not mapped."""

    document: dict[str, object] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # where each emitted key came from: TOML key parts -> element path
    origins: dict[_Parts, str] = field(default_factory=dict)

    def warn(self, where: str, why: str) -> None:
        self.warnings.append(f"{where}: {why}")

    def put(self, parts: _Parts, value: object, where: str) -> None:
        table: dict[str, object] = self.document
        for part in parts[:-1]:
            child = table.setdefault(str(part), {})
            assert isinstance(child, dict)
            table = child
        table[str(parts[-1])] = value
        self.origins[parts] = where


def _local(tag: object) -> str:
    """The element name without its namespace (`{urn:activemq:core}acceptor` → `acceptor`)."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else "#comment"


def _elements(parent: ET.Element) -> list[ET.Element]:
    return [child for child in parent if isinstance(child.tag, str)]


def _text(element: ET.Element) -> str:
    return (element.text or "").strip()


def artemis_size(text: str) -> int:
    """Bytes of an Artemis size (`ByteUtil.convertTextBytes`: k/m/g, optional i and b, x1024)."""
    match = _ARTEMIS_SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an Artemis size")
    return int(match.group(1)) * _FACTORS.get((match.group(2) or "").lower(), 1)


def _size_value(size: int) -> int | str:
    """A readable pagemq size: "10MiB" when exact, else the byte count (-1 stays -1)."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size > 0 and size % factor == 0:
            return f"{size // factor}{unit}"
    return size


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return lowered == "true"


def _guess(text: str) -> object:
    """A value of a key with no known type: bool, int, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def _setting_value(key: str, text: str) -> object:
    if key in _SIZE_SETTINGS:
        return _size_value(artemis_size(text))
    if key in _INT_SETTINGS:
        return int(text)
    if key in _CHOICE_SETTINGS:
        return text.upper()
    if key in _TEXT_SETTINGS:
        return text
    return _guess(text)


def _size_text(text: str) -> int | str:
    return _size_value(artemis_size(text))


# broker.xml <core> children: where they go in the TOML and how their text converts
_BROKER_SETTINGS: dict[str, tuple[_Parts, Callable[[str], object]]] = {
    "global-max-size": (("broker", "global-max-size"), _size_text),
    "min-disk-free": (("broker", "min-disk-free"), _size_text),
    "journal-file-size": (("broker", "journal-file-size"), _size_text),
    "global-max-messages": (("broker", "global-max-messages"), int),
    "max-disk-usage": (("broker", "max-disk-usage"), int),
    "disk-scan-period": (("broker", "disk-scan-period"), lambda text: f"{int(text)}ms"),
    "message-expiry-scan-period": (("broker", "message-expiry-scan-period"),
                                   lambda text: -1 if int(text) < 0 else f"{int(text)}ms"),
    "page-sync-timeout": (("broker", "page-sync-timeout"), int),  # nanoseconds in both
    "journal-directory": (("broker", "journal-directory"), str),
    "paging-directory": (("broker", "paging-directory"), str),
    "security-enabled": (("broker", "security-enabled"), _bool),
    "id-cache-size": (("address-settings", "#", "id-cache-size"), int),  # an address setting here
}


class _Importer:
    def __init__(self) -> None:
        self.result = ImportResult()

    def value(self, element: ET.Element, where: str, convert: Callable[[str], object]) -> object | None:
        """The element's converted text, or None with a warning (placeholder, bad value)."""
        text = _text(element)
        if _PLACEHOLDER.search(text):
            self.result.warn(where, f"unresolved placeholder {text!r} (a template: left out)")
            return None
        try:
            return convert(text)
        except ValueError as exc:
            self.result.warn(where, f"cannot read {text!r}: {exc}")
            return None

    def core(self, core: ET.Element, base: str) -> None:
        handlers: dict[str, Callable[[ET.Element, str], None]] = {
            "address-settings": self.address_settings,
            "addresses": self.addresses,
            "acceptors": self.acceptors,
            "security-settings": self.security_settings,
        }
        journal_sync: list[bool] = []
        for child in _elements(core):
            name = _local(child.tag)
            where = f"{base}/{name}"
            if name in handlers:
                handlers[name](child, where)
            elif not self.broker_setting(child, name, where, journal_sync):
                self.result.warn(where, "not mapped (pagemq has no such setting)")
        if journal_sync:
            self.result.put(("broker", "journal-sync"), all(journal_sync), f"{base}/journal-datasync")

    def broker_setting(self, child: ET.Element, name: str, where: str, journal_sync: list[bool]) -> bool:
        """Map one <core> child to [broker] (or the address settings); False: not mapped."""
        if name in ("journal-datasync", "journal-sync-non-transactional"):
            flag = self.value(child, where, _bool)
            if isinstance(flag, bool):
                journal_sync.append(flag)
            return True
        mapping = _BROKER_SETTINGS.get(name)
        if mapping is None:
            return False
        parts, convert = mapping
        value = self.value(child, where, convert)
        if value is None:
            return True
        if name == "global-max-size" and value == -1:
            self.result.warn(where, "-1 means half the JVM heap in Artemis, no limit in pagemq: "
                                    "left out (pagemq's default 512MiB applies)")
            return True
        self.result.put(parts, value, where)
        if name == "journal-directory":  # Artemis' data directory is the journal's parent
            self.result.put(("broker", "data-directory"), str(PurePosixPath(str(value)).parent), where)
        return True

    def matches(self, element: ET.Element, where: str, tag: str) -> Iterator[tuple[str, str, ET.Element]]:
        """(match, element path, element) of each `<tag match="...">` child; others are named."""
        for setting in _elements(element):
            match = setting.get("match")
            here = f'{where}/{_local(setting.tag)}[@match="{match}"]'
            if _local(setting.tag) != tag or match is None:
                self.result.warn(here, f"not mapped (expected <{tag} match=...>)")
                continue
            yield match, here, setting

    def address_settings(self, element: ET.Element, where: str) -> None:
        for match, here, setting in self.matches(element, where, "address-setting"):
            if not _elements(setting):
                self.result.put(("address-settings", match), {}, here)
            for child in _elements(setting):
                key = _local(child.tag)
                value = self.value(child, f"{here}/{key}", partial(_setting_value, key))
                if value is not None:
                    self.result.put(("address-settings", match, key), value, f"{here}/{key}")

    def addresses(self, element: ET.Element, where: str) -> None:
        listed: list[dict[str, object]] = []
        for address in _elements(element):
            name = address.get("name")
            here = f'{where}/{_local(address.tag)}[@name="{name}"]'
            if _local(address.tag) != "address" or not name:
                self.result.warn(here, "not mapped (expected <address name=...>)")
                continue
            entry = self.address(address, name, here)
            if entry is not None:
                self.result.origins[("addresses", len(listed))] = here
                listed.append(entry)
        if listed:
            self.result.document["addresses"] = listed

    def address(self, address: ET.Element, name: str, here: str) -> dict[str, object] | None:
        kinds = [child for child in _elements(address) if _local(child.tag) in ("anycast", "multicast")]
        for child in _elements(address):
            if _local(child.tag) not in ("anycast", "multicast"):
                self.result.warn(f"{here}/{_local(child.tag)}", "not mapped")
        if not kinds:
            self.result.warn(here, "no <anycast> or <multicast>: left out (pagemq creates it on first use)")
            return None
        if len(kinds) > 1:
            self.result.warn(f"{here}/{_local(kinds[1].tag)}",
                             "an address has one routing type in pagemq: only the first is kept")
        kind = kinds[0]
        routing = _local(kind.tag)
        queues = [self.queue(queue, f"{here}/{routing}/queue[@name=\"{queue.get('name')}\"]")
                  for queue in _elements(kind) if _local(queue.tag) == "queue" and queue.get("name")]
        entry: dict[str, object] = {"name": name, "routing-type": routing}
        if queues and not (routing == "anycast" and queues == [{"name": name}]):
            entry["queues"] = queues
        return entry

    def queue(self, queue: ET.Element, here: str) -> dict[str, object]:
        entry: dict[str, object] = {"name": queue.get("name")}
        for attribute in queue.attrib:
            if attribute != "name":
                self.result.warn(f"{here}/@{attribute}", "not mapped (pagemq queues have no such attribute)")
        for child in _elements(queue):
            key = _local(child.tag)
            if key == "filter" and child.get("string"):
                entry["filter"] = child.get("string")
            elif key == "durable":
                flag = self.value(child, f"{here}/durable", _bool)
                if isinstance(flag, bool):
                    entry["durable"] = flag
            else:
                self.result.warn(f"{here}/{key}", "not mapped")
        return entry

    def acceptors(self, element: ET.Element, where: str) -> None:
        """The STOMP acceptors: a dedicated one (`protocols=STOMP`) before one serving all."""
        candidates: list[tuple[bool, str, ET.Element]] = []
        for acceptor in _elements(element):
            here = f'{where}/acceptor[@name="{acceptor.get("name")}"]'
            uri = _text(acceptor)
            if _PLACEHOLDER.search(uri):
                self.result.warn(here, f"unresolved placeholder in {uri!r} (a template: left out)")
                continue
            protocols = _acceptor_params(uri).get("protocols", "STOMP").upper().replace(" ", "").split(",")
            if "STOMP" not in protocols or urlsplit(uri).scheme not in ("tcp", ""):
                self.result.warn(here, f"not mapped (not a STOMP acceptor: {uri!r})")
                continue
            candidates.append((protocols != ["STOMP"], here, acceptor))
        chosen: dict[str, str] = {}
        for _shared, here, acceptor in sorted(candidates, key=lambda c: c[0]):
            self.acceptor(acceptor, here, chosen)

    def acceptor(self, acceptor: ET.Element, here: str, chosen: dict[str, str]) -> None:
        uri = _text(acceptor)
        parts = urlsplit(uri)
        params = _acceptor_params(uri)
        try:
            port = parts.port
        except ValueError:
            port = None
        if port is None:
            self.result.warn(here, f"not mapped (no port in {uri!r})")
            return
        key = "stomp-tls" if params.get("sslenabled", "").lower() == "true" else "stomp"
        if key in chosen:
            self.result.warn(here, f"not mapped (pagemq has one {key} listener: {chosen[key]} is kept)")
            return
        host = parts.hostname or "0.0.0.0"
        endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        chosen[key] = f"acceptor {acceptor.get('name') or endpoint!r}"
        self.result.put(("acceptors", key), endpoint, here)
        ignored = sorted(set(params) - {"protocols", "sslenabled"})
        if ignored:
            self.result.warn(here, f"acceptor parameters not mapped: {', '.join(ignored)}")

    def security_settings(self, element: ET.Element, where: str) -> None:
        for match, here, setting in self.matches(element, where, "security-setting"):
            for permission in _elements(setting):
                kind = permission.get("type", "")
                there = f'{here}/{_local(permission.tag)}[@type="{kind}"]'
                if _local(permission.tag) != "permission" or kind not in _PERMISSIONS:
                    self.result.warn(there, "not mapped (unknown permission)")
                    continue
                roles_text = permission.get("roles", "")
                if _PLACEHOLDER.search(roles_text):
                    self.result.warn(there, f"unresolved placeholder {roles_text!r} (a template: left out)")
                    continue
                roles = [role.strip() for role in roles_text.split(",") if role.strip()]
                self.result.put(("security-settings", match, _kebab(kind)), roles, there)
        if any(key == "security-settings" for key in self.result.document):
            self.result.warn(where, "note: users are not in broker.xml (Artemis keeps them in "
                                    "artemis-users.properties): add them with `pagemq user add`")


def _acceptor_params(uri: str) -> dict[str, str]:
    """An acceptor URI's parameters (`;` or `&` separated), names lower-cased."""
    return {k.lower(): v for k, v in parse_qsl(urlsplit(uri).query.replace(";", "&"))}


def _kebab(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"-\1", camel).lower()


def import_broker_xml(path: Path) -> ImportResult:
    """Read `path` (raises OSError, ET.ParseError) and map it; then check it (see module doc)."""
    root = ET.parse(path).getroot()
    importer = _Importer()
    name = _local(root.tag)
    if name == "core":
        importer.core(root, "core")
    else:
        found = False
        for child in _elements(root):
            child_name = _local(child.tag)
            if child_name == "core":
                importer.core(child, f"{name}/core")
                found = True
            else:
                importer.result.warn(f"{name}/{child_name}", "not mapped")
        if not found:
            importer.result.warn(name, "no <core> element: nothing to import")
    _local_unless_secured(importer.result)
    _validate(importer.result)
    return importer.result


def _local_unless_secured(result: ImportResult) -> None:
    """Artemis secures its acceptors by default; pagemq refuses a non-loopback listener
    without security (docs/security.md). A listener the XML puts on every interface while
    security stays off is put on 127.0.0.1 instead, with a warning saying how to open it."""
    broker = result.document.get("broker")
    if isinstance(broker, dict) and broker.get("security-enabled") is True:
        return
    acceptors = result.document.get("acceptors")
    if not isinstance(acceptors, dict):
        return
    for key, endpoint in list(acceptors.items()):
        host, _, port = str(endpoint).rpartition(":")
        if host.strip("[]") in ("127.0.0.1", "localhost", "::1"):
            continue
        acceptors[key] = f"127.0.0.1:{port}"
        result.warn(result.origins.get(("acceptors", key), "acceptors"),
                    f"listens on 127.0.0.1:{port}, not {endpoint}: security is off in pagemq unless "
                    "enabled (set [broker] security-enabled = true with a users-file, or "
                    "allow-anonymous-remote = true, then put the host back)")


def _validate(result: ImportResult) -> None:
    """Load the document with pagemq's configuration loader; drop what it refuses."""
    from pagemq.server.config import load_config

    for _ in range(_MAX_VALIDATION_ROUNDS):
        with tempfile.NamedTemporaryFile("w", suffix=".toml", encoding="utf-8") as file:
            file.write(to_toml(result.document))
            file.flush()
            try:
                load_config(Path(file.name))
                return
            except ConfigError as exc:
                if not _drop(result, exc):
                    raise
    raise RuntimeError("the imported configuration could not be made valid")


def _drop(result: ImportResult, error: ConfigError) -> bool:
    """Take out what `error` names: that key, the table it names (an unknown section), or
    the entry holding it (an address whose queue's filter is refused); warn per element."""
    key = error.key
    spelled = {parts: key_path(*parts) for parts in result.origins}
    doomed = [parts for parts, text in spelled.items() if text == key]
    if not doomed:
        doomed = [parts for parts, text in spelled.items() if text.startswith((f"{key}.", f"{key}["))]
        if doomed:
            prefix = _common_prefix(doomed)
            _remove(result.document, prefix)
    if not doomed:
        holders = [parts for parts, text in spelled.items() if key.startswith((f"{text}.", f"{text}["))]
        if holders:
            doomed = [max(holders, key=len)]
    if not doomed:  # a key the import did not write (a default), refused for one it did
        doomed = _mentioned(spelled, str(error))
        if not doomed:
            return False
    for parts in doomed:
        _remove(result.document, parts)
        result.warn(result.origins.pop(parts), f"not mapped: this pagemq refuses it ({error})")
    return True


def _mentioned(spelled: dict[_Parts, str], message: str) -> list[_Parts]:
    """The imported keys an error names in its message, not as its key: `security-enabled =
    true` needing a users file, an acceptor on the port of the default HTTP one."""
    found = [parts for parts, text in spelled.items() if text in message]
    if not found:
        found = [parts for parts in spelled if "-" in str(parts[-1])
                 and re.search(rf"(?<![\w.-]){re.escape(str(parts[-1]))}(?![\w-])", message)]
    return found[:1]


def _common_prefix(many: list[_Parts]) -> _Parts:
    first = many[0]
    end = min(len(parts) for parts in many)
    while end and any(parts[:end] != first[:end] for parts in many):
        end -= 1
    return first[:end]


def _remove(document: dict[str, object], parts: _Parts) -> None:
    """Delete the key at `parts` (already gone: nothing to do); a list entry becomes None,
    so the positions of the others (and their origins) stay as they were."""
    node: object = document
    for part in parts[:-1]:
        if isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and str(part) in node:
            node = node[str(part)]
        else:
            return
    last = parts[-1]
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = None
    elif isinstance(node, dict):
        node.pop(str(last), None)


# ----- TOML ------------------------------------------------------------------------------


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(document: dict[str, object], comments: list[str] | None = None) -> str:
    """The document as TOML: [broker], [acceptors], [address-settings."m"], [[addresses]],
    [security-settings."m"]; `comments` first, one `#` line each."""
    out = [f"# {line}" for line in comments or []]
    for section in ("broker", "acceptors"):
        table = document.get(section)
        if isinstance(table, dict) and table:
            out += ["", f"[{section}]", *(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items())]
    for section in ("address-settings", "security-settings"):
        matches = document.get(section)
        if not isinstance(matches, dict):
            continue
        for match, table in matches.items():
            out += ["", f"[{section}.{_toml_key(match)}]"]
            out += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    addresses = document.get("addresses")
    for address in addresses if isinstance(addresses, list) else []:
        if address is None:
            continue
        out += ["", "[[addresses]]"]
        out += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in address.items() if k != "queues"]
        for queue in address.get("queues", []):
            out += ["[[addresses.queues]]", *(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in queue.items())]
    return "\n".join(out).lstrip("\n") + "\n"


def main(path: Path) -> int:
    """Print the TOML on stdout, one warning line per element not mapped on stderr."""
    try:
        result = import_broker_xml(path)
    except OSError as exc:
        print(f"pagemq: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_READ
    except ET.ParseError as exc:
        print(f"pagemq: {path} is not well-formed XML: {exc}", file=sys.stderr)
        return EXIT_CANNOT_READ
    header = [f"pagemq configuration imported from {path.name} (pagemq config import-artemis)"]
    if result.warnings:
        header.append(f"{len(result.warnings)} element(s) not mapped (also on stderr):")
        header += [f"  {warning}" for warning in result.warnings]
    sys.stdout.write(to_toml(result.document, header))
    for warning in result.warnings:
        print(f"pagemq: warning: {warning}", file=sys.stderr)
    return 0

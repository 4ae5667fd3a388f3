"""TLS server contexts for the `*-tls` listeners, and their reload on SIGHUP.

A listener's SSLContext is fixed when its server is made, so a renewed certificate reaches
new connections another way: the listening context's SNI callback (which OpenSSL runs for
every ClientHello, with or without a server name) moves the handshake onto the newest
context (`SSLObject.context = ...`). `reload()` builds a whole new context first; if the
new files are broken the old one stays in use and the error is logged, so a bad renewal
never takes the listener down. Connections already open keep the certificate they began
with.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

from pagemq.units import ConfigError, key_path

__all__ = ["TLS_SECTION", "ReloadableTls", "TlsConfig", "build_context"]

TLS_SECTION = "tls"


@dataclass(frozen=True)
class TlsConfig:
    """`[tls]`, parsed (security/config.py); paths are absolute or relative to the process."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None
    require_client_cert: bool
    min_version: str

log = logging.getLogger("pagemq.security")

_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def build_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server context from the files named in `tls`; ConfigError naming the bad key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[tls.min_version]
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        key = "key-file" if tls.cert_file.exists() and not tls.key_file.exists() else "cert-file"
        raise ConfigError(key_path(TLS_SECTION, key),
                          f"cannot load {tls.cert_file} / {tls.key_file}: {_reason(exc)}") from None
    if tls.ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(tls.ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(key_path(TLS_SECTION, "ca-file"),
                              f"cannot load {tls.ca_file}: {_reason(exc)}") from None
        context.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


class ReloadableTls:
    """The context new TLS connections get: `context` for the listener, `reload()` on SIGHUP."""

    def __init__(self, tls: TlsConfig) -> None:
        self.config = tls
        self.context = build_context(tls)  # the listener's; its callback hands over to `current`
        self.current = self.context
        self.context.sni_callback = self._select
        self.reloads = 0

    def reload(self) -> bool:
        try:
            fresh = build_context(self.config)
        except ConfigError as exc:
            log.error("TLS certificates not reloaded, keeping the current ones: %s", exc)
            return False
        self.current = fresh
        self.reloads += 1
        log.info("TLS certificates reloaded from %s", self.config.cert_file)
        return True

    def _select(self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None,
                context: ssl.SSLContext) -> None:
        current = self.current
        if context is not current:
            connection.context = current

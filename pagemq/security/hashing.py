"""Password hashes: salted scrypt (stdlib `hashlib.scrypt`), never plain text, never fast.

Stored form: `scrypt$n=16384,r=8,p=1$<salt, base64>$<key, base64>`. The parameters travel
with the hash so they can be raised later without breaking existing users. scrypt at
n=2^14, r=8 costs ~16 MiB and tens of milliseconds, which is the point: a stolen users file
is expensive to guess at. The broker therefore verifies in a thread and caches successes
(`authenticator.py`); this module is pure functions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

__all__ = ["HashError", "hash_password", "verify_password"]

SCHEME = "scrypt"
N = 1 << 14
R = 8
P = 1
KEY_BYTES = 32
SALT_BYTES = 16
# hashlib's default maxmem (32 MiB) is just above n=2^14, r=8; give room for stronger hashes.
_MAX_MEM = 256 * 1024 * 1024


class HashError(ValueError):
    """A stored hash this module cannot read (wrong scheme, bad parameters or base64)."""


def hash_password(password: str, *, n: int = N, r: int = R, p: int = P) -> str:
    salt = secrets.token_bytes(SALT_BYTES)
    key = _derive(password, salt, n, r, p)
    return f"{SCHEME}$n={n},r={r},p={p}${_b64(salt)}${_b64(key)}"


def verify_password(password: str, stored: str) -> bool:
    """Whether `password` matches `stored` (constant-time comparison of the keys)."""
    n, r, p, salt, key = parse_hash(stored)
    return hmac.compare_digest(_derive(password, salt, n, r, p, len(key)), key)


def parse_hash(stored: str) -> tuple[int, int, int, bytes, bytes]:
    """(n, r, p, salt, key); HashError when `stored` is not a hash this module wrote."""
    parts = stored.split("$") if isinstance(stored, str) else []
    if len(parts) != 4 or parts[0] != SCHEME:
        raise HashError(f'not a "{SCHEME}$..." password hash')
    try:
        params = dict(item.split("=", 1) for item in parts[1].split(","))
        n, r, p = int(params["n"]), int(params["r"]), int(params["p"])
        salt = base64.b64decode(parts[2], validate=True)
        key = base64.b64decode(parts[3], validate=True)
    except (KeyError, ValueError) as exc:
        raise HashError(f"unreadable {SCHEME} hash ({exc})") from None
    if n < 2 or n & (n - 1) or r < 1 or p < 1 or not salt or len(key) < 16:
        raise HashError(f"bad {SCHEME} parameters n={n} r={r} p={p}")
    return n, r, p, salt, key


def _derive(password: str, salt: bytes, n: int, r: int, p: int, length: int = KEY_BYTES) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                          maxmem=_MAX_MEM, dklen=length)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")

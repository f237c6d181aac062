"""Student ids are stored only as keyed hashes (README "Student data").

Every table that refers to a student — the privacy ledger, calibration job inputs, response-cache tags — holds
``HMAC-SHA-256(tenant key, student id)``, never the id itself, so a copy of the database names no student. The
tenant key is ``HMAC-SHA-256(server secret, "student-id:" + tenant)``: the same id in two tenants is two unrelated
keys, and without the server secret a key cannot be turned back into an id, not even by trying candidate ids.
The mapping is deterministic, so the same student always lands on the same ledger rows — which is what keeps
erasure from resetting a budget: a new diagnosis of an erased id hashes to the key its charges are kept under.

The server secret is ``FEDCD_SECRET_KEY`` when set; otherwise ``<state_dir>/server-secret`` (created once,
mode 0600). Several hosts sharing one database
must set ``FEDCD_SECRET_KEY`` to the same value: each host's own file would give the same student different keys.
Losing or changing the secret orphans every stored key (budgets would restart): back it up with the database.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import secrets
import time
from pathlib import Path

from app.settings import Settings

__all__ = ["SECRET_FILE", "Pseudonyms", "cache_tag", "existing_server_secret", "server_secret"]

log = logging.getLogger("fedcd.pseudonyms")

SECRET_FILE = "server-secret"
_KEY_CONTEXT = b"student-id:"
_logged: set[Path] = set()  # state dirs whose secret source was logged by this process


def _load_or_create_secret(path: Path) -> bytes:
    """The secret at ``path``; created atomically (O_EXCL, 0600) by whichever process comes first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        for _ in range(100):  # another process is writing it: wait for the bytes
            data = path.read_bytes()
            if len(data) >= 32:
                return data
            time.sleep(0.01)
        raise RuntimeError(f"{path} exists but holds no secret") from None
    secret = secrets.token_bytes(32)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)
        fh.flush()
        os.fsync(fh.fileno())
    return secret


def server_secret(settings: Settings) -> bytes:
    """The server secret: ``FEDCD_SECRET_KEY``, else ``<state_dir>/server-secret`` (created once, 0600)."""
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value().encode()
    path = settings.state_dir / SECRET_FILE
    secret = _load_or_create_secret(path)
    if path.resolve() not in _logged:
        _logged.add(path.resolve())
        # Loud only where several hosts are plausible: with SQLite the database is this host's own file.
        level = logging.INFO if settings.db_url.startswith("sqlite") else logging.WARNING
        log.log(level, "student ids are stored as keyed hashes under the secret in %s (FEDCD_SECRET_KEY is unset); "
                "multi-host deployments must set FEDCD_SECRET_KEY to one shared value", path)
    return secret


def existing_server_secret(settings: Settings) -> bytes | None:
    """The server secret if one exists — never creates one (a migration must not invent a secret the server will
    not use)."""
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value().encode()
    path = settings.state_dir / SECRET_FILE
    return path.read_bytes() if path.is_file() and path.stat().st_size >= 32 else None


class Pseudonyms:
    """The keyed hash of a (tenant, student id): what every store keeps instead of the id."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the server secret must be at least 16 bytes (FEDCD_SECRET_KEY)")
        self._secret = secret

    @classmethod
    def from_settings(cls, settings: Settings) -> Pseudonyms:
        return cls(server_secret(settings))

    @property
    def secret(self) -> bytes:
        return self._secret

    @functools.lru_cache(maxsize=1024)  # noqa: B019  (one object per server; a handful of tenants)
    def _tenant_key(self, tenant: str) -> bytes:
        return hmac.new(self._secret, _KEY_CONTEXT + tenant.encode(), hashlib.sha256).digest()

    def key(self, tenant: str, student_id: str) -> str:
        """The stored form of ``student_id`` in ``tenant``: 64 hex characters. Always hashes, whatever the id
        looks like: an id that happens to look like a key is still an id."""
        return hmac.new(self._tenant_key(tenant), student_id.encode(), hashlib.sha256).hexdigest()


def cache_tag(tenant: str, key: str) -> str:
    """The response-cache tag of the entries made from the responses of the student stored as ``key``
    (``providers.cache``): erasure forgets every entry under it."""
    return f"{tenant}:{key}"

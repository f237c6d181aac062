"""Student ids are stored only as keyed hashes (README "Student data").

Every table that refers to a student — the privacy ledger, calibration job inputs, response-cache tags — holds
``HMAC-SHA-256(tenant key, student id)``, never the id itself, so a copy of the database names no student. The
tenant key is ``HMAC-SHA-256(server secret, "student-id:" + tenant)``: the same id in two tenants is two unrelated
keys, and without the server secret a key cannot be turned back into an id, not even by trying candidate ids.
The mapping is deterministic, so the same student always lands on the same ledger rows — which is what keeps
erasure from resetting a budget: a new diagnosis of an erased id hashes to the key its charges are kept under.

The server secret is ``FEDCD_SECRET_KEY`` when set (at least 32 bytes); otherwise the file ``FEDCD_SECRET_FILE``,
default ``<state_dir>/server-secret`` (32 random bytes, created once, mode 0600). Several hosts sharing one database
must set ``FEDCD_SECRET_KEY`` to the same value: each host's own file would give the same student different keys.
Losing or changing the secret orphans every stored key (budgets would restart): back it up — but never in the same
backup as the database, which with it lets anyone re-identify students by hashing candidate ids.

The console signs its sessions under a secret of its own (:func:`console_secret`): ending every console session is
then a matter of changing that one, which touches no student's key.
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
from privacy import StudentKey

__all__ = ["CONSOLE_SECRET_FILE", "SECRET_FILE", "Pseudonyms", "cache_tag", "console_secret", "existing_server_secret",
           "secret_path", "server_secret"]

log = logging.getLogger("fedcd.pseudonyms")

SECRET_FILE = "server-secret"
CONSOLE_SECRET_FILE = "console-secret"
_MIN_BYTES = 32  # as MIN_SECRET_BYTES of the settings: what a generated file holds, and what a file must hold
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
            if len(data) >= _MIN_BYTES:
                return data
            time.sleep(0.01)
        raise RuntimeError(f"{path} exists but holds fewer than {_MIN_BYTES} bytes: not a secret fedcd made "
                           "(restore the original, or remove it only if no stored data depends on it)") from None
    secret = secrets.token_bytes(_MIN_BYTES)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)
        fh.flush()
        os.fsync(fh.fileno())
    return secret


def secret_path(settings: Settings) -> Path:
    """Where the server secret's file is (used when ``FEDCD_SECRET_KEY`` is unset): ``FEDCD_SECRET_FILE``, else
    ``<state_dir>/server-secret``."""
    return settings.secret_file or settings.state_dir / SECRET_FILE


def _configured_or_file(configured: str | None, path: Path, settings: Settings, *, what: str, variable: str,
                        shared: str) -> bytes:
    """``configured`` (a setting's value), else the secret file at ``path`` (created once, 0600) — logged once per
    file, loudly where several hosts are plausible (with SQLite the database is this host's own file)."""
    if configured is not None:
        return configured.encode()
    secret = _load_or_create_secret(path)
    if path.resolve() not in _logged:
        _logged.add(path.resolve())
        level = logging.INFO if settings.db_url.startswith("sqlite") else logging.WARNING
        log.log(level, "%s under the secret in %s (%s is unset); %s must set %s to one shared value",
                what, path, variable, shared, variable)
    return secret


def server_secret(settings: Settings) -> bytes:
    """The server secret: ``FEDCD_SECRET_KEY``, else the file :func:`secret_path` (created once, 0600)."""
    configured = settings.secret_key.get_secret_value() if settings.secret_key is not None else None
    return _configured_or_file(configured, secret_path(settings), settings, what="student ids are stored as keyed "
                               "hashes", variable="FEDCD_SECRET_KEY", shared="multi-host deployments")


def existing_server_secret(settings: Settings) -> bytes | None:
    """The server secret if one exists — never creates one (a migration must not invent a secret the server will
    not use)."""
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value().encode()
    path = secret_path(settings)
    return path.read_bytes() if path.is_file() and path.stat().st_size >= _MIN_BYTES else None


def console_secret(settings: Settings) -> bytes:
    """The key console sessions are signed under (``app.console.session``): ``FEDCD_CONSOLE_SECRET_KEY``, else
    ``<state_dir>/console-secret`` (created once, 0600). Never the server secret: rotating this one to end every
    session must not re-key the students (and so reset their budgets)."""
    configured = settings.console_secret_key.get_secret_value() if settings.console_secret_key is not None else None
    return _configured_or_file(configured, settings.state_dir / CONSOLE_SECRET_FILE, settings,
                               what="console sessions are signed", variable="FEDCD_CONSOLE_SECRET_KEY",
                               shared="hosts without a shared state folder")


class Pseudonyms:
    """The keyed hash of a (tenant, student id): what every store keeps instead of the id."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < _MIN_BYTES:
            raise ValueError(f"the server secret must be at least {_MIN_BYTES} bytes (FEDCD_SECRET_KEY)")
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

    def key(self, tenant: str, student_id: str) -> StudentKey:
        """The stored form of ``student_id`` in ``tenant``: 64 hex characters. Always hashes, whatever the id
        looks like: an id that happens to look like a key is still an id."""
        return StudentKey(hmac.new(self._tenant_key(tenant), student_id.encode(), hashlib.sha256).hexdigest())


def cache_tag(tenant: str, key: str) -> str:
    """The response-cache tag of the entries made from the responses of the student stored as ``key``
    (``providers.cache``): erasure forgets every entry under it."""
    return f"{tenant}:{key}"

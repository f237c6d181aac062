"""API keys: who is calling, for which tenant, in which role.

A key looks like ``fcd_<key id>_<secret>``: the 12-hex-digit key id is public (it names the
key in listings, logs and revocations), the secret is 32 bytes from :mod:`secrets`. Only the
SHA-256 of the whole key is stored — the key is shown once, at creation — and a presented
key is checked by recomputing that hash and comparing in constant time. Expiry and
revocation are read from the database on every request, so a revoked key fails on the next
request, in every worker.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import Connection, bindparam, select, update
from sqlalchemy.orm import sessionmaker

from app.db import ApiKeyRow, TenantRow, engine_of

__all__ = [
    "KEY_PREFIX",
    "ROLES",
    "KeyInfo",
    "KeyStore",
    "NewKey",
    "Principal",
    "Role",
    "valid_tenant",
]

Role = Literal["client", "admin"]
ROLES: tuple[Role, ...] = ("client", "admin")
KEY_PREFIX = "fcd_"
_KEY = re.compile(r"^fcd_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_LAST_USED_EVERY_S = 60.0  # last-used time is written at most once a minute per key


def valid_tenant(name: str) -> bool:
    """1-64 letters, digits, '.', '_' or '-', not starting with a symbol (``_shared`` is reserved)."""
    return bool(_TENANT.match(name))


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: every request acts for ``tenant`` with ``role``."""

    tenant: str
    role: Role
    key_id: str
    # The tenant's configuration generations (app.storage.generations), read on the key's own connection in the
    # same worker-thread hop as the key: a diagnosis plans from them without a hop of its own. None: not read.
    generations: tuple[int, int] | None = field(default=None, compare=False, repr=False)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True)
class NewKey:
    tenant: str
    role: Role
    key_id: str
    api_key: str  # shown once
    expires_at: float | None


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    tenant: str
    role: Role
    created_at: float
    expires_at: float | None
    revoked: bool
    last_used_at: float | None
    created_by: str

    def active(self, now: float) -> bool:
        return not self.revoked and (self.expires_at is None or self.expires_at > now)


_KEYS = ApiKeyRow.__table__.c
_KEY_LOOKUP = select(
    _KEYS.key_id, _KEYS.tenant, _KEYS.role, _KEYS.key_hash, _KEYS.revoked, _KEYS.expires_at, _KEYS.last_used_at
).where(_KEYS.key_id == bindparam("key_id"))


class KeyStore:
    def __init__(self, sessions: sessionmaker, *, clock: Callable[[], float] = time.time) -> None:
        self.sessions, self._clock = sessions, clock

    def create(
        self, *, tenant: str, role: Role = "client", expires_days: float | None = None, created_by: str = "cli"
    ) -> NewKey:
        if not valid_tenant(tenant):
            raise ValueError(f"tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if expires_days is not None and not expires_days > 0:
            raise ValueError("expires_days must be > 0")
        now = self._clock()
        key_id = secrets.token_hex(6)
        api_key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        expires_at = now + expires_days * 86400 if expires_days is not None else None
        with self.sessions.begin() as session:
            if session.get(TenantRow, tenant) is None:
                session.add(TenantRow(name=tenant, created_at=now))
                session.flush()
            session.add(ApiKeyRow(
                key_id=key_id, tenant=tenant, role=role, key_hash=_hash(api_key), created_at=now,
                expires_at=expires_at, revoked=False, created_by=created_by,
            ))
        return NewKey(tenant=tenant, role=role, key_id=key_id, api_key=api_key, expires_at=expires_at)

    def authenticate(
        self, api_key: str, *, generations: Callable[[Connection, str], tuple[int, int]] | None = None
    ) -> Principal | None:
        """The key's principal, or ``None`` for a malformed, unknown, revoked or expired key. ``generations``: read
        the tenant's configuration generations on the same connection, in the same read (``Principal.generations``).
        """
        match = _KEY.match(api_key)
        if match is None:
            return None
        # A Core statement built once, on a plain connection: every request runs it (see app.storage.generations).
        # The key is read from the database on every request: a revoked key fails on the next one, in every worker.
        with engine_of(self.sessions).connect() as conn:
            row = conn.execute(_KEY_LOOKUP, {"key_id": match.group(1)}).first()
            if row is None or not hmac.compare_digest(row.key_hash, _hash(api_key)):
                return None
            now = self._clock()
            if row.revoked or (row.expires_at is not None and row.expires_at <= now):
                return None
            seen = generations(conn, row.tenant) if generations is not None else None
        principal = Principal(tenant=row.tenant, role=row.role, key_id=row.key_id, generations=seen)  # type: ignore[arg-type]
        stale = row.last_used_at is None or row.last_used_at < now - _LAST_USED_EVERY_S
        if stale:
            with self.sessions.begin() as session:
                session.execute(update(ApiKeyRow).where(ApiKeyRow.key_id == principal.key_id).values(last_used_at=now))
        return principal

    def list(self, tenant: str | None = None) -> list[KeyInfo]:
        query = select(ApiKeyRow).order_by(ApiKeyRow.tenant, ApiKeyRow.created_at)
        if tenant is not None:
            query = query.where(ApiKeyRow.tenant == tenant)
        with self.sessions() as session:
            return [
                KeyInfo(
                    key_id=r.key_id, tenant=r.tenant, role=r.role, created_at=r.created_at,  # type: ignore[arg-type]
                    expires_at=r.expires_at, revoked=r.revoked, last_used_at=r.last_used_at, created_by=r.created_by,
                )
                for r in session.scalars(query)
            ]

    def revoke(self, key_id: str, *, tenant: str | None = None) -> bool:
        """Revoke a key (of ``tenant`` only, when given); ``False`` if there is no such key."""
        query = update(ApiKeyRow).where(ApiKeyRow.key_id == key_id)
        if tenant is not None:
            query = query.where(ApiKeyRow.tenant == tenant)
        with self.sessions.begin() as session:
            found = session.scalar(select(ApiKeyRow.key_id).where(ApiKeyRow.key_id == key_id).where(
                ApiKeyRow.tenant == tenant if tenant is not None else True
            ))
            if found is None:
                return False
            session.execute(query.where(ApiKeyRow.revoked.is_(False)).values(revoked=True, revoked_at=self._clock()))
        return True

    def any_exists(self) -> bool:
        with self.sessions() as session:
            return session.scalar(select(ApiKeyRow.key_id).limit(1)) is not None

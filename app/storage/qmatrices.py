"""Q-matrices per tenant, versioned.

``create`` refuses an id the tenant already uses (:class:`QMatrixExists`, the API's 409);
``replace`` adds a new version, so calibrations and stored answers keep naming the exact rows
they were made with. Built-in Q-matrices (the example) live in memory, are readable by every
tenant, and no tenant can take their ids. Another tenant's Q-matrix is simply not found.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import sessionmaker

from app.db import SHARED_TENANT, QMatrixRow
from app.storage.generations import bump
from qmatrix import QMatrix, qmatrix_from_json, qmatrix_to_json

__all__ = ["MAX_VERSION", "QMATRIX_ID_PATTERN", "QMatrixExists", "QMatrixStore", "StoredQMatrix"]

# 1-128 of these, but not '.' or '..': they name the folder and its parent wherever an id becomes a path part ('...'
# names nothing special, and ids like it were stored before: they stay valid). Spelled without a lookahead, which
# pydantic's regex engine (the schema's pattern, app.schemas.qmatrices) does not have.
QMATRIX_ID_PATTERN = r"^(?:[A-Za-z0-9_.-]{3,}|[A-Za-z0-9_-][A-Za-z0-9_.-]?|\.[A-Za-z0-9_-])$"
_SAFE_ID = re.compile(QMATRIX_ID_PATTERN)
_MAX_ID = 128
MAX_VERSION = 2**31 - 1  # versions are 32-bit INTEGER columns (PostgreSQL)


class QMatrixExists(ValueError):
    """The tenant already has a Q-matrix with this id (or it is a built-in id)."""


@dataclass(frozen=True)
class StoredQMatrix:
    qmatrix: QMatrix
    version: int
    tenant: str  # SHARED_TENANT for built-ins

    @property
    def builtin(self) -> bool:
        return self.tenant == SHARED_TENANT

    @property
    def id(self) -> str:
        return self.qmatrix.id


class QMatrixStore:
    """Q-matrices by (tenant, id); the newest undeleted version is the current one."""

    def __init__(self, sessions: sessionmaker, *, cache_items: int = 500_000) -> None:
        self.sessions = sessions
        self._builtin: dict[str, StoredQMatrix] = {}
        # Versions never change once written, so parsed ones are cached by (tenant, id, version) with no
        # invalidation (any worker may cache them); only "which version is current" is read each time.
        self._cache: OrderedDict[tuple[str, str, int], StoredQMatrix] = OrderedDict()
        self._cache_items, self._cached_items = cache_items, 0
        self._cache_lock = threading.Lock()

    @staticmethod
    def valid_id(qid: str) -> bool:
        return len(qid) <= _MAX_ID and bool(_SAFE_ID.match(qid))

    def register_builtin(self, q: QMatrix) -> None:
        self._builtin[q.id] = StoredQMatrix(q, 1, SHARED_TENANT)

    def is_builtin(self, qid: str) -> bool:
        return qid in self._builtin

    def get(self, tenant: str, qid: str, version: int | None = None) -> StoredQMatrix | None:
        """The tenant's Q-matrix (current version unless ``version``), a built-in, or ``None``."""
        if qid in self._builtin:
            builtin = self._builtin[qid]
            return builtin if version in (None, builtin.version) else None
        if not self.valid_id(qid) or (version is not None and not 1 <= version <= MAX_VERSION):
            return None  # a version past the column's range matches nothing (and would make the driver raise)
        with self.sessions() as session:
            # The current version, or the named one while it is not deleted (a deleted Q-matrix is gone, every
            # version of it; the cache below does not know about deletions, so this is read each time).
            version = session.scalar(
                select(func.max(QMatrixRow.version))
                .where(QMatrixRow.tenant == tenant, QMatrixRow.id == qid, QMatrixRow.deleted_at.is_(None),
                       *([QMatrixRow.version == version] if version is not None else []))
            )
            if version is None:
                return None
            cached = self._cached((tenant, qid, version))
            if cached is not None:
                return cached
            body = session.scalar(
                select(QMatrixRow.body_json)
                .where(QMatrixRow.tenant == tenant, QMatrixRow.id == qid, QMatrixRow.version == version)
            )
        if body is None:
            return None
        stored = StoredQMatrix(qmatrix_from_json(body), version, tenant)
        self._remember(stored)
        return stored

    def _cached(self, key: tuple[str, str, int]) -> StoredQMatrix | None:
        with self._cache_lock:
            stored = self._cache.get(key)
            if stored is not None:
                self._cache.move_to_end(key)
            return stored

    def _remember(self, stored: StoredQMatrix) -> None:
        """Keep at most ``cache_items`` items' worth of parsed Q-matrices, least recently used out first."""
        size = len(stored.qmatrix.items)
        if size > self._cache_items:
            return
        with self._cache_lock:
            key = (stored.tenant, stored.id, stored.version)
            if key in self._cache:
                return
            self._cache[key] = stored
            self._cached_items += size
            while self._cached_items > self._cache_items:
                _, old = self._cache.popitem(last=False)
                self._cached_items -= len(old.qmatrix.items)

    def create(self, tenant: str, q: QMatrix) -> StoredQMatrix:
        """Register a new id for the tenant; raises :class:`QMatrixExists` when it is taken."""
        self._check_writable(q)
        with self.sessions.begin() as session:
            latest = self._latest(session, tenant, q.id)
            if latest is not None and latest.deleted_at is None:
                raise QMatrixExists(f"Q-matrix '{q.id}' exists; replace it with PUT /v1/qmatrices/{q.id}")
            version = (latest.version + 1) if latest is not None else 1  # ids are never reused with old versions
            session.add(self._row(tenant, q, version))
            bump(session, tenant)
        stored = StoredQMatrix(q, version, tenant)
        self._remember(stored)
        return stored

    def replace(self, tenant: str, q: QMatrix) -> StoredQMatrix | None:
        """Add a new version of an existing id; ``None`` when the tenant has no such Q-matrix."""
        self._check_writable(q)
        with self.sessions.begin() as session:
            latest = self._latest(session, tenant, q.id)
            if latest is None or latest.deleted_at is not None:
                return None
            session.add(self._row(tenant, q, latest.version + 1))
            bump(session, tenant)
        stored = StoredQMatrix(q, latest.version + 1, tenant)
        self._remember(stored)
        return stored

    def ensure(self, tenant: str, q: QMatrix) -> StoredQMatrix:
        """The tenant's current version when its rows equal ``q``'s, else a new version (datasets register so)."""
        current = self.get(tenant, q.id)
        if current is not None and qmatrix_to_json(current.qmatrix) == qmatrix_to_json(q):
            return current
        if current is None:
            try:
                return self.create(tenant, q)
            except QMatrixExists:  # created concurrently
                return self.ensure(tenant, q)
        replaced = self.replace(tenant, q)
        assert replaced is not None
        return replaced

    def delete(self, tenant: str, qid: str) -> bool:
        if qid in self._builtin:
            return False
        with self.sessions.begin() as session:
            result = session.execute(
                update(QMatrixRow)
                .where(QMatrixRow.tenant == tenant, QMatrixRow.id == qid, QMatrixRow.deleted_at.is_(None))
                .values(deleted_at=time.time())
            )
            if result.rowcount:
                bump(session, tenant)
        return bool(result.rowcount)

    def ids(self, tenant: str) -> list[str]:
        with self.sessions() as session:
            stored = session.scalars(
                select(QMatrixRow.id)
                .where(QMatrixRow.tenant == tenant, QMatrixRow.deleted_at.is_(None))
                .group_by(QMatrixRow.id)
                .order_by(QMatrixRow.id)
            ).all()
        return [*self._builtin, *stored]

    # -- internals ---------------------------------------------------------------------------
    def _check_writable(self, q: QMatrix) -> None:
        if not self.valid_id(q.id):
            raise ValueError(f"id {q.id!r}: use 1-128 letters, digits, '.', '_' or '-', not '.' or '..'")
        if q.id in self._builtin:
            raise QMatrixExists(f"id {q.id!r} is a built-in Q-matrix and cannot be replaced")

    @staticmethod
    def _latest(session, tenant: str, qid: str) -> QMatrixRow | None:  # type: ignore[no-untyped-def]
        return session.scalars(
            select(QMatrixRow)
            .where(QMatrixRow.tenant == tenant, QMatrixRow.id == qid)
            .order_by(QMatrixRow.version.desc())
            .limit(1)
        ).first()

    @staticmethod
    def _row(tenant: str, q: QMatrix, version: int) -> QMatrixRow:
        return QMatrixRow(
            tenant=tenant, id=q.id, version=version, body_json=json.dumps(qmatrix_to_json(q)),
            n_items=len(q.items), n_concepts=len(q.concepts), created_at=time.time(),
        )


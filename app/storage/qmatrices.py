"""Q-matrices per tenant, versioned.

``create`` refuses an id the tenant already uses (:class:`QMatrixExists`, the API's 409);
``replace`` adds a new version, so calibrations and stored answers keep naming the exact rows
they were made with. Built-in Q-matrices (the example) live in memory, are readable by every
tenant, and no tenant can take their ids. Another tenant's Q-matrix is simply not found.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import sessionmaker

from app.db import SHARED_TENANT, QMatrixRow
from qmatrix import QMatrix, qmatrix_from_json, qmatrix_to_json

__all__ = ["QMatrixExists", "QMatrixStore", "StoredQMatrix"]

_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


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

    def __init__(self, sessions: sessionmaker) -> None:
        self.sessions = sessions
        self._builtin: dict[str, StoredQMatrix] = {}

    @staticmethod
    def valid_id(qid: str) -> bool:
        return bool(_SAFE_ID.match(qid))

    def register_builtin(self, q: QMatrix) -> None:
        self._builtin[q.id] = StoredQMatrix(q, 1, SHARED_TENANT)

    def is_builtin(self, qid: str) -> bool:
        return qid in self._builtin

    def get(self, tenant: str, qid: str, version: int | None = None) -> StoredQMatrix | None:
        """The tenant's Q-matrix (current version unless ``version``), a built-in, or ``None``."""
        if qid in self._builtin:
            builtin = self._builtin[qid]
            return builtin if version in (None, builtin.version) else None
        if not self.valid_id(qid):
            return None
        query = select(QMatrixRow).where(QMatrixRow.tenant == tenant, QMatrixRow.id == qid)
        query = query.where(QMatrixRow.version == version) if version is not None else query.where(
            QMatrixRow.deleted_at.is_(None)
        ).order_by(QMatrixRow.version.desc()).limit(1)
        with self.sessions() as session:
            row = session.scalars(query).first()
        return StoredQMatrix(qmatrix_from_json(row.body_json), row.version, tenant) if row else None

    def create(self, tenant: str, q: QMatrix) -> StoredQMatrix:
        """Register a new id for the tenant; raises :class:`QMatrixExists` when it is taken."""
        self._check_writable(q)
        with self.sessions.begin() as session:
            latest = self._latest(session, tenant, q.id)
            if latest is not None and latest.deleted_at is None:
                raise QMatrixExists(f"Q-matrix '{q.id}' exists; replace it with PUT /v1/qmatrices/{q.id}")
            version = (latest.version + 1) if latest is not None else 1  # ids are never reused with old versions
            session.add(self._row(tenant, q, version))
        return StoredQMatrix(q, version, tenant)

    def replace(self, tenant: str, q: QMatrix) -> StoredQMatrix | None:
        """Add a new version of an existing id; ``None`` when the tenant has no such Q-matrix."""
        self._check_writable(q)
        with self.sessions.begin() as session:
            latest = self._latest(session, tenant, q.id)
            if latest is None or latest.deleted_at is not None:
                return None
            session.add(self._row(tenant, q, latest.version + 1))
        return StoredQMatrix(q, latest.version + 1, tenant)

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
            raise ValueError(f"id {q.id!r}: use 1-128 letters, digits, '.', '_' or '-'")
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


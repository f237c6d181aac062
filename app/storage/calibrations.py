"""Calibration records per tenant, each naming the Q-matrix version it was fitted on.

A tenant sees its own records and the shared ones (:data:`app.db.SHARED_TENANT`: the
first-start calibration of the built-in example). "The newest calibration for a Q-matrix" is
the tenant's newest for that exact Q-matrix version, else the newest shared one; another
tenant's records never apply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from app.db import SHARED_TENANT, CalibrationRow
from app.storage.generations import bump
from calibration import CalibrationRecord

__all__ = ["CalibrationStore", "StoredCalibration"]


@dataclass(frozen=True)
class StoredCalibration:
    record: CalibrationRecord
    tenant: str
    qmatrix_version: int

    @property
    def shared(self) -> bool:
        return self.tenant == SHARED_TENANT


class CalibrationStore:
    def __init__(self, sessions: sessionmaker) -> None:
        self.sessions = sessions

    def next_version(self, tenant: str, qmatrix_id: str) -> int:
        with self.sessions() as session:
            current = session.scalar(
                select(func.max(CalibrationRow.version)).where(
                    CalibrationRow.tenant == tenant, CalibrationRow.qmatrix_id == qmatrix_id
                )
            )
        return (current or 0) + 1

    def save(self, record: CalibrationRecord, *, tenant: str, qmatrix_version: int) -> StoredCalibration:
        with self.sessions.begin() as session:
            session.merge(
                CalibrationRow(
                    id=record.id, tenant=tenant, qmatrix_id=record.qmatrix_id, qmatrix_version=qmatrix_version,
                    version=record.version, record_json=json.dumps(record.to_json()), created_at=record.created_at,
                )
            )
            bump(session, tenant)
        return StoredCalibration(record, tenant, qmatrix_version)

    @staticmethod
    def _stored(row: CalibrationRow | None) -> StoredCalibration | None:
        if row is None:
            return None
        return StoredCalibration(CalibrationRecord.from_json(json.loads(row.record_json)), row.tenant, row.qmatrix_version)

    def get(self, tenant: str, cid: str) -> StoredCalibration | None:
        """The record if the tenant may see it (its own, or shared)."""
        with self.sessions() as session:
            row = session.get(CalibrationRow, cid)
        return self._stored(row) if row is not None and row.tenant in (tenant, SHARED_TENANT) else None

    def latest_for(self, tenant: str, qmatrix_id: str, qmatrix_version: int) -> StoredCalibration | None:
        with self.sessions() as session:
            for owner in (tenant, SHARED_TENANT):
                row = session.scalars(
                    select(CalibrationRow)
                    .where(
                        CalibrationRow.tenant == owner,
                        CalibrationRow.qmatrix_id == qmatrix_id,
                        CalibrationRow.qmatrix_version == qmatrix_version,
                    )
                    .order_by(CalibrationRow.version.desc())
                    .limit(1)
                ).first()
                if row is not None:
                    return self._stored(row)
        return None

    def list(self, tenant: str, qmatrix_id: str | None = None) -> list[StoredCalibration]:
        with self.sessions() as session:
            query = (
                select(CalibrationRow)
                .where(CalibrationRow.tenant.in_((tenant, SHARED_TENANT)))
                .order_by(CalibrationRow.qmatrix_id, CalibrationRow.version)
            )
            if qmatrix_id is not None:
                query = query.where(CalibrationRow.qmatrix_id == qmatrix_id)
            return [s for s in (self._stored(row) for row in session.scalars(query)) if s is not None]

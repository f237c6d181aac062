"""Persistent stores: registered Q-matrices (JSON files under ``state_dir``) and calibration
records (SQLite, see ``app.db``).

Writes go to a temporary file that is renamed into place, so a crash never leaves a
half-written record.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from app.db import CalibrationRow
from calibration import CalibrationRecord
from qmatrix import QMatrix, qmatrix_from_json, qmatrix_to_json

__all__ = ["CalibrationStore", "QMatrixStore"]

_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def _atomic_write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class QMatrixStore:
    """Q-matrices by id. Built-in ones (the example) live in memory and cannot be overwritten."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "qmatrices"
        self._builtin: dict[str, QMatrix] = {}

    @staticmethod
    def valid_id(qid: str) -> bool:
        return bool(_SAFE_ID.match(qid))

    def register_builtin(self, q: QMatrix) -> None:
        self._builtin[q.id] = q

    def is_builtin(self, qid: str) -> bool:
        return qid in self._builtin

    def save(self, q: QMatrix) -> None:
        if not self.valid_id(q.id):
            raise ValueError(f"id {q.id!r}: use 1-128 letters, digits, '.', '_' or '-'")
        if q.id in self._builtin:
            raise ValueError(f"id {q.id!r} is a built-in Q-matrix and cannot be replaced")
        _atomic_write(self.folder / f"{q.id}.json", qmatrix_to_json(q))

    def get(self, qid: str) -> QMatrix | None:
        if qid in self._builtin:
            return self._builtin[qid]
        if not self.valid_id(qid):
            return None
        path = self.folder / f"{qid}.json"
        return qmatrix_from_json(path.read_text(encoding="utf-8")) if path.is_file() else None

    def ids(self) -> list[str]:
        stored = sorted(p.stem for p in self.folder.glob("*.json")) if self.folder.is_dir() else []
        return [*self._builtin, *stored]


class CalibrationStore:
    """Versioned calibration records in SQLite; ``latest_for`` picks the newest for a Q-matrix."""

    def __init__(self, sessions: sessionmaker) -> None:
        self.sessions = sessions

    def next_version(self, qmatrix_id: str) -> int:
        with self.sessions() as session:
            current = session.scalar(
                select(func.max(CalibrationRow.version)).where(CalibrationRow.qmatrix_id == qmatrix_id)
            )
        return (current or 0) + 1

    def save(self, record: CalibrationRecord) -> None:
        with self.sessions.begin() as session:
            session.merge(
                CalibrationRow(
                    id=record.id,
                    qmatrix_id=record.qmatrix_id,
                    version=record.version,
                    record_json=json.dumps(record.to_json()),
                    created_at=record.created_at,
                )
            )

    @staticmethod
    def _record(row: CalibrationRow | None) -> CalibrationRecord | None:
        return CalibrationRecord.from_json(json.loads(row.record_json)) if row else None

    def get(self, cid: str) -> CalibrationRecord | None:
        with self.sessions() as session:
            return self._record(session.get(CalibrationRow, cid))

    def latest_for(self, qmatrix_id: str) -> CalibrationRecord | None:
        with self.sessions() as session:
            row = session.scalars(
                select(CalibrationRow)
                .where(CalibrationRow.qmatrix_id == qmatrix_id)
                .order_by(CalibrationRow.version.desc())
                .limit(1)
            ).first()
            return self._record(row)

    def list(self, qmatrix_id: str | None = None) -> list[CalibrationRecord]:
        with self.sessions() as session:
            query = select(CalibrationRow).order_by(CalibrationRow.qmatrix_id, CalibrationRow.version)
            if qmatrix_id is not None:
                query = query.where(CalibrationRow.qmatrix_id == qmatrix_id)
            return [r for r in (self._record(row) for row in session.scalars(query)) if r is not None]

"""Persistent stores for registered Q-matrices and calibration records (JSON files under ``state_dir``).

Writes go to a temporary file that is renamed into place, so a crash never leaves a
half-written record.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict
from pathlib import Path

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
    """Calibration records by id; ``latest_for`` picks the newest for a Q-matrix."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "calibrations"

    def save(self, record: CalibrationRecord) -> None:
        _atomic_write(self.folder / f"{record.id}.json", asdict(record))

    def get(self, cid: str) -> CalibrationRecord | None:
        if not _SAFE_ID.match(cid):
            return None
        path = self.folder / f"{cid}.json"
        return CalibrationRecord(**json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None

    def latest_for(self, qmatrix_id: str) -> CalibrationRecord | None:
        if not self.folder.is_dir():
            return None
        records = [CalibrationRecord(**json.loads(p.read_text(encoding="utf-8"))) for p in self.folder.glob("*.json")]
        matching = [r for r in records if r.qmatrix_id == qmatrix_id]
        return max(matching, key=lambda r: r.created_at) if matching else None

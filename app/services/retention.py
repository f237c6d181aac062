"""Retention: the maintenance loop purges what each tenant's policy says has expired (README "Student data").

* **Released diagnoses** older than ``diagnoses_days``: the stored answer and request fingerprint of each charge are
  set null (``privacy.ledger.records.purge_released``); the spend stays, so the budget is never reset, and so does
  the label of a group release (``GROUP_SOURCES``: which calibration or cohort report spent the ε).
* **Job inputs** of jobs finished more than ``job_inputs_days`` ago: every calibration record (keyed student id,
  responses, truth) becomes ``null`` and the per-student results are deleted; the job's status, metrics and the
  calibration it produced stay.
* **Uploaded responses**: a CSV in ``<state_dir>/uploads`` whose train job has ended (succeeded, failed or
  cancelled: its job or its cancel deletes it, this catches a worker that died in between), or older than
  ``responses_days`` (one whose job never ends, or that no job owns), is deleted. A job resumed after that fails
  saying its upload is gone. The keyed student hashes a train job lists for its upload go with its job inputs.

Every pass is idempotent, so workers purging at the same time do no harm. ``purge(now=...)`` takes the time, so a
test purges "31 days later" without waiting.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Connection, delete, exists, or_, select, update
from sqlalchemy.orm import sessionmaker

from app.db import JobItemRow, JobRow, engine_of
from app.schemas.students import RetentionPolicy
from app.services.students import GROUP_SOURCES
from app.storage.retention import DAY_S, RetentionStore
from privacy import PrivacyLedger
from privacy.ledger.records import purge_released

__all__ = ["RetentionPurger"]

log = logging.getLogger("fedcd.retention")
FINISHED = ("succeeded", "failed", "cancelled")


class RetentionPurger:
    def __init__(
        self, *, sessions: sessionmaker, ledger: PrivacyLedger | None, retention: RetentionStore, uploads: Path
    ) -> None:
        self.sessions, self.ledger, self.retention, self.uploads = sessions, ledger, retention, uploads

    def purge(self, now: float | None = None) -> dict[str, int]:
        """One pass over every tenant; what was removed, by kind."""
        now = time.time() if now is None else now
        custom = self.retention.custom()
        removed = {"diagnoses": self._diagnoses(now, custom), **self._job_inputs(now, custom),
                   "uploads": self._uploads(now, custom)}
        if any(removed.values()):
            log.info("retention: purged %s", removed)
        return removed

    def _policy(self, tenant: str, custom: dict[str, RetentionPolicy]) -> RetentionPolicy:
        return custom.get(tenant, self.retention.default)

    def _ledger_write(self) -> contextlib.AbstractContextManager[Connection]:
        return self.ledger.engines.write() if self.ledger is not None else engine_of(self.sessions).begin()

    def _diagnoses(self, now: float, custom: dict[str, RetentionPolicy]) -> int:
        removed = 0
        with self._ledger_write() as conn:
            for tenant, policy in custom.items():
                if policy.diagnoses_days is not None:
                    removed += purge_released(conn, before=now - policy.diagnoses_days * DAY_S, tenant=tenant,
                                              labels=GROUP_SOURCES)
            days = self.retention.default.diagnoses_days
            if days is not None:
                removed += purge_released(conn, before=now - days * DAY_S, exclude=custom.keys(), labels=GROUP_SOURCES)
        return removed

    def _job_inputs(self, now: float, custom: dict[str, RetentionPolicy]) -> dict[str, int]:
        removed = {"job_inputs": 0, "job_results": 0}
        days = [p.job_inputs_days for p in (self.retention.default, *custom.values()) if p.job_inputs_days is not None]
        if not days:
            return removed
        latest = _iso(now - min(days) * DAY_S)  # no tenant's cutoff is later: candidates only
        with self.sessions.begin() as session:
            jobs = session.execute(select(JobRow.id, JobRow.tenant, JobRow.updated_at, JobRow.request_json).where(
                JobRow.status.in_(FINISHED), JobRow.updated_at < latest,
                or_(JobRow.request_json.like('%"responses"%'), exists().where(JobItemRow.job_id == JobRow.id)),
            )).all()
            for job_id, tenant, updated_at, request_json in jobs:
                keep = self._policy(tenant, custom).job_inputs_days
                if keep is None or updated_at >= _iso(now - keep * DAY_S):
                    continue
                request = json.loads(request_json)
                records = request.get("records") if isinstance(request, dict) else None
                listed = request.get("student_rows") if isinstance(request, dict) else None
                if isinstance(records, list) and any(r is not None for r in records) or listed:
                    if isinstance(records, list):
                        removed["job_inputs"] += sum(1 for r in records if r is not None)
                        request["records"] = [None] * len(records)  # positions kept, like an erasure
                    if listed:
                        request["student_rows"] = {}  # an upload's students (keyed): its file is gone with its job
                    session.execute(update(JobRow).where(JobRow.id == job_id).values(
                        request_json=json.dumps(request), updated_at=JobRow.updated_at))
                removed["job_results"] += session.execute(
                    delete(JobItemRow).where(JobItemRow.job_id == job_id)).rowcount or 0
        return removed

    def _uploads(self, now: float, custom: dict[str, RetentionPolicy]) -> int:
        if not self.uploads.is_dir():
            return 0
        removed = 0
        for path in self.uploads.glob("*.csv"):
            with self.sessions() as session:
                owner = session.execute(select(JobRow.tenant, JobRow.status).where(
                    JobRow.kind == "train", JobRow.request_json.like(f'%"{path.name}"%')).limit(1)).first()
            tenant = owner[0] if owner is not None else None
            keep = self._policy(tenant, custom).responses_days if tenant is not None else \
                self.retention.default.responses_days
            try:
                expired = (owner is not None and owner[1] in FINISHED) or (
                    keep is not None and path.stat().st_mtime < now - keep * DAY_S)
            except FileNotFoundError:  # its job ended meanwhile
                continue
            if expired:
                path.unlink(missing_ok=True)
                removed += 1
        return removed


def _iso(ts: float) -> str:
    """An epoch time in the form ``app.db.utcnow`` stores, so the two compare as strings."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")

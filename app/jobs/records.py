"""What the job tables say, read by tenant: a job, a page of jobs, a tenant's active ones, a calibration's stored
results, a job's history. The reading half of :class:`~app.jobs.runner.JobRunner` (which claims and runs jobs);
kept apart so each file says one thing. Every read opens its own short session; another tenant's job is not found.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import sessionmaker

from app.db import JobEventRow, JobItemRow, JobRow
from app.jobs.quota import ACTIVE_STATES, active_jobs

__all__ = ["JobRecords"]


class JobRecords:
    """The reads of the job tables (:class:`~app.jobs.runner.JobRunner` is one, over its ``sessions``)."""

    sessions: sessionmaker

    def has_active(self, kind: str) -> bool:
        with self.sessions() as session:
            return session.scalar(
                select(JobRow.id).where(JobRow.kind == kind, JobRow.status.in_(("queued", "running"))).limit(1)
            ) is not None

    def get(self, job_id: str, *, tenant: str) -> JobRow | None:
        """The tenant's job; another tenant's job is not found."""
        with self.sessions() as session:
            row = session.get(JobRow, job_id)
        return row if row is not None and row.tenant == tenant else None

    def page(
        self, tenant: str, *, limit: int, before: tuple[str, str] | None = None,
        kinds: Collection[str] = (), states: Collection[str] = (),
    ) -> list[JobRow]:
        """The tenant's jobs, newest first: at most ``limit``, older than ``before`` (a (created_at, id) keyset
        cursor: a job submitted meanwhile never shifts the pages), of the given kinds and states (none: all)."""
        query = select(JobRow).where(JobRow.tenant == tenant)
        if before is not None:
            created, job_id = before
            query = query.where(or_(JobRow.created_at < created, (JobRow.created_at == created) & (JobRow.id < job_id)))
        if kinds:
            query = query.where(JobRow.kind.in_(sorted(kinds)))
        if states:
            query = query.where(JobRow.status.in_(sorted(states)))
        with self.sessions() as session:
            return list(session.scalars(query.order_by(JobRow.created_at.desc(), JobRow.id.desc()).limit(limit)))

    def count_active(self, tenant: str) -> int:
        """The tenant's jobs not finished yet (queued, running, or cancelling)."""
        with self.sessions() as session:
            return active_jobs(session, tenant)

    def active_requests(self, tenant: str, kind: str) -> list[dict[str, Any]]:
        """The stored requests of the tenant's jobs of ``kind`` not finished yet (e.g. the uploads they hold)."""
        with self.sessions() as session:
            rows = session.scalars(select(JobRow.request_json).where(
                JobRow.tenant == tenant, JobRow.kind == kind, JobRow.status.in_(ACTIVE_STATES)))
            return [json.loads(r) for r in rows]

    def calibration_results(self, calibration_id: str, *, tenants: Collection[str], limit: int) -> list[str]:
        """The stored unit results (JSON) of the job that fitted the calibration, in order: at most ``limit``, ``[]``
        once retention removed them (or when it was fitted elsewhere)."""
        with self.sessions() as session:
            job_id = session.scalar(select(JobRow.id).where(
                JobRow.calibration_id == calibration_id, JobRow.tenant.in_(sorted(tenants))).limit(1))
            if job_id is None:
                return []
            return list(session.scalars(select(JobItemRow.result_json).where(JobItemRow.job_id == job_id)
                                        .order_by(JobItemRow.idx).limit(limit)))

    def history(self, job_id: str) -> list[JobEventRow]:
        with self.sessions() as session:
            return list(session.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.seq)))

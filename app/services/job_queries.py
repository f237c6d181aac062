"""What a tenant reads of its background jobs (``/v1/jobs``, ``/v1/calibrate/{id}``) and its cancel: the job
runner's rows as API views. Another tenant's job is unknown (404), never forbidden."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection

from app.db import JobRow
from app.errors import InputError
from app.pagination import Page
from app.schemas import JobEvent, JobList, JobProgress, JobPublic
from app.services.jobs import JobRunner

__all__ = ["JobQueries"]


def _unknown(job_id: str) -> InputError:
    return InputError(("path", "job_id"), [f"unknown job id '{job_id}'"], status_code=404)


class JobQueries:
    def __init__(self, jobs: JobRunner) -> None:
        self.jobs = jobs

    def _public(self, row: JobRow, *, with_history: bool) -> JobPublic:
        history = self.jobs.history(row.id) if with_history else []
        return JobPublic(
            job_id=row.id, kind=row.kind, status=row.status,  # type: ignore[arg-type]  # a stored state
            progress=JobProgress(done=row.done, total=row.total, failed_entities=json.loads(row.failed_entities_json)),
            calibration_id=row.calibration_id, metrics=json.loads(row.metrics_json), notes=json.loads(row.notes_json),
            error=row.error, resumed=row.resumed,
            history=[JobEvent(at=e.at, status=e.status, worker=e.worker, message=e.message) for e in history],
            created_at=row.created_at, updated_at=row.updated_at,
        )

    async def get(self, job_id: str, tenant: str, *, kind: str | None = None) -> JobPublic:
        """The tenant's job with its history; 404 when unknown, another tenant's, or not of ``kind``."""
        row = await asyncio.to_thread(self.jobs.get, job_id, tenant=tenant)
        if row is None or (kind is not None and row.kind != kind):
            raise _unknown(job_id)
        return await asyncio.to_thread(self._public, row, with_history=True)

    async def page(self, tenant: str, page: Page, *, kinds: Collection[str], states: Collection[str]) -> JobList:
        """The tenant's jobs, newest first, without their histories; the cursor is (created_at, id) of the last."""
        before = page.after
        if before is not None and not (len(before) == 2 and all(isinstance(part, str) for part in before)):
            raise InputError(("query", "cursor"), ["this cursor belongs to another list"])
        rows = await asyncio.to_thread(
            self.jobs.page, tenant, limit=page.limit + 1, before=before,  # type: ignore[arg-type]  # checked above
            kinds=kinds, states=states,
        )
        more = len(rows) > page.limit
        rows = rows[: page.limit]
        data = [self._public(row, with_history=False) for row in rows]
        return JobList(**page.envelope(data, (rows[-1].created_at, rows[-1].id) if more else None))

    async def cancel(self, job_id: str, tenant: str, *, by: str) -> JobPublic:
        """Cancel the tenant's job (404 when unknown; 409 when it has already finished) and return it as it is now."""
        outcome, cancelled = await self.jobs.cancel(job_id, tenant=tenant, by=by)
        if outcome is None:
            raise _unknown(job_id)
        if not cancelled and outcome != "cancelling":  # a repeated cancel of a job still stopping is accepted again
            raise InputError(("path", "job_id"), [f"job '{job_id}' has already finished ({outcome})"], status_code=409)
        return await self.get(job_id, tenant)

"""What a tenant reads of its background jobs (``/v1/jobs``, ``/v1/calibrate/{id}``, the console's job pages) and its
cancel: the job runner's rows as API views. Another tenant's job is unknown (``NotFound``), never forbidden."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.db import SHARED_TENANT, JobRow
from app.domain_errors import Conflict, InvalidInput, NotFound
from app.jobs.runner import JobRunner
from app.schemas import JobEvent, JobList, JobProgress, JobPublic

if TYPE_CHECKING:  # app.pagination imports app.schemas' package, which imports it back: for annotations only
    from app.pagination import Page

__all__ = ["JobQueries", "JobSummary"]

Cursor = tuple[str, str]  # (created_at, id) of the last job of a page


@dataclass(frozen=True)
class JobSummary:
    """A job as the console lists it: its API view and what it works on, in a few words (never its records: they
    hold students)."""

    job: JobPublic
    summary: str


def _unknown(job_id: str) -> NotFound:
    return NotFound(("job_id",), [f"unknown job id '{job_id}'"])


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

    def _rows(self, tenant: str, *, limit: int, before: Cursor | None, kinds: Collection[str] = (),
              states: Collection[str] = ()) -> tuple[list[JobRow], Cursor | None]:
        rows = self.jobs.page(tenant, limit=limit + 1, before=before, kinds=kinds, states=states)
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (rows[-1].created_at, rows[-1].id) if more else None

    async def get(self, job_id: str, tenant: str, *, kind: str | None = None) -> JobPublic:
        """The tenant's job with its history; ``NotFound`` when unknown, another tenant's, or not of ``kind``."""
        row = await asyncio.to_thread(self.jobs.get, job_id, tenant=tenant)
        if row is None or (kind is not None and row.kind != kind):
            raise _unknown(job_id)
        return await asyncio.to_thread(self._public, row, with_history=True)

    async def page(self, tenant: str, page: Page, *, kinds: Collection[str], states: Collection[str]) -> JobList:
        """The tenant's jobs, newest first, without their histories; the cursor is (created_at, id) of the last."""
        before = page.after
        if before is not None and not (len(before) == 2 and all(isinstance(part, str) for part in before)):
            raise InvalidInput(("cursor",), ["this cursor belongs to another list"])
        rows, following = await asyncio.to_thread(
            self._rows, tenant, limit=page.limit, before=before,  # type: ignore[arg-type]  # checked above
            kinds=kinds, states=states,
        )
        data = [self._public(row, with_history=False) for row in rows]
        return JobList(**page.envelope(data, following))

    async def summaries(
        self, tenant: str, *, limit: int, before: Cursor | None
    ) -> tuple[list[JobSummary], Cursor | None]:
        """The tenant's jobs, newest first, without their histories, and the cursor of the next page (None: the
        last)."""
        rows, following = await asyncio.to_thread(self._rows, tenant, limit=limit, before=before)
        return [JobSummary(self._public(row, with_history=False), _summary(row)) for row in rows], following

    async def summary(self, job_id: str, tenant: str) -> JobSummary | None:
        """The tenant's job with its history; None when unknown or another tenant's."""
        row = await asyncio.to_thread(self.jobs.get, job_id, tenant=tenant)
        if row is None:
            return None
        return JobSummary(await asyncio.to_thread(self._public, row, with_history=True), _summary(row))

    async def active_count(self, tenant: str) -> int:
        """How many of the tenant's jobs have not finished yet."""
        return await asyncio.to_thread(self.jobs.count_active, tenant)

    async def calibration_results(self, tenant: str, calibration_id: str, *, limit: int) -> list[str]:
        """The stored unit results (JSON, in order, at most ``limit``) of the job that fitted the tenant's (or the
        shared) calibration; ``[]`` once retention removed them."""
        return await asyncio.to_thread(self.jobs.calibration_results, calibration_id,
                                       tenants=(tenant, SHARED_TENANT), limit=limit)

    async def cancel(self, job_id: str, tenant: str, *, by: str) -> JobPublic:
        """Cancel the tenant's job (``NotFound`` when unknown; ``Conflict`` when it has already finished) and return it
        as it is now. A queued job is ``cancelled`` at once, a running one ``cancelling`` until its worker stops it."""
        outcome, cancelled = await self.jobs.cancel(job_id, tenant=tenant, by=by)
        if outcome is None:
            raise _unknown(job_id)
        if not cancelled and outcome != "cancelling":  # a repeated cancel of a job still stopping is accepted again
            raise Conflict(("job_id",), [f"job '{job_id}' has already finished ({outcome})"])
        return await self.get(job_id, tenant)


def _summary(row: JobRow) -> str:
    """What a job works on, in a few words (never its records: they hold students)."""
    try:
        request = json.loads(row.request_json)
    except ValueError:
        return ""
    if row.kind == "calibrate":
        dataset = request.get("dataset") or {}
        on = (f"{dataset.get('name')} dataset" + (f", at most {dataset['max_students']} students"
                                                  if dataset.get("max_students") else "")
              if dataset else f"{len(request.get('records') or [])} records")
        return f"{request.get('method') or 'default'} calibration of {request.get('qmatrix_id') or 'the example'} on {on}"
    if row.kind == "train":
        return f"upload and train {request.get('qmatrix_id', '')}".strip()
    return row.kind

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

    async def _found(self, job_id: str, tenant: str, *, kind: str | None = None) -> tuple[JobRow, JobPublic]:
        """The tenant's job row and its view with its history, in one worker-thread hop; ``NotFound`` when unknown,
        another tenant's, or not of ``kind``."""
        def read() -> tuple[JobRow, JobPublic] | None:
            row = self.jobs.get(job_id, tenant=tenant)
            if row is None or (kind is not None and row.kind != kind):
                return None
            return row, self._public(row, with_history=True)

        found = await asyncio.to_thread(read)
        if found is None:
            raise _unknown(job_id)
        return found

    async def _listed(self, tenant: str, *, limit: int, before: Cursor | None, kinds: Collection[str] = (),
                      states: Collection[str] = ()) -> tuple[list[tuple[JobRow, JobPublic]], Cursor | None]:
        """The tenant's jobs, newest first, with their views without their histories, and the cursor of the next
        page (None: the last), in one worker-thread hop."""
        def read() -> tuple[list[tuple[JobRow, JobPublic]], Cursor | None]:
            rows = self.jobs.page(tenant, limit=limit + 1, before=before, kinds=kinds, states=states)
            more = len(rows) > limit
            rows = rows[:limit]
            following = (rows[-1].created_at, rows[-1].id) if more else None
            return [(row, self._public(row, with_history=False)) for row in rows], following

        return await asyncio.to_thread(read)

    async def get(self, job_id: str, tenant: str, *, kind: str | None = None) -> JobPublic:
        """The tenant's job with its history; ``NotFound`` when unknown, another tenant's, or not of ``kind``."""
        _, public = await self._found(job_id, tenant, kind=kind)
        return public

    async def page(self, tenant: str, page: Page, *, kinds: Collection[str], states: Collection[str]) -> JobList:
        """The tenant's jobs, newest first, without their histories; the cursor is (created_at, id) of the last."""
        before = page.after
        if before is not None and not (len(before) == 2 and all(isinstance(part, str) for part in before)):
            raise InvalidInput(("cursor",), ["this cursor belongs to another list"])
        found, following = await self._listed(
            tenant, limit=page.limit, before=before, kinds=kinds, states=states,  # type: ignore[arg-type]  # checked
        )
        return JobList(**page.envelope([public for _, public in found], following))

    async def summaries(
        self, tenant: str, *, limit: int, before: Cursor | None
    ) -> tuple[list[JobSummary], Cursor | None]:
        """:meth:`page` as the console lists it, each job with what it works on."""
        found, following = await self._listed(tenant, limit=limit, before=before)
        return [JobSummary(public, _summary(row)) for row, public in found], following

    async def summary(self, job_id: str, tenant: str) -> JobSummary | None:
        """:meth:`get` as the console shows it, with what the job works on; None when unknown or another tenant's."""
        try:
            row, public = await self._found(job_id, tenant)
        except NotFound:
            return None
        return JobSummary(public, _summary(row))

    async def active_count(self, tenant: str) -> int:
        """How many of the tenant's jobs have not finished yet."""
        return await asyncio.to_thread(self.jobs.count_active, tenant)

    async def calibration_results(self, tenant: str, calibration_id: str, *, limit: int,
                                  shared: bool = False) -> list[str]:
        """The stored unit results (JSON, in order, at most ``limit``) of the job that fitted the tenant's calibration,
        or with ``shared`` the operator's shared one (the caller decides the shared tenant's students may be shown:
        SIMULATED ones); ``[]`` once retention removed them."""
        return await asyncio.to_thread(self.jobs.calibration_results, calibration_id,
                                       tenants=(SHARED_TENANT,) if shared else (tenant,), limit=limit)

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

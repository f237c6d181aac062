"""Background jobs that survive restarts.

A job row is written before the job starts; each finished unit (a student) is written as
it completes; on start-up, jobs left ``queued`` or ``running`` by a previous process are
resumed from their stored request, skipping finished units — or marked ``failed`` with
the reason when they cannot be resumed. Nothing is silently lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from app.db import JobItemRow, JobRow

__all__ = ["JobContext", "JobRunner"]

log = logging.getLogger("fedcd.jobs")


class JobContext:
    """What a running job can do: read its finished units, record new ones, report progress."""

    def __init__(self, sessions: sessionmaker, job_id: str, tenant: str) -> None:
        self.sessions, self.job_id, self.tenant = sessions, job_id, tenant

    def finished_items(self) -> dict[int, Any]:
        with self.sessions() as session:
            rows = session.scalars(select(JobItemRow).where(JobItemRow.job_id == self.job_id))
            return {row.idx: json.loads(row.result_json) for row in rows}

    def record_item(self, idx: int, result: Any, *, failed_entities: dict[str, int]) -> None:
        with self.sessions.begin() as session:
            session.merge(JobItemRow(job_id=self.job_id, idx=idx, result_json=json.dumps(result)))
            job = session.get(JobRow, self.job_id)
            assert job is not None
            job.done = session.query(JobItemRow).filter(JobItemRow.job_id == self.job_id).count()
            job.failed_entities_json = json.dumps(failed_entities)

    def set_total(self, total: int) -> None:
        self._update(total=total)

    def _update(self, **fields: Any) -> None:
        with self.sessions.begin() as session:
            job = session.get(JobRow, self.job_id)
            assert job is not None
            for key, value in fields.items():
                setattr(job, key, value)


JobHandler = Callable[[dict[str, Any], JobContext], Awaitable[dict[str, Any]]]


class JobRunner:
    """Runs job handlers as asyncio tasks; the handler returns the fields to store on success."""

    def __init__(self, sessions: sessionmaker) -> None:
        self.sessions = sessions
        self.handlers: dict[str, JobHandler] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def register(self, kind: str, handler: JobHandler) -> None:
        self.handlers[kind] = handler

    def submit(self, kind: str, request: dict[str, Any], *, tenant: str) -> str:
        job_id = uuid.uuid4().hex
        with self.sessions.begin() as session:
            session.add(JobRow(id=job_id, tenant=tenant, kind=kind, status="queued", request_json=json.dumps(request)))
        self._start(job_id, kind, request, tenant)
        return job_id

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

    def _start(self, job_id: str, kind: str, request: dict[str, Any], tenant: str) -> None:
        self._tasks[job_id] = asyncio.create_task(self._run(job_id, kind, request, tenant), name=f"job-{job_id}")

    async def _run(self, job_id: str, kind: str, request: dict[str, Any], tenant: str) -> None:
        context = JobContext(self.sessions, job_id, tenant)
        context._update(status="running")
        try:
            outcome = await self.handlers[kind](request, context)
        except asyncio.CancelledError:
            # Shutting down: leave the job 'running'; the next start resumes it.
            raise
        except Exception as exc:
            log.exception("job %s failed", job_id)
            context._update(status="failed", error=f"{type(exc).__name__}: {exc}")
        else:
            context._update(
                status="succeeded",
                calibration_id=outcome.get("calibration_id"),
                metrics_json=json.dumps(outcome.get("metrics", {})),
                notes_json=json.dumps(outcome.get("notes", [])),
            )
        finally:
            self._tasks.pop(job_id, None)

    def resume_incomplete(self) -> list[str]:
        """Restart the jobs a previous process left unfinished; fail those that cannot run."""
        with self.sessions() as session:
            rows = list(session.scalars(select(JobRow).where(JobRow.status.in_(("queued", "running")))))
        resumed = []
        for row in rows:
            if row.id in self._tasks:
                continue
            if row.kind not in self.handlers:
                JobContext(self.sessions, row.id, row.tenant)._update(
                    status="failed", error=f"cut off by a restart; job kind '{row.kind}' is no longer available"
                )
                continue
            JobContext(self.sessions, row.id, row.tenant)._update(resumed=row.resumed + 1)
            log.info("resuming job %s (%s) after a restart: %d/%d done", row.id, row.kind, row.done, row.total)
            self._start(row.id, row.kind, json.loads(row.request_json), row.tenant)
            resumed.append(row.id)
        return resumed

    async def wait(self, job_id: str) -> None:
        task = self._tasks.get(job_id)
        if task is not None:
            await asyncio.shield(task)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

"""What a running job sees of itself (:class:`JobContext`): its finished units, its progress, and whether a user
cancelled it. The runner that claims and runs jobs is ``app.jobs.runner``."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from app.db import JobEventRow, JobItemRow, JobRow

__all__ = ["JobAbandoned", "JobCancelled", "JobContext", "JobHandler"]


class JobCancelled(Exception):
    """Raised inside a job's worker thread once the job was cancelled: the thread stops at its next check (a task's
    cancel does not reach code running in a thread)."""


class JobContext:
    """What a running job can do: read its finished units, record new ones, report progress."""

    def __init__(self, sessions: sessionmaker, job_id: str, tenant: str) -> None:
        self.sessions, self.job_id, self.tenant = sessions, job_id, tenant
        # Set before the runner cancels the job's task for a user's cancel (not at shutdown): a handler that keeps
        # resources for a resumed run (the training upload) frees them when this is set.
        self.cancel_requested = False

    def check_cancelled(self) -> None:
        """For work running in a thread: stop here if the job was cancelled."""
        if self.cancel_requested:
            raise JobCancelled(f"job {self.job_id} was cancelled")

    def finished_items(self) -> dict[int, Any]:
        with self.sessions() as session:
            rows = session.scalars(select(JobItemRow).where(JobItemRow.job_id == self.job_id))
            return {row.idx: json.loads(row.result_json) for row in rows}

    def record_item(self, idx: int, result: Any, *, failed_entities: dict[str, int]) -> None:
        with self.sessions.begin() as session:
            session.merge(JobItemRow(job_id=self.job_id, idx=idx, result_json=json.dumps(result)))
            job = session.get(JobRow, self.job_id)
            assert job is not None
            job.done = session.scalar(select(func.count()).where(JobItemRow.job_id == self.job_id)) or 0
            job.failed_entities_json = json.dumps(failed_entities)
            job.heartbeat_at = time.time()

    def set_total(self, total: int) -> None:
        self._update(total=total)

    def step(self, done: int, message: str) -> None:
        """A job made of stages (not units): ``done`` of its total, and a history line saying what it is doing."""
        with self.sessions.begin() as session:
            job = session.get(JobRow, self.job_id)
            assert job is not None
            job.done, job.heartbeat_at = done, time.time()
            session.add(JobEventRow(job_id=self.job_id, status="running", worker=None, message=message))

    def _update(self, **fields: Any) -> None:
        with self.sessions.begin() as session:
            job = session.get(JobRow, self.job_id)
            assert job is not None
            for key, value in fields.items():
                setattr(job, key, value)


JobHandler = Callable[[dict[str, Any], JobContext], Awaitable[dict[str, Any]]]
# Called (in a worker thread) with the stored request of a job cancelled without its handler running.
JobAbandoned = Callable[[dict[str, Any]], None]

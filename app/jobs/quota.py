"""What one tenant may hold in the job queue at once: active jobs (``FEDCD_MAX_ACTIVE_JOBS``) and the bytes of its
training uploads waiting on disk (``FEDCD_TRAIN_MAX_STORED_BYTES``). Without them one tenant could queue thousands
of jobs (every other tenant's job waiting behind them) or fill the disk with uploads. Over a cap a request is
refused with 409 and ``Retry-After``: the same request succeeds once one of the tenant's jobs has finished."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from app.db import JobRow
from app.domain_errors import Conflict

__all__ = ["ACTIVE_STATES", "QUEUE_RETRY_AFTER_S", "QueueFull", "UploadsFull", "active_jobs", "fair_order"]

ACTIVE_STATES = ("queued", "running", "cancelling")  # not finished yet (cancelling: stopping after a cancel)

QUEUE_RETRY_AFTER_S = 30  # a job takes seconds to minutes: a client retrying on its own should not come back sooner


class QueueFull(Conflict):
    """The tenant has as many active jobs (queued, running or cancelling) as it may; nothing was queued."""

    retry_after_s = QUEUE_RETRY_AFTER_S

    def __init__(self, tenant: str, active: int, cap: int) -> None:
        super().__init__((), [
            f"tenant '{tenant}' has {active} active jobs (queued or running), the most FEDCD_MAX_ACTIVE_JOBS = {cap} "
            "allows: wait for one to finish, or cancel one (POST /v1/jobs/{job_id}/cancel)"])


class UploadsFull(Conflict):
    """The tenant's training uploads waiting on disk, with this one, would pass its cap; nothing was stored."""

    retry_after_s = QUEUE_RETRY_AFTER_S

    def __init__(self, tenant: str, stored: int, size: int, cap: int) -> None:
        super().__init__(("responses",), [
            f"tenant '{tenant}' has {stored} bytes of uploads waiting for their training jobs; this upload's {size} "
            f"bytes would pass FEDCD_TRAIN_MAX_STORED_BYTES = {cap}: wait for a training job to finish, or cancel "
            "one"])


def active_jobs(session: Session, tenant: str) -> int:
    """The tenant's jobs not finished yet."""
    return session.scalar(select(func.count()).where(JobRow.tenant == tenant, JobRow.status.in_(ACTIVE_STATES))) or 0


def fair_order() -> tuple[Any, ...]:
    """The order jobs are claimed in, fair across tenants: first the jobs of the tenants with the fewest jobs running
    (on any worker), each tenant's oldest first, so one tenant's long queue never holds another's first job behind it.
    A claimable ``running`` job (its worker died) does not count itself."""
    others = aliased(JobRow)
    running_of_tenant = (
        select(func.count()).where(others.tenant == JobRow.tenant, others.status.in_(("running", "cancelling")),
                                   others.id != JobRow.id)
        .correlate(JobRow).scalar_subquery()
    )
    return running_of_tenant, JobRow.created_at, JobRow.id

"""Background workers and the webhooks of finished jobs (``FEDCD_WORKER_*``, ``FEDCD_WEBHOOK*``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.webhooks import WebhookTarget

__all__ = ["JobSettings"]


class JobSettings(BaseModel):
    """How workers show they are alive, and where and how a finished job is announced."""

    worker_heartbeat_s: float = Field(default=5.0, gt=0, description="how often a worker shows it is alive")
    worker_stale_s: float = Field(
        default=30.0, gt=0, description="a worker silent this long is dead: its jobs and pending charges are taken over"
    )
    # What one tenant may hold in the queue (app.jobs.quota): more is refused with 409 and Retry-After.
    max_active_jobs: int = Field(
        default=8, ge=1, description="jobs (calibrations, trainings) one tenant may have queued or running at once",
    )
    # Webhooks (README "Webhooks"): set by the operator only, never through the API (the gateway posts where told).
    webhooks: dict[str, WebhookTarget] = Field(
        default_factory=dict, description="tenant (or * for every tenant without its own) -> {url, secret}: a signed "
        "POST when one of its jobs finishes",
    )
    webhook_attempts: int = Field(default=5, ge=1, le=20, description="tries of one webhook event, the first included")
    webhook_backoff_s: float = Field(
        default=1.0, gt=0, description="seconds before the first retry of a failed webhook; doubled each time (max 300)"
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, description="seconds one webhook POST may take")

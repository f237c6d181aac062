"""Accounting of what entities used (README "Cost"): recorded for ``GET /v1/usage`` and counted in the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.metrics import count_usage
from app.storage import UsageSource, UsageStore
from diagnosis import EntityOutcome

__all__ = ["account_usage"]


async def account_usage(
    store: UsageStore, tenant: str, source: UsageSource, outcomes: Sequence[EntityOutcome], *, job_id: str | None = None
) -> None:
    """Count one diagnosis's (or several's) entity outcomes in the metrics and record them (one insert)."""
    count_usage(tenant, outcomes)
    await asyncio.to_thread(store.record, tenant, source, outcomes, job_id=job_id)

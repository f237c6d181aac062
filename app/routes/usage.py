"""``GET /v1/usage``: what the caller's tenant's diagnoses used — entity calls, tokens, dollars, cache hits —
per entity and in total, since a given time (README "Cost")."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from app.deps import PrincipalDep, UsageStoreDep
from app.errors import InputError
from app.routes.responses import AUTH_ERRORS
from app.schemas import UsageReport

router = APIRouter(prefix="/v1/usage", tags=["usage"])

DEFAULT_WINDOW = timedelta(days=30)

_ERRORS = {**AUTH_ERRORS, 422: {"description": "`since` is not an ISO 8601 date-time, or an unknown query parameter"}}


@router.get("", response_model=UsageReport, responses=_ERRORS)
async def read_usage(
    usage: UsageStoreDep,
    principal: PrincipalDep,
    since: Annotated[
        datetime | None,
        Query(description="ISO 8601 date-time (no zone: UTC); default: 30 days ago"),
    ] = None,
) -> UsageReport:
    """The tenant's usage since `since`: every diagnosis (single, batch, cohort report, calibration student)."""
    if since is None:
        start = datetime.now(UTC) - DEFAULT_WINDOW
    else:
        try:
            start = (since if since.tzinfo is not None else since.replace(tzinfo=UTC)).astimezone(UTC)
        except OverflowError as exc:  # e.g. 0001-01-01T00:00+05:00 is before year 1 in UTC
            raise InputError(("query", "since"), [f"out of range in UTC: {exc}"]) from exc
    return await asyncio.to_thread(usage.report, principal.tenant, start)

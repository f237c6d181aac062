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
# date, time to the minute or finer, optional zone: the shapes of RFC 3339 / ISO 8601 that fromisoformat reads
_DATE_TIME = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?([Zz]|[+-]\d{2}:\d{2})?$"

_ERRORS = {**AUTH_ERRORS, 422: {"description": "`since` is not an ISO 8601 date-time, or an unknown query parameter"}}


@router.get("", response_model=UsageReport, responses=_ERRORS)
async def read_usage(
    usage: UsageStoreDep,
    principal: PrincipalDep,
    since: Annotated[
        str | None,
        Query(
            pattern=_DATE_TIME, json_schema_extra={"format": "date-time"},
            description="ISO 8601 date-time, e.g. 2026-11-01T00:00:00Z (no zone: UTC); default: 30 days ago",
        ),
    ] = None,
) -> UsageReport:
    """The tenant's usage since `since`: every diagnosis (single, batch, cohort report, calibration student)."""
    start = datetime.now(UTC) - DEFAULT_WINDOW if since is None else _parse_since(since)
    return await asyncio.to_thread(usage.report, principal.tenant, start)


def _parse_since(text: str) -> datetime:
    """An ISO 8601 date-time (never a bare number: pydantic would read that as a Unix time), in UTC."""
    try:
        parsed = datetime.fromisoformat(text.upper())  # RFC 3339 allows a lower-case t and z
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except ValueError as exc:
        raise InputError(("query", "since"), [f"not an ISO 8601 date-time: {exc}"]) from exc
    except OverflowError as exc:  # e.g. 0001-01-01T00:00+05:00 is before year 1 in UTC
        raise InputError(("query", "since"), [f"out of range in UTC: {exc}"]) from exc

"""Entity usage per tenant: one row per entity asked in a diagnosis, summed by ``GET /v1/usage``.

A diagnosis's rows go in with one ``INSERT`` (all its entities together), after the pipeline ran —
whether or not an entity answered: a failed call is a call (with the tokens its provider billed before
failing, often 0). Skipped entities (not asked) and repeats (the stored answer) write nothing.
Rows of a calibration job carry its id, so the job reports its own total.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, case, func, insert, select
from sqlalchemy.orm import sessionmaker

from app.db import UsageRow
from app.schemas import EntityUsage, Usage, UsageReport
from diagnosis import EntityOutcome

__all__ = ["UsageSource", "UsageStore", "entity_usage", "usage_total"]

UsageSource = Literal["diagnosis", "cohort", "calibration"]


def _asked(outcomes: Sequence[EntityOutcome]) -> list[EntityOutcome]:
    return [o for o in outcomes if o.status != "skipped"]


def entity_usage(outcome: EntityOutcome) -> EntityUsage:
    return EntityUsage(
        prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens, cost_usd=outcome.cost_usd
    )


def usage_total(outcomes: Sequence[EntityOutcome]) -> Usage:
    """The usage of entity outcomes, summed."""
    asked = _asked(outcomes)
    return Usage(
        calls=len(asked),
        prompt_tokens=sum(o.prompt_tokens for o in asked),
        completion_tokens=sum(o.completion_tokens for o in asked),
        cost_usd=sum(o.cost_usd for o in asked),
        cache_hits=sum(1 for o in asked if o.cache == "hit"),
        cache_misses=sum(1 for o in asked if o.cache == "miss"),
    )


# The sums of a Usage, in its field order after ``calls``.
_SUMS: tuple[ColumnElement[Any], ...] = (
    func.count(),
    func.coalesce(func.sum(UsageRow.prompt_tokens), 0),
    func.coalesce(func.sum(UsageRow.completion_tokens), 0),
    func.coalesce(func.sum(UsageRow.cost_usd), 0.0),
    func.coalesce(func.sum(case((UsageRow.cache == "hit", 1), else_=0)), 0),
    func.coalesce(func.sum(case((UsageRow.cache == "miss", 1), else_=0)), 0),
)


def _usage(sums: Sequence[Any]) -> Usage:
    calls, prompt, completion, cost, hits, misses = sums
    return Usage(
        calls=int(calls), prompt_tokens=int(prompt), completion_tokens=int(completion), cost_usd=float(cost),
        cache_hits=int(hits), cache_misses=int(misses),
    )


class UsageStore:
    def __init__(self, sessions: sessionmaker) -> None:
        self.sessions = sessions

    def record(
        self,
        tenant: str,
        source: UsageSource,
        outcomes: Sequence[EntityOutcome],
        *,
        job_id: str | None = None,
        at: float | None = None,
    ) -> None:
        when = at if at is not None else time.time()
        rows = [
            {"tenant": tenant, "at": when, "source": source, "entity": o.name, "status": o.status,
             "prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens, "cost_usd": o.cost_usd,
             "cache": o.cache, "job_id": job_id}
            for o in _asked(outcomes)
        ]
        if not rows:
            return
        with self.sessions.begin() as session:
            session.execute(insert(UsageRow), rows)

    def report(self, tenant: str, since: datetime) -> UsageReport:
        """The tenant's usage recorded at or after ``since`` (an aware datetime), per entity and in total."""
        query = (
            select(UsageRow.entity, *_SUMS)
            .where(UsageRow.tenant == tenant, UsageRow.at >= since.timestamp())
            .group_by(UsageRow.entity)
            .order_by(UsageRow.entity)
        )
        with self.sessions() as session:
            entities = {row[0]: _usage(row[1:]) for row in session.execute(query)}
        total = sum(entities.values(), Usage())
        return UsageReport(tenant=tenant, since=since.astimezone(UTC).isoformat(), total=total, entities=entities)

    def job_total(self, tenant: str, job_id: str) -> Usage:
        with self.sessions() as session:
            row = session.execute(select(*_SUMS).where(UsageRow.tenant == tenant, UsageRow.job_id == job_id)).one()
        return _usage(row)

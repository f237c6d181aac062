"""What a tenant's gateway did lately, as the operator console shows it: diagnoses served, entity calls (failed ones
named by the stored diagnoses' failure reasons) and the ε released. Reads of the usage rows and the ledger's
charges only; every method reads the one tenant's rows and blocks (call it from a worker thread)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from app.db import UsageRow
from privacy.ledger.tables import REFUNDED, charges

__all__ = ["ActivityCounts", "EntityCalls", "FailureEvent", "TenantActivity", "failed_calls"]


@dataclass(frozen=True)
class FailureEvent:
    """One entity's failure, as a stored diagnosis names it."""

    at: float
    entity: str
    reason: str
    error: str | None


@dataclass(frozen=True)
class ActivityCounts:
    diagnosis_stamps: list[float]  # one per served diagnosis (at least one entity answered), since the earliest asked
    epsilon_spent: float  # ε released (charges not refunded)


@dataclass(frozen=True)
class EntityCalls:
    entity: str
    status: str  # ok | partial | failed
    calls: int


def failed_calls(calls: Iterable[EntityCalls]) -> dict[str, int]:
    """Entity -> failed calls, of :meth:`TenantActivity.entity_calls`' counts."""
    return {c.entity: c.calls for c in calls if c.status == "failed"}  # one count per (entity, status)


class TenantActivity:
    def __init__(self, sessions: sessionmaker) -> None:
        self.sessions = sessions

    def counts(self, tenant: str, *, since: float, stamps_since: float) -> ActivityCounts:
        """ε released since ``since``; served diagnoses' times since ``stamps_since`` (failed entity calls:
        :func:`failed_calls` of :meth:`entity_calls`)."""
        with self.sessions() as session:
            stamps = session.scalars(select(UsageRow.at).distinct().where(  # one diagnosis: one timestamp; served if
                UsageRow.tenant == tenant, UsageRow.source == "diagnosis",  # at least one entity answered
                UsageRow.status != "failed", UsageRow.at >= stamps_since)).all()
            spent = session.scalar(select(func.coalesce(func.sum(charges.c.epsilon * charges.c.releases), 0.0)).where(
                charges.c.tenant == tenant, charges.c.created_at >= since, charges.c.status != REFUNDED))
        return ActivityCounts(diagnosis_stamps=list(stamps), epsilon_spent=float(spent or 0.0))

    def entity_calls(self, tenant: str, *, since: float) -> list[EntityCalls]:
        """The tenant's entity calls since ``since``, counted by entity and outcome."""
        with self.sessions() as session:
            calls = session.execute(select(UsageRow.entity, UsageRow.status, func.count()).where(
                UsageRow.tenant == tenant, UsageRow.at >= since).group_by(UsageRow.entity, UsageRow.status)).all()
        return [EntityCalls(str(entity), str(status), int(n)) for entity, status, n in calls]

    def failures(self, tenant: str, *, since: float, limit: int) -> list[FailureEvent]:
        """Entity failures named by the tenant's stored diagnoses since ``since`` (the newest ``limit`` read), newest
        first (a diagnosis that failed outright, or whose answer retention removed, is not stored: its failures are
        counted, unexplained)."""
        query = (select(charges.c.created_at, charges.c.answer_json)
                 .where(charges.c.tenant == tenant, charges.c.source == "diagnosis", charges.c.created_at >= since,
                        charges.c.answer_json.is_not(None))
                 .order_by(charges.c.seq.desc()).limit(limit))
        with self.sessions() as session:
            rows = session.execute(query).all()
        events = []
        for at, answer in rows:
            try:
                stored = json.loads(answer)
            except ValueError:
                continue
            if not isinstance(stored, dict):
                continue
            errors = {e.get("name"): e.get("error") for e in stored.get("entities") or [] if isinstance(e, dict)}
            for entity, reason in (stored.get("failure_reasons") or {}).items():
                events.append(FailureEvent(float(at), str(entity), str(reason), errors.get(entity)))
        return events

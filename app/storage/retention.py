"""Retention policies per tenant: how long released diagnoses, uploaded responses and job inputs are kept.

A tenant that never set one keeps the server's defaults (``FEDCD_RETENTION_*``). Released diagnoses must outlive
the repeat window — the repeat rule answers an identical request from the stored diagnosis, and purging it sooner
would turn a free repeat into a fresh, paid query — so a shorter ``diagnoses_days`` is refused (422).
"""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from app.db import RetentionRow, utcnow
from app.domain_errors import InvalidInput
from app.schemas.students import MAX_DAYS, RetentionPolicy, RetentionPolicyPublic
from app.settings import Settings

__all__ = ["RetentionStore", "default_retention"]

DAY_S = 86400.0


def default_retention(settings: Settings) -> RetentionPolicy:
    return RetentionPolicy(
        diagnoses_days=settings.retention_diagnoses_days, responses_days=settings.retention_responses_days,
        job_inputs_days=settings.retention_job_inputs_days,
    )


class RetentionStore:
    def __init__(self, sessions: sessionmaker, settings: Settings) -> None:
        self.sessions = sessions
        self.default = default_retention(settings)
        self.repeat_window_s = settings.privacy_repeat_window_s

    def check(self, policy: RetentionPolicy) -> None:
        days = policy.diagnoses_days
        if days is not None and days * DAY_S < self.repeat_window_s:
            raise InvalidInput(("diagnoses_days",), [
                f"released diagnoses must be kept at least the repeat window ({self.repeat_window_s:g} s, "
                f"FEDCD_PRIVACY_REPEAT_WINDOW_S): an identical request inside it is answered from the stored diagnosis"
            ])

    def current(self, tenant: str) -> RetentionPolicyPublic:
        with self.sessions() as session:
            row = session.get(RetentionRow, tenant)
        if row is None:
            return RetentionPolicyPublic(**self.default.model_dump(), tenant=tenant, default=True)
        return self._public(row)

    def put(self, tenant: str, policy: RetentionPolicy, *, updated_by: str) -> RetentionPolicyPublic:
        self.check(policy)
        with self.sessions.begin() as session:
            row = session.get(RetentionRow, tenant)
            if row is None:
                row = RetentionRow(tenant=tenant, policy_json="", updated_by=updated_by)
                session.add(row)
            row.policy_json, row.updated_at, row.updated_by = policy.model_dump_json(), utcnow(), updated_by
        return self._public(row)

    def custom(self) -> dict[str, RetentionPolicy]:
        """Every tenant's own policy (tenants not listed keep the defaults)."""
        with self.sessions() as session:
            rows = session.scalars(select(RetentionRow)).all()
        return {r.tenant: _stored(r.policy_json) for r in rows}

    @staticmethod
    def _public(row: RetentionRow) -> RetentionPolicyPublic:
        policy = _stored(row.policy_json)
        return RetentionPolicyPublic(**policy.model_dump(), tenant=row.tenant, default=False,
                                     updated_at=row.updated_at, updated_by=row.updated_by)


def _stored(policy_json: str) -> RetentionPolicy:
    """A stored policy. One set before days were bounded may hold more than MAX_DAYS: that kept the data for good,
    which null now says — read as such rather than refused."""
    raw = json.loads(policy_json)
    return RetentionPolicy.model_validate(
        {k: None if isinstance(v, int | float) and v > MAX_DAYS else v for k, v in raw.items()})

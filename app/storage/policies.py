"""Privacy policies per tenant, versioned: every change is a new version with who set it and when.

A tenant that never set one runs under the server's default policy (Settings), shown as
version 0. The policy in force is read on every request, so a change applies from the next
request on, in every worker.

The server's settings bound what a tenant may choose: with ``FEDCD_ALLOW_UNNOISED=false`` a
policy asking for unnoised answers is refused (422, naming ``allow_unnoised``), and one stored
earlier (before the operator turned it off) is read back with ``allow_unnoised`` false: the
policy in force never allows more than the server does.
"""

from __future__ import annotations

import json

from pydantic import TypeAdapter
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from app.db import PolicyRow, utcnow
from app.domain_errors import InvalidInput
from app.schemas import PeriodIn, PrivacyPolicy, PrivacyPolicyPublic
from app.settings import Settings
from app.storage.generations import bump
from privacy import BudgetRule

__all__ = ["UNNOISED_FORBIDDEN", "PolicyStore", "budget_rule", "default_policy"]

UNNOISED_FORBIDDEN = ("the server forbids unnoised answers (FEDCD_ALLOW_UNNOISED=false): a tenant's policy cannot "
                      "set allow_unnoised to true")

_PERIOD = TypeAdapter(PeriodIn)


def default_policy(settings: Settings) -> PrivacyPolicy:
    """The server-wide default, from settings (FEDCD_PRIVACY_* and the FEDCD_DEFAULT_* diagnosis defaults)."""
    period = {"kind": settings.privacy_period}
    if settings.privacy_period == "rolling":
        period["window_s"] = settings.privacy_window_s  # type: ignore[assignment]
    elif settings.privacy_period in ("day", "week"):
        period["timezone"] = settings.privacy_timezone
    return PrivacyPolicy(
        period=_PERIOD.validate_python(period),
        cap_epsilon=settings.privacy_cap_epsilon if settings.privacy_cap_epsilon is not None else 1e7,
        cap_delta=settings.privacy_cap_delta,
        default_mechanism=settings.default_mechanism,
        default_epsilon=settings.default_epsilon,
        sensitivity=settings.sensitivity,
        allow_unnoised=settings.allow_unnoised,
        warning_fraction=settings.privacy_warning_fraction,
    )


def budget_rule(policy: PrivacyPolicy) -> BudgetRule:
    return BudgetRule(cap_epsilon=policy.cap_epsilon, cap_delta=policy.cap_delta, period=policy.period.to_period())


class PolicyStore:
    def __init__(self, sessions: sessionmaker, settings: Settings) -> None:
        self.sessions = sessions
        self._default = default_policy(settings)
        self.server_allows_unnoised = settings.allow_unnoised

    def check(self, policy: PrivacyPolicy) -> None:
        """Refuse (``InvalidInput``) a policy that asks for more than the server's settings allow."""
        if policy.allow_unnoised and not self.server_allows_unnoised:
            raise InvalidInput(("allow_unnoised",), [UNNOISED_FORBIDDEN])

    def current(self, tenant: str) -> PrivacyPolicyPublic:
        """The policy in force for ``tenant``, bounded by the server's settings (module docstring)."""
        with self.sessions() as session:
            row = session.scalars(
                select(PolicyRow).where(PolicyRow.tenant == tenant).order_by(PolicyRow.version.desc()).limit(1)
            ).first()
        if row is None:
            return PrivacyPolicyPublic(
                **self._default.model_dump(), tenant=tenant, version=0, created_at=None, created_by=None
            )
        return self._bounded(self._public(row))

    def put(self, tenant: str, policy: PrivacyPolicy, *, created_by: str) -> PrivacyPolicyPublic:
        self.check(policy)
        with self.sessions.begin() as session:
            latest = session.scalar(select(func.max(PolicyRow.version)).where(PolicyRow.tenant == tenant)) or 0
            row = PolicyRow(
                tenant=tenant, version=latest + 1, policy_json=policy.model_dump_json(), created_at=utcnow(),
                created_by=created_by,
            )
            session.add(row)
            bump(session, tenant)
        return self._public(row)

    def history(self, tenant: str) -> list[PrivacyPolicyPublic]:
        with self.sessions() as session:
            rows = session.scalars(select(PolicyRow).where(PolicyRow.tenant == tenant).order_by(PolicyRow.version))
            return [self._public(r) for r in rows]

    def _bounded(self, policy: PrivacyPolicyPublic) -> PrivacyPolicyPublic:
        if policy.allow_unnoised and not self.server_allows_unnoised:
            return policy.model_copy(update={"allow_unnoised": False})
        return policy

    @staticmethod
    def _public(row: PolicyRow) -> PrivacyPolicyPublic:
        return PrivacyPolicyPublic(
            **json.loads(row.policy_json), tenant=row.tenant, version=row.version, created_at=row.created_at,
            created_by=row.created_by,
        )

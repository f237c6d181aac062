"""Students' privacy budgets and the tenant's privacy policy: what ``/v1/privacy`` and
``/v1/admin/privacy-policy`` read and write.

A budget is looked up under the student's keyed hash (the ledger never holds the id: ``app.pseudonyms``) and the
tenant's policy in force (the policy a diagnosis would use, from the per-tenant configuration cache); the response
names the student as the caller did.
"""

from __future__ import annotations

import asyncio

from app.auth import Principal
from app.domain_errors import NotFound
from app.pseudonyms import Pseudonyms
from app.schemas import PrivacyPolicy, PrivacyPolicyPublic, StudentBudget
from app.services.planning import read_configuration
from app.storage import TenantConfigCache, budget_rule
from privacy import AsyncLedger, BudgetRule

__all__ = ["BudgetService"]


class BudgetService:
    """``ledger`` None: the ledger is off (a budget lookup is ``NotFound``)."""

    def __init__(self, *, ledger: AsyncLedger | None, config: TenantConfigCache, pseudonyms: Pseudonyms) -> None:
        self.ledger, self.config, self.pseudonyms = ledger, config, pseudonyms

    async def policy(self, principal: Principal) -> PrivacyPolicyPublic:
        """The privacy policy in force for ``principal``'s tenant, as diagnoses read it (a change applies to the next
        request)."""
        return await read_configuration(self.config, principal, lambda config: config.policy())

    async def rule(self, principal: Principal) -> BudgetRule:
        return budget_rule(await self.policy(principal))

    async def student(self, principal: Principal, student_id: str) -> StudentBudget:
        """The student's budget under the tenant's policy: the period's spend, what remains, when it renews."""
        if self.ledger is None:
            raise NotFound(("student_id",), ["the privacy ledger is off on this server"])
        tenant = principal.tenant
        status = await self.ledger.status(tenant, self.pseudonyms.key(tenant, student_id),
                                          rule=await self.rule(principal))
        return StudentBudget(**{**status, "student_id": student_id})  # the ledger holds the keyed hash

    # -- the policy, for the tenant's admins ----------------------------------------------------------
    async def current_policy(self, tenant: str) -> PrivacyPolicyPublic:
        """The policy in force, read from the store (version 0: the server default, never changed)."""
        return await asyncio.to_thread(self.config.policies.current, tenant)

    async def set_policy(self, tenant: str, policy: PrivacyPolicy, *, created_by: str) -> PrivacyPolicyPublic:
        """A new version, from the next request on; ``InvalidInput`` for one the server's settings forbid."""
        self.config.policies.check(policy)
        return await asyncio.to_thread(lambda: self.config.policies.put(tenant, policy, created_by=created_by))

    async def policy_history(self, tenant: str) -> list[PrivacyPolicyPublic]:
        """Every version the tenant's admins set, oldest first."""
        return await asyncio.to_thread(self.config.policies.history, tenant)

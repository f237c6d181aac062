"""The tenant's privacy policy: budget period and cap, diagnosis defaults, unnoised answers (admin keys)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from app.deps import AdminDep, BudgetServiceDep
from app.pagination import Page, page_of, pages
from app.routes.responses import ADMIN_ERRORS
from app.schemas import PrivacyPolicy, PrivacyPolicyHistory, PrivacyPolicyPublic

router = APIRouter(prefix="/v1/admin/privacy-policy", tags=["admin"])


@router.get("", response_model=PrivacyPolicyPublic, responses=ADMIN_ERRORS)
async def read_privacy_policy(budgets: BudgetServiceDep, principal: AdminDep) -> PrivacyPolicyPublic:
    """The policy in force for the tenant (version 0: the server default, never changed)."""
    return await budgets.current_policy(principal.tenant)


@router.put("", response_model=PrivacyPolicyPublic, responses={
    **ADMIN_ERRORS, 422: {"description": "invalid policy, or one the server's settings forbid (allow_unnoised true "
                                         "while FEDCD_ALLOW_UNNOISED=false)"}})
async def update_privacy_policy(body: PrivacyPolicy, budgets: BudgetServiceDep, principal: AdminDep) -> PrivacyPolicyPublic:
    """Set a new version; it applies from the next request on. Spend already recorded stays recorded and
    counts under the new period's rules (e.g. a shorter window forgets more of it). The server's settings bound
    the policy: ``allow_unnoised: true`` is refused (422) when the server has ``FEDCD_ALLOW_UNNOISED=false``."""
    return await budgets.set_policy(principal.tenant, body, created_by=principal.key_id)


@router.get("/history", response_model=PrivacyPolicyHistory, responses=ADMIN_ERRORS)
async def read_privacy_policy_history(
    budgets: BudgetServiceDep, principal: AdminDep, page: Annotated[Page, Depends(pages("policies", int))]
) -> PrivacyPolicyHistory:
    """Every version the tenant's admins set, oldest first, with who and when."""
    history = await budgets.policy_history(principal.tenant)
    chunk, last = page_of(history, page, key=lambda p: (p.version,))
    return PrivacyPolicyHistory(**page.envelope(chunk, last))

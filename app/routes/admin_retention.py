"""The tenant's retention policy (admin keys, README "Student data"): how many days released diagnoses, uploaded
responses and finished jobs' inputs are kept before the maintenance loop purges them."""

from __future__ import annotations

import asyncio
from fastapi import APIRouter

from app.deps import AdminDep, RetentionStoreDep
from app.routes.responses import ADMIN_ERRORS
from app.schemas.students import RetentionPolicy, RetentionPolicyPublic

router = APIRouter(prefix="/v1/admin/retention", tags=["admin"])


@router.get("", response_model=RetentionPolicyPublic, responses=ADMIN_ERRORS)
async def read_retention(store: RetentionStoreDep, principal: AdminDep) -> RetentionPolicyPublic:
    """The policy in force (``default: true``: the server's FEDCD_RETENTION_* defaults)."""
    return await asyncio.to_thread(store.current, principal.tenant)


@router.put("", response_model=RetentionPolicyPublic, responses={
    **ADMIN_ERRORS, 422: {"description": "invalid days, or diagnoses kept shorter than the repeat window"}})
async def update_retention(body: RetentionPolicy, store: RetentionStoreDep, principal: AdminDep) -> RetentionPolicyPublic:
    """Set the tenant's policy; the next purge applies it (to data stored before the change too)."""
    store.check(body)
    return await asyncio.to_thread(lambda: store.put(principal.tenant, body, updated_by=principal.key_id))

"""API keys of the caller's tenant, for admin keys (the operator's CLI, ``fedcd keys``, manages any tenant)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Response, status

from app.deps import AdminDep, KeyStoreDep
from app.errors import InputError
from app.pagination import Page, page_of, pages
from app.routes.responses import ADMIN_ERRORS
from app.schemas import KeyCreate, KeyCreated, KeyList, KeyPublic
from app.schemas.common import Identifier

router = APIRouter(prefix="/v1/admin/keys", tags=["admin"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=KeyCreated, responses=ADMIN_ERRORS)
async def create_key(body: KeyCreate, keys: KeyStoreDep, principal: AdminDep) -> KeyCreated:
    """A new key for the admin's own tenant; the key is in this response only."""
    if body.tenant is not None and body.tenant != principal.tenant:
        raise InputError(("body", "tenant"), ["an admin key manages its own tenant's keys only"], status_code=403)
    new = await asyncio.to_thread(
        lambda: keys.create(tenant=principal.tenant, role=body.role, expires_days=body.expires_days,
                            created_by=principal.key_id)
    )
    return KeyCreated(tenant=new.tenant, role=new.role, key_id=new.key_id, api_key=new.api_key, expires_at=new.expires_at)


@router.get("", response_model=KeyList, responses=ADMIN_ERRORS)
async def read_keys(keys: KeyStoreDep, principal: AdminDep, page: Annotated[Page, Depends(pages("keys", float, str))]) -> KeyList:
    """The tenant's keys (ids, roles, dates; never the keys), oldest first."""
    listed = await asyncio.to_thread(keys.list, principal.tenant)
    chunk, last = page_of(listed, page, key=lambda k: (k.created_at, k.key_id))
    return KeyList(**page.envelope([KeyPublic(**vars(k)) for k in chunk], last))


@router.delete("/{key_id}", status_code=status.HTTP_204_NO_CONTENT, responses={
    **ADMIN_ERRORS, 404: {"description": "no such key in the tenant"},
})
async def delete_key(key_id: Identifier, keys: KeyStoreDep, principal: AdminDep) -> Response:
    """Revoke a key; it fails from the next request on."""
    if not await asyncio.to_thread(keys.revoke, key_id, tenant=principal.tenant):
        raise InputError(("path", "key_id"), [f"unknown key id '{key_id}'"], status_code=404)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

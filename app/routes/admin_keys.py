"""API keys of the caller's tenant, for admin keys (the operator's CLI, ``fedcd keys``, manages any tenant).

A new key never outlives the key that creates it (:func:`lifetime_within`): otherwise a short-lived admin key (one
handed out for an afternoon) could mint a permanent one, and its expiry would end nothing. Revoking a key does not
revoke the keys it created (they may serve running integrations): revoke those by id too (``GET /v1/admin/keys`` lists
them). Asked
for a later expiry, the request is refused (422 naming ``expires_days``); asking for none, the new key expires with
its creator (``expires_at`` in the answer says when)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Response, status

from app.auth import KeyStore, NewKey
from app.deps import AdminDep, KeyStoreDep
from app.domain_errors import InvalidInput
from app.errors import InputError
from app.pagination import Page, page_of, pages
from app.routes.responses import ADMIN_ERRORS
from app.schemas import KeyCreate, KeyCreated, KeyList, KeyPublic
from app.schemas.common import Identifier

router = APIRouter(prefix="/v1/admin/keys", tags=["admin"])

_DAY_S = 86400.0


def lifetime_within(keys: KeyStore, tenant: str, creator: str, asked_days: float | None) -> float | None:
    """The new key's lifetime in days (None: no expiry), capped at what is left of its creator's key (module
    docstring); ``InvalidInput`` naming ``expires_days`` when asked to outlive it. A creator without expiry, or not a
    stored key (authentication disabled), caps nothing."""
    found = next((k for k in keys.list(tenant) if k.key_id == creator), None)
    if found is None or found.expires_at is None:
        return asked_days
    left = (found.expires_at - time.time()) / _DAY_S
    if asked_days is not None and asked_days <= left:
        return asked_days
    until = datetime.fromtimestamp(found.expires_at, UTC).isoformat(timespec="seconds")
    if asked_days is not None or left <= 0:
        raise InvalidInput(("expires_days",), [
            f"a new key may not outlive the key creating it ({creator}, which expires at {until}, in {max(left, 0):.4g} "
            "days): ask for at most that, or omit expires_days for a key that expires with it"])
    return left


@router.post("", status_code=status.HTTP_201_CREATED, response_model=KeyCreated, responses=ADMIN_ERRORS)
async def create_key(body: KeyCreate, keys: KeyStoreDep, principal: AdminDep) -> KeyCreated:
    """A new key for the admin's own tenant; the key is in this response only. It never outlives the admin's own key
    (omitted ``expires_days``: it expires with it; a later one: 422)."""
    if body.tenant is not None and body.tenant != principal.tenant:
        raise InputError(("body", "tenant"), ["an admin key manages its own tenant's keys only"], status_code=403)
    def create() -> NewKey:
        days = lifetime_within(keys, principal.tenant, principal.key_id, body.expires_days)
        return keys.create(tenant=principal.tenant, role=body.role, expires_days=days, created_by=principal.key_id)

    new = await asyncio.to_thread(create)
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

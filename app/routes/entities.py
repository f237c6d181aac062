from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from app.deps import FederationDep, PrincipalDep, SettingsDep
from app.pagination import Page, page_of, pages
from app.routes.responses import AUTH_ERRORS
from app.schemas import EntityInfo, EntityList
from providers.circuit import CircuitStoreUnavailable

__all__ = ["public_base_url", "router"]

router = APIRouter(prefix="/v1/entities", tags=["entities"])


def public_base_url(url: str | None) -> str | None:
    """An entity's endpoint as a tenant's admin may see it (the API and the console): scheme, host, port and path.

    The operator's URL may carry credentials (``user:password@``) or a token in its query string (``?key=…``, some
    proxies' and Azure's signatures), which are the operator's, not any tenant's: both are dropped, with the
    fragment. A URL that cannot be read is not shown at all rather than shown as written."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for an unreadable port: the URL is then hidden
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    # Rebuilt from the host and port alone: whatever came before an "@" (the userinfo) is left out.
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return urlunsplit((parts.scheme, host if port is None else f"{host}:{port}", parts.path, "", ""))


class DroppedEntityInfo(BaseModel):
    name: str
    kind: str
    reason: str = Field(description="why it is not in the federation, e.g. its API key variable is not set")


class EntityListing(EntityList):
    dropped: list[DroppedEntityInfo] | None = Field(
        default=None,
        description="admin keys only: declared entities left out of the federation (disabled, or their API key "
        "variable unset); they are neither asked nor counted in any privacy budget",
    )


@router.get("", response_model=EntityListing, responses=AUTH_ERRORS)
async def read_entities(
    federation: FederationDep, principal: PrincipalDep, settings: SettingsDep, page: Annotated[Page, Depends(pages("entities", int))]
) -> EntityListing:
    """The federation's members, in its order; their endpoints (``base_url``, without userinfo or query string), and
    the declared entities left out, only to admin keys (``dropped``: on every page, it is short)."""
    # Sort key: the position in the federation (fixed while the gateway runs).
    names, last = page_of(enumerate(federation.names), page, key=lambda pair: (pair[0],))
    try:
        circuits = await federation.circuit_states()
    except CircuitStoreUnavailable:
        circuits = {}  # the breakers let calls through meanwhile; the list still answers
    data = []
    for _, name in names:
        spec = federation.specs.get(name)
        data.append(
            EntityInfo(
                name=name,
                kind=spec.kind if spec else "custom",
                model=(spec.model or spec.packaged_model or "") if spec else "",
                status=federation.status(name),
                circuit=circuits.get(name),
                # Anthropic's API version rejects temperature: it is never sent there.
                temperature=None if (spec is None or spec.kind == "anthropic") else spec.temperature,
                max_tokens=spec.max_tokens if spec else 0,
                structured_output=spec.structured_output if spec else "",
                concurrency=spec.concurrency if spec else 0,
                deadline_s=spec.deadline_s if spec else 0.0,
                input_usd_per_mtok=spec.input_usd_per_mtok if spec else 0.0,
                output_usd_per_mtok=spec.output_usd_per_mtok if spec else 0.0,
                tier=spec.tier if spec else 0,
                # Admin keys only, and never the credentials or tokens the operator's URL may hold.
                base_url=public_base_url(spec.base_url) if (spec and principal.is_admin) else None,
            )
        )
    dropped = (
        [DroppedEntityInfo(name=d.name, kind=d.kind, reason=d.reason) for d in settings.dropped_entities
         if d.name not in federation.names]
        if principal.is_admin
        else None
    )
    return EntityListing(**page.envelope(data, last), dropped=dropped)

"""The federated-trained local models served as entity ``local-fed`` (one per Q-matrix)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.deps import FederationDep, PrincipalDep
from app.errors import InputError
from app.schemas.common import Identifier

router = APIRouter(prefix="/v1/local-model", tags=["local-model"])


@router.get("", responses={401: {"description": "missing or bad API key"},
                           404: {"description": "no local-fed entity, or no model of this Q-matrix visible to the "
                                                "caller's tenant (its own or the operator's)"},
                           409: {"description": "signature check failed"},
                           422: {"description": "several Q-matrices have a model: name one"}})
async def read_local_model(
    federation: FederationDep,
    principal: PrincipalDep,
    qmatrix_id: Annotated[Identifier | None, Query(description="the Q-matrix whose model to describe, by the id the "
                                                   "tenant registered (optional when only one Q-matrix has a model "
                                                   "the tenant can see)")] = None,
) -> dict[str, Any]:
    """The model serving the caller's tenant for ``qmatrix_id`` — the tenant's own (trained from its upload) or
    else the operator's shared one (``owner``): version, whether its Ed25519 signature verified, rounds, ε, δ, DP
    mode, nodes, promotion-gate result, held-out metrics, training time and configuration. Another tenant's model
    is a plain 404. The gateway serves a newly published version at once; this shows the one it serves now."""
    from federated import ModelNotFound, RegistryError, SignatureInvalid
    from providers.local_fed import LocalFedEntity

    adapter = federation.adapter("local-fed") if "local-fed" in federation.names else None
    if not isinstance(adapter, LocalFedEntity):
        raise InputError(("path",), ["no local-fed entity is configured (FEDCD_LOCAL_FED)"], status_code=404)
    try:
        return await asyncio.to_thread(adapter.info_for, principal.tenant, qmatrix_id)
    except ModelNotFound as exc:
        raise InputError(("query", "qmatrix_id"), [f"no published local model: {exc}"], status_code=404) from exc
    except SignatureInvalid as exc:
        raise InputError(("query", "qmatrix_id"), [f"the active model failed its signature check: {exc}"],
                         status_code=409) from exc
    except RegistryError as exc:
        raise InputError(("query", "qmatrix_id"), [str(exc)]) from exc

"""The federated-trained local model served as entity ``local-fed``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from app.deps import FederationDep, PrincipalDep
from app.errors import InputError

router = APIRouter(prefix="/v1/local-model", tags=["local-model"])


@router.get("", responses={401: {"description": "missing or bad API key"}, 404: {"description": "no local-fed entity or no published model"}, 409: {"description": "signature check failed"}})
async def read_local_model(federation: FederationDep, principal: PrincipalDep) -> dict[str, Any]:
    """The active model's version, whether its Ed25519 signature verified, rounds, ε, δ, DP mode,
    held-out metrics, training time and configuration."""
    from federated import ModelNotFound, SignatureInvalid

    adapter = federation.adapter("local-fed") if "local-fed" in federation.names else None
    if adapter is None or not hasattr(adapter, "info"):
        raise InputError(("path",), ["no local-fed entity is configured (train one with `fedcd train`)"], status_code=404)
    try:
        return await asyncio.to_thread(adapter.info)
    except ModelNotFound as exc:
        raise InputError(("path",), [f"no published local model: {exc}"], status_code=404) from exc
    except SignatureInvalid as exc:
        raise InputError(("path",), [f"the active model failed its signature check: {exc}"], status_code=409) from exc

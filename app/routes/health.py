from __future__ import annotations

from fastapi import APIRouter

from app.deps import FederationDep
from app.schemas import Health
from app.version import VERSION

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def read_health(federation: FederationDep) -> Health:
    return Health(status="ok", entities=len(federation.names), version=VERSION)

from __future__ import annotations

from fastapi import APIRouter

from app.deps import FederationDep
from app.schemas import EntityInfo, EntityList

router = APIRouter(prefix="/v1/entities", tags=["entities"])


@router.get("", response_model=EntityList)
async def read_entities(federation: FederationDep) -> EntityList:
    data = []
    for name in federation.names:
        spec = federation.specs.get(name)
        data.append(
            EntityInfo(
                name=name,
                kind=spec.kind if spec else "custom",
                model=(spec.model or spec.packaged_model or "") if spec else "",
                status=federation.status(name),
                # Anthropic's API version rejects temperature: it is never sent there.
                temperature=None if (spec is None or spec.kind == "anthropic") else spec.temperature,
                max_tokens=spec.max_tokens if spec else 0,
                structured_output=spec.structured_output if spec else "",
                concurrency=spec.concurrency if spec else 0,
                deadline_s=spec.deadline_s if spec else 0.0,
                base_url=spec.base_url if spec else None,
            )
        )
    return EntityList(data=data, count=len(data))

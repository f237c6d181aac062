"""``/v1/next-items``: which items to ask a student next (adaptive item selection; app.services.next_items)."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import NextItemsServiceDep, PrincipalDep
from app.routes.responses import AUTH_ERRORS
from app.schemas.next_items import BatchNextItemsRequest, BatchNextItemsResponse, NextItemsRequest, NextItemsResponse

router = APIRouter(prefix="/v1/next-items", tags=["next-items"])

_ERRORS = {
    **AUTH_ERRORS,
    404: {"description": "unknown qmatrix_id (another tenant's is unknown too)"},
    422: {"description": "bad input; `detail[].loc` names the field (unknown item ids, target concepts, excluded "
                          "items)"},
    429: {"description": "the tenant is over its request rate"},
}


@router.post("", response_model=NextItemsResponse, responses=_ERRORS)
async def create_next_items(body: NextItemsRequest, principal: PrincipalDep,
                            service: NextItemsServiceDep) -> NextItemsResponse:
    """The items to ask this student next, best first, each with the concepts it informs and by how much; `stop`
    says when nothing more is worth asking. No entity is asked and no ε is spent."""
    return await service.next_items(body, principal)


@router.post("/batch", response_model=BatchNextItemsResponse, responses=_ERRORS)
async def create_next_items_batch(body: BatchNextItemsRequest, principal: PrincipalDep,
                                  service: NextItemsServiceDep) -> BatchNextItemsResponse:
    """The next items of each student of a class, with one Q-matrix and the same options."""
    return await service.next_items_batch(body, principal)

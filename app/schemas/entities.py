"""The federation's members as the API lists them, and the health check."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from app.pagination import Paginated

__all__ = ["EntityInfo", "EntityList", "Health"]


class EntityInfo(BaseModel):
    name: str
    kind: str
    model: str
    status: str = Field(description="ready | loading | not_loaded | configured | error: ...")
    circuit: Literal["closed", "open", "half_open"] | None = Field(
        default=None, description="its circuit breaker's state (docs: operations.md, 'Circuit breakers'); null: no breaker"
    )
    temperature: float | None = Field(description="sent to the backend; null: not sent")
    max_tokens: int
    structured_output: str
    concurrency: int
    deadline_s: float
    input_usd_per_mtok: float = Field(default=0.0, description="price per million prompt tokens (docs: cost.md)")
    output_usd_per_mtok: float = Field(default=0.0, description="price per million completion tokens")
    tier: int = Field(default=0, description="selective federation asks lower tiers first (docs: cost.md, Selective federation)")
    base_url: str | None = None


class EntityList(Paginated[EntityInfo]):
    """The federation's members, in the federation's order."""


class Health(BaseModel):
    status: Literal["ok"]
    entities: int
    version: str


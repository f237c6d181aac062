"""What entity answers used: tokens and their price, per answer and summed (``/v1/usage``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["EntityUsage", "Usage", "UsageReport"]


class EntityUsage(BaseModel):
    """What one entity's answer used: the tokens its provider reported and their price."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = Field(
        default=0.0, description="tokens × the entity's configured price (docs: cost.md), every attempt included; 0 for "
        "a cache hit, a free entity, and a failure the provider reported no usage for (timeout, refusal)",
    )


class Usage(BaseModel):
    """Usage summed over entity answers (a diagnosis, a batch, a job, a period)."""

    calls: int = Field(default=0, description="entity answers asked for, cache hits included (skipped entities not)")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})


class UsageReport(BaseModel):
    """``GET /v1/usage``: the caller's tenant's usage since ``since``."""

    tenant: str
    since: str = Field(description="ISO 8601 UTC; usage recorded at or after it is counted")
    total: Usage
    entities: dict[str, Usage] = Field(description="per entity")

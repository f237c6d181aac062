"""Circuit breakers in front of each entity (``FEDCD_CIRCUIT_*``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["CircuitSettings"]


class CircuitSettings(BaseModel):
    """When an entity's circuit opens and how long it stays open."""

    # Circuit breakers (README "Circuit breakers"): shared by every worker through Redis when redis_url is set.
    circuit_failure_threshold: int | None = Field(
        default=5, ge=1, description="consecutive failed calls that open an entity's circuit; null: no breakers"
    )
    circuit_reset_timeout_s: float = Field(
        default=30.0, gt=0, description="seconds an open circuit waits before one probe call"
    )
    circuit_key_prefix: str = Field(default="fedcd:circuit:", min_length=1, description="Redis key prefix")

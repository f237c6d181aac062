"""How big and how frequent requests may be (``FEDCD_MAX_*``, ``FEDCD_RATE_LIMIT*``)."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from app.ratelimit import parse_rate

__all__ = ["LimitSettings"]


class LimitSettings(BaseModel):
    """Request size limits (413/422) and per-tenant rate limits (429)."""

    # Request limits (README "Limits"): bigger requests are refused with 413 (body) or 422 (counts).
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="request body limit, except Q-matrix uploads")
    max_qmatrix_body_bytes: int = Field(default=16 << 20, ge=1024, description="body limit of POST/PUT /v1/qmatrices")
    max_batch_size: int = Field(default=200, ge=1, description="students per batch diagnosis")
    max_responses_per_student: int = Field(default=2000, ge=1, description="responses per student in one request")
    max_qmatrix_items: int = Field(default=20000, ge=1, description="items per Q-matrix")
    max_qmatrix_concepts: int = Field(default=500, ge=1, description="concepts per Q-matrix")
    max_cohort_size: int = Field(
        default=1000, ge=2, description="students per /v1/cohort-report (each is diagnosed by every entity)"
    )
    max_calibration_records: int = Field(default=5000, ge=1, description="validation students per /v1/calibrate")
    # Rate limits (README "Rate limits"): a token bucket per tenant, shared through Redis when redis_url is set.
    rate_limit: str = Field(
        default="100/second burst 1000",
        description="each tenant's request rate: <count>/<second|minute|hour|day> [burst <n>] (burst default: count), "
        "or off; over it: 429 with Retry-After. /healthz and /metrics are never limited",
    )
    rate_limit_tenants: dict[str, str] = Field(
        default_factory=dict, description="tenant -> its own rate (same syntax, off allowed), e.g. {\"big\": \"500/second\"}"
    )
    rate_limit_key_prefix: str = Field(default="fedcd:ratelimit:", min_length=1, description="Redis key prefix")

    @field_validator("rate_limit")
    @classmethod
    def _rate_is_readable(cls, value: str) -> str:
        parse_rate(value)  # a typo fails at start-up, not at the first request
        return value

    @field_validator("rate_limit_tenants")
    @classmethod
    def _tenant_rates_are_readable(cls, value: dict[str, str]) -> dict[str, str]:
        for rate in value.values():
            parse_rate(rate)
        return value

"""API keys as an admin creates and lists them (``/v1/admin/keys``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.pagination import Paginated

__all__ = ["KeyCreate", "KeyCreated", "KeyList", "KeyPublic"]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    tenant: str | None = Field(default=None, description="must be the admin's own tenant (the default)")
    role: Literal["client", "admin"] = "client"
    expires_days: float | None = Field(default=None, gt=0, le=36500)


class KeyPublic(BaseModel):
    """A key as listed: never the key itself."""

    key_id: str
    tenant: str
    role: Literal["client", "admin"]
    created_at: float
    expires_at: float | None
    revoked: bool
    last_used_at: float | None
    created_by: str


class KeyCreated(BaseModel):
    tenant: str
    role: Literal["client", "admin"]
    key_id: str
    api_key: str = Field(description="shown once; only its hash is stored")
    expires_at: float | None


class KeyList(Paginated[KeyPublic]):
    """The tenant's keys, oldest first."""


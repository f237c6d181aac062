"""The response cache of entity answers (``FEDCD_CACHE_*``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from providers import EntityKind

__all__ = ["CacheSettings"]


class CacheSettings(BaseModel):
    """What is cached, for how long, and under which Redis key prefix."""

    # Response cache (README "Response cache"): entity answers before privatization, shared through Redis
    # when redis_url is set. Hits are privatized afresh and charged like calls: they save money, not ε.
    cache_enabled: bool = Field(default=True, description="cache entity answers (in-process, or in Redis with redis_url)")
    cache_ttl_s: float = Field(default=3600.0, gt=0, description="seconds a cached answer is served")
    cache_max_entries: int = Field(
        default=10000, ge=1, description="cached answers kept (per process in memory; per key prefix in Redis)"
    )
    cache_key_prefix: str = Field(default="fedcd:cache:", min_length=1, description="Redis key prefix of the cache")
    cache_kinds: list[EntityKind] = Field(
        default=["openai", "anthropic", "groq", "openai_compatible", "llamacpp", "simulated"],
        description="entity kinds whose answers are cached; local_fed is not by default (its models are replaced "
        "while the server runs, and it is free and fast)",
    )

"""Build ready-to-use entities from specs: adapter + the standard wrapper chain."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from providers.circuit import CircuitBreakers
from providers.config import EntitySpec
from providers.types import Entity
from providers.wrappers import RetryPolicy, Sleep, build_chain

__all__ = ["build_adapter", "build_entity"]

_PROBE_MARGIN_S = 5.0


def build_adapter(spec: EntitySpec, *, env: Mapping[str, str] | None = None, http_client: Any = None) -> Entity:
    """The bare adapter for ``spec`` (no retries, no deadline)."""
    api_key = spec.resolved_api_key(env)
    if spec.kind == "openai_compatible":
        from providers.openai_local import LocalOpenAIChatEntity, uses_thin_path

        if uses_thin_path(spec, http_client):  # a local server: the thin path (hosted ones: the SDK, below)
            return LocalOpenAIChatEntity(spec, api_key=api_key)
    if spec.kind in ("openai", "openai_compatible"):
        from providers.openai_chat import OpenAIChatEntity

        return OpenAIChatEntity(spec, api_key=api_key, http_client=http_client)
    if spec.kind == "groq":
        from providers.openai_chat import GroqEntity

        return GroqEntity(spec, api_key=api_key, http_client=http_client)
    if spec.kind == "anthropic":
        from providers.anthropic_messages import AnthropicEntity

        return AnthropicEntity(spec, api_key=api_key, http_client=http_client)
    if spec.kind == "simulated":
        from providers.simulated import SimulatedEntity

        assert spec.simulated_style is not None  # guaranteed by EntitySpec validation
        return SimulatedEntity(spec.simulated_style, name=spec.name, seed=spec.seed)
    if spec.kind == "local_fed":
        from providers.local_fed import LocalFedEntity  # imports torch: only when configured

        assert spec.model_path is not None  # guaranteed by EntitySpec validation
        return LocalFedEntity(spec.model_path)
    if spec.kind == "llamacpp":
        from providers.llamacpp_embedded import LlamaCppEntity

        return LlamaCppEntity(spec)
    raise ValueError(f"unknown entity kind {spec.kind!r}")


def build_entity(
    spec: EntitySpec,
    *,
    env: Mapping[str, str] | None = None,
    http_client: Any = None,
    sleep: Sleep = asyncio.sleep,
    circuits: CircuitBreakers | None = None,
) -> Entity:
    """Adapter wrapped in concurrency limit, deadline and retries, as the spec says, behind its circuit
    breaker when ``circuits`` is given."""
    policy = RetryPolicy(max_attempts=spec.max_attempts)
    # A probe is one call: it ends within the deadline unless its worker died; then the lease lapses.
    breaker = circuits.breaker(spec.name, probe_lease_s=spec.deadline_s + _PROBE_MARGIN_S) if circuits else None
    return build_chain(
        build_adapter(spec, env=env, http_client=http_client),
        policy=policy,
        deadline_s=spec.deadline_s,
        concurrency=spec.concurrency,
        breaker=breaker,
        sleep=sleep,
        background_share=spec.background_share,
        # Repeating an embedded model's call costs no money: a job's call gives its slot to a user's at once.
        preempt_background=spec.kind == "llamacpp",
    )

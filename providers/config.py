"""Declarations of federation members (``EntitySpec``) and the default federation.

Specs are plain pydantic models, so ``app.settings`` can read them from the environment
or a config file, and tests can build them directly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

__all__ = ["DEFAULT_EMBEDDED", "DEFAULT_HOSTED", "DEFAULT_TIER", "EntityKind", "EntitySpec", "default_entity_specs"]

EntityKind = Literal["openai", "anthropic", "groq", "openai_compatible", "llamacpp", "simulated", "local_fed"]

# The tier an entity gets when its declaration names none (README "Selective federation"): 0 for what runs
# here at no per-call price (embedded LLMs, the federated-trained model), 1 for hosted, paid backends. A
# SIMULATED entity stands in for a hosted one (providers.simulated), so it is tier 1 too; an
# openai_compatible server is assumed paid unless its declaration says ``tier: 0`` (e.g. a local vLLM).
DEFAULT_TIER: Mapping[EntityKind, int] = {
    "llamacpp": 0, "local_fed": 0,
    "openai": 1, "anthropic": 1, "groq": 1, "openai_compatible": 1, "simulated": 1,
}


class EntitySpec(BaseModel):
    """One entity: which backend, which model, and how hard to try.

    ``timeout_s`` bounds one attempt (the SDK's timeout); ``deadline_s`` bounds the whole
    call including retries; ``concurrency`` bounds calls in flight to this entity. ``tier``: the
    order selective federation asks entities in (0 first); omitted, :data:`DEFAULT_TIER` of the kind.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    kind: EntityKind
    model: str = ""
    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    # json_schema: OpenAI-style strict schema; json_object: JSON mode (+ schema for llama.cpp);
    # grammar: embedded llama.cpp only, a GBNF grammar bounding every value to [0, 1]; none: prompt only.
    structured_output: Literal["json_schema", "json_object", "grammar", "none"] = "json_schema"
    temperature: float | None = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, ge=1)
    timeout_s: float = Field(default=30.0, gt=0)
    deadline_s: float = Field(default=90.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    concurrency: int = Field(default=4, ge=1)
    # The most of those slots background jobs (calibrations) may hold at once; interactive diagnoses go first.
    background_share: float = Field(default=0.5, gt=0.0, le=1.0)
    # llamacpp: a GGUF path, or a packaged model name ("smollm2", "gemma3"); local_fed: the model registry folder.
    model_path: str | None = None
    packaged_model: Literal["smollm2", "gemma3"] | None = None
    n_ctx: int = Field(default=4096, ge=256)
    # simulated only: which documented noise model (providers.simulated); names must start with "sim:".
    simulated_style: Literal["confident", "conservative", "specialist"] | None = None
    seed: int = 0
    n_threads: int | None = Field(default=None, ge=1)
    enabled: bool = True
    # Price in US dollars per million prompt (input) and completion (output) tokens (providers.pricing);
    # 0: free (embedded, local-fed, simulated unless a price is configured to model a hosted one).
    input_usd_per_mtok: float = Field(default=0.0, ge=0)
    output_usd_per_mtok: float = Field(default=0.0, ge=0)
    tier: int = Field(default=1, ge=0, description="selective federation asks lower tiers first; default by kind")

    @model_validator(mode="before")
    @classmethod
    def _default_tier(cls, data: object) -> object:
        if isinstance(data, Mapping) and data.get("tier") is None and data.get("kind") in DEFAULT_TIER:
            return {**data, "tier": DEFAULT_TIER[data["kind"]]}
        return data

    @model_validator(mode="after")
    def _check_kind(self) -> EntitySpec:
        if self.kind == "llamacpp" and not (self.model_path or self.packaged_model):
            raise ValueError(f"entity '{self.name}': llamacpp needs model_path or packaged_model")
        if self.kind == "simulated" and not (self.simulated_style and self.name.startswith("sim:")):
            raise ValueError(f"entity '{self.name}': simulated entities need simulated_style and a name starting 'sim:'")
        if self.structured_output == "grammar" and self.kind != "llamacpp":
            raise ValueError(f"entity '{self.name}': structured_output 'grammar' is for kind llamacpp only")
        if self.kind == "local_fed" and not self.model_path:
            raise ValueError(f"entity '{self.name}': local_fed needs model_path (the model registry folder)")
        if self.kind == "openai_compatible" and not self.base_url:
            raise ValueError(f"entity '{self.name}': openai_compatible needs base_url")
        if self.kind in ("openai", "anthropic", "groq", "openai_compatible") and not self.model:
            raise ValueError(f"entity '{self.name}': model is required for kind {self.kind}")
        return self

    def resolved_api_key(self, env: Mapping[str, str] | None = None) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            return (env if env is not None else os.environ).get(self.api_key_env) or None
        return None


# Hosted providers join the federation only when their key is set (model names configurable).
# Prices: the vendors' public list prices per million input/output tokens as known to the fedcd developers on
# 2026-12-01 (not read live from the vendors' pages on that day; check them before relying on the dollar figures):
# gpt-4o-mini $0.15/$0.60 (OpenAI), claude-haiku-4-5 $1.00/$5.00 (Anthropic), llama-3.3-70b-versatile on Groq
# $0.59/$0.79. Override per entity (input_usd_per_mtok, output_usd_per_mtok) when they change.
DEFAULT_HOSTED: tuple[EntitySpec, ...] = (
    EntitySpec(
        name="gpt", kind="openai", model="gpt-4o-mini", api_key_env="OPENAI_API_KEY",
        input_usd_per_mtok=0.15, output_usd_per_mtok=0.60,
    ),
    # Anthropic's current API version rejects `temperature`; the adapter never sends it.
    EntitySpec(
        name="claude", kind="anthropic", model="claude-haiku-4-5", api_key_env="ANTHROPIC_API_KEY", temperature=None,
        input_usd_per_mtok=1.00, output_usd_per_mtok=5.00,
    ),
    EntitySpec(
        name="llama", kind="groq", model="llama-3.3-70b-versatile", api_key_env="GROQ_API_KEY",
        input_usd_per_mtok=0.59, output_usd_per_mtok=0.79,
    ),
)

# The key-free default: two real LLMs running in-process on the CPU.
DEFAULT_EMBEDDED: tuple[EntitySpec, ...] = (
    EntitySpec(name="smollm2", kind="llamacpp", packaged_model="smollm2", model="SmolLM2-135M-Instruct", structured_output="grammar", concurrency=1, deadline_s=120.0, max_attempts=2),
    EntitySpec(name="gemma3", kind="llamacpp", packaged_model="gemma3", model="gemma-3-270m", structured_output="grammar", concurrency=1, deadline_s=120.0, max_attempts=2),
)


def default_entity_specs(env: Mapping[str, str] | None = None) -> list[EntitySpec]:
    """The embedded pair, plus each hosted provider whose API key is set in ``env``."""
    env = env if env is not None else os.environ
    return [*DEFAULT_EMBEDDED, *(spec for spec in DEFAULT_HOSTED if spec.resolved_api_key(env))]

"""SIMULATED hosted entities: the heterogeneity the seed paper reports, without keys or cost.

These are not LLMs. Each one reads the student's responses from the prompt context and
answers through a documented noise model, so scale and ablation runs can be made without
API keys. Their names start with ``sim:`` and every prediction carries ``simulated=True``;
reports and the API show both.

Noise model. For concept k let p_k be the student's mean score on the items in the
context that require k (the paper protocol's truth). With ε ~ N(0, σ²):

* ``confident`` — ŷ_k = clip(0.7 + 0.2·p_k + ε, 0.7, 0.9), σ = 0.05: always sure of mastery.
* ``conservative`` — ŷ_k = clip(0.4 + 0.2·p_k + ε, 0.4, 0.6), σ = 0.05: hedges near 0.5.
* ``specialist`` — concept-specific: on its specialty concepts (a fixed half, chosen by a
  hash of the concept name) ŷ_k = clip(p_k + ε, 0, 1) with σ = 0.05; elsewhere
  ŷ_k = clip(0.5 + ε, 0, 1) with σ = 0.25 (it does not know those concepts).

The noise is drawn from a generator seeded by (entity seed, prompt context), so the same
question gets the same answer, like a deterministic LLM, and runs are reproducible.

Token usage is an ESTIMATE (``providers.tokens``: about 4 characters per token) of what the real
prompt (``providers.prompts``) and the JSON answer would take; priced like a hosted model
(``EntitySpec.input_usd_per_mtok``…) it estimates that model's cost.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import numpy as np

from providers.errors import EntityRejected
from providers.tokens import estimate_usage
from providers.types import EntityPrediction, PromptContext

__all__ = ["SIMULATED_STYLES", "SimulatedEntity", "simulated_family"]

SimulatedStyle = Literal["confident", "conservative", "specialist"]
SIMULATED_STYLES: tuple[SimulatedStyle, ...] = ("confident", "conservative", "specialist")


def _stable_int(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:8], "big")


def observed_proportions(context: PromptContext) -> dict[str, float]:
    """p_k: mean score on the context's items requiring concept k."""
    # One pass over the items (a student may answer thousands of items over hundreds of concepts).
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for item in context.items:
        for concept in item.concepts:
            sums[concept] = sums.get(concept, 0.0) + item.score
            counts[concept] = counts.get(concept, 0) + 1
    return {c: sums[c] / counts[c] for c in context.concepts if c in counts}


class SimulatedEntity:
    """A SIMULATED entity (see the module docstring for its noise model)."""

    def __init__(self, style: SimulatedStyle, *, name: str | None = None, seed: int = 0) -> None:
        if style not in SIMULATED_STYLES:
            raise ValueError(f"unknown simulated style {style!r} (use {', '.join(SIMULATED_STYLES)})")
        self.style = style
        self.name = name or f"sim:{style}"
        if not self.name.startswith("sim:"):
            raise ValueError(f"simulated entity names start with 'sim:', got {self.name!r}")
        self.seed = seed

    def _is_specialty(self, concept: str) -> bool:
        return _stable_int("specialty", self.name, str(self.seed), concept) % 2 == 0

    async def respond(self, context: PromptContext) -> EntityPrediction:
        if context.task != "diagnose":
            raise EntityRejected(f"simulated entities only diagnose; they cannot '{context.task}'", entity=self.name)
        rng = np.random.default_rng(_stable_int(self.name, str(self.seed), context.question_json()))
        mastery: dict[str, float] = {}
        for concept, p in observed_proportions(context).items():
            if self.style == "confident":
                value = np.clip(0.7 + 0.2 * p + rng.normal(0, 0.05), 0.7, 0.9)
            elif self.style == "conservative":
                value = np.clip(0.4 + 0.2 * p + rng.normal(0, 0.05), 0.4, 0.6)
            elif self._is_specialty(concept):
                value = np.clip(p + rng.normal(0, 0.05), 0.0, 1.0)
            else:
                value = np.clip(0.5 + rng.normal(0, 0.25), 0.0, 1.0)
            mastery[concept] = float(value)
        missing = [c for c in context.concepts if c not in mastery]
        return EntityPrediction(
            entity=self.name,
            model=f"simulated-{self.style}",
            status="partial" if missing else "ok",
            mastery=mastery,
            missing=missing,
            usage=estimate_usage(context, mastery),
            simulated=True,
        )

    async def aclose(self) -> None:
        return None


def simulated_family(seed: int = 0) -> dict[str, SimulatedEntity]:
    """The paper's three kinds of hosted entity, simulated: ``sim:confident``, ``sim:conservative``, ``sim:specialist``."""
    return {e.name: e for e in (SimulatedEntity(style, seed=seed) for style in SIMULATED_STYLES)}

"""The ``Entity`` protocol and the data that crosses it.

An entity is one member of the federation (a hosted LLM, a local LLM, the federated-trained
model). Like an httpx transport it is deliberately small: one async ``respond`` plus
``aclose``. Retries, deadlines, concurrency limits and privacy are wrappers that are
themselves entities, never flags on an adapter.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Entity", "EntityPrediction", "MasteryUncertainty", "PromptContext", "PromptItem", "Repair", "TokenUsage"]


class PromptItem(BaseModel):
    """One answered item as shown to an entity. Carries no student identifier by design."""

    model_config = ConfigDict(frozen=True)

    item_id: str
    text: str | None = None
    concepts: tuple[str, ...] = Field(description="the Q-matrix row: concepts this item requires")
    score: float = Field(ge=0.0, le=1.0, description="1 correct, 0 incorrect, or partial credit")
    answer: str | None = None


class PromptContext(BaseModel):
    """What an entity is asked: the Q-filtered concepts and the student's answered items.

    ``task`` is ``diagnose`` (mastery per concept) or ``tag`` (for each concept, how
    likely the single item requires it — automatic Q-matrix extraction; no student data).
    ``qmatrix_id`` names the Q-matrix the items come from, so an entity holding one model per
    Q-matrix (``local-fed``) can pick it; prompts to LLMs never include it. ``cache_scope`` names who
    may share cached answers to this context (the tenant): the response cache keys on it, so one
    tenant's request never hits — nor learns, by a hit's speed or its ``cache: hit`` — what another
    tenant asked; prompts never include it either. ``own_uncertainty`` says whether the aggregation will read an
    entity's own uncertainty (:class:`EntityPrediction.uncertainty`).
    """

    model_config = ConfigDict(frozen=True)

    task: Literal["diagnose", "tag"] = "diagnose"
    concepts: tuple[str, ...] = Field(description="Q-filtered: only concepts the answered items assess")
    items: tuple[PromptItem, ...]
    qmatrix_id: str | None = None
    cache_scope: str | None = None
    # Whether the aggregation reads an entity's own uncertainty (a posterior, or a selective federation's gauge): an
    # entity whose model has one (local-fed) computes it only then. Part of the cache key, so an answer cached without
    # it is never served to an aggregation that needs it.
    own_uncertainty: bool = True

    def question_json(self) -> str:
        """The question as an entity that ignores ``own_uncertainty`` sees it (an LLM's prompt has no such field):
        what such an entity's answer, its response-cache key and a SIMULATED entity's seed depend on — the same as the
        whole context's JSON before the flag existed."""
        return self.model_dump_json(exclude={"own_uncertainty"})


class TokenUsage(BaseModel):
    """Tokens a provider reported (billed) for one answer — all its attempts, when retried."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class Repair(BaseModel):
    """One documented repair applied to a raw answer (see ``providers.parsing``)."""

    rule: str
    concept: str | None = None
    detail: str = ""


class MasteryUncertainty(BaseModel):
    """An entity's own uncertainty about one concept's mastery, from the model that produced it.

    ``logit_sd[i]`` is the posterior sd of logit(mastery) when the mastery is ``at[i]`` (points increasing in
    (0, 1)): the spread is a curve, not one number, because it depends on where the student stands, and it is
    computed without the student's scores (only from which items were answered), so releasing it next to the
    privatized mastery spends no privacy. ``answers`` is how many answers the entity used for the concept.
    ``measured``: the model's parameters were fitted to data (a trained model); False for a model whose parameters
    are assumptions (local-fed's untrained evidence model), which the aggregator treats as of unknown skill.
    """

    model_config = ConfigDict(frozen=True)

    at: tuple[float, ...] = Field(min_length=1)
    logit_sd: tuple[float, ...] = Field(min_length=1)
    answers: int = Field(ge=0)
    measured: bool

    @model_validator(mode="after")
    def _curve(self) -> MasteryUncertainty:
        if len(self.at) != len(self.logit_sd):
            raise ValueError("at and logit_sd must have the same length")
        if any(not 0.0 < a < 1.0 for a in self.at) or any(b <= a for a, b in zip(self.at, self.at[1:])):
            raise ValueError("at must be increasing points inside (0, 1)")
        if any(not (s > 0.0 and s < float("inf")) for s in self.logit_sd):
            raise ValueError("logit_sd must be finite and > 0")
        return self


class EntityPrediction(BaseModel):
    """An entity's answer for one request.

    ``mastery`` holds a value in [0, 1] for each concept the entity answered usably;
    concepts it left out are listed in ``missing`` (never filled with a made-up value).
    ``cache`` is set by a response cache in front of the entity (``providers.cache``): ``hit`` (answered
    from the cache: no provider call, no tokens), ``miss`` (asked, then stored); None: no cache.
    ``uncertainty``: concept -> the entity's own uncertainty, where its model has one (local-fed); LLMs leave it empty.
    """

    entity: str
    model: str = ""
    status: Literal["ok", "partial"] = "ok"
    mastery: dict[str, float]
    missing: list[str] = Field(default_factory=list)
    latency_ms: float = 0.0
    usage: TokenUsage = Field(default_factory=TokenUsage)
    repairs: list[Repair] = Field(default_factory=list)
    attempts: int = 1
    simulated: bool = False
    privatized: bool = False
    cache: Literal["hit", "miss"] | None = None
    uncertainty: dict[str, MasteryUncertainty] = Field(default_factory=dict)


@runtime_checkable
class Entity(Protocol):
    """A federation member. ``respond`` raises ``providers.errors.EntityError`` on failure."""

    name: str

    async def respond(self, context: PromptContext) -> EntityPrediction: ...

    async def aclose(self) -> None: ...

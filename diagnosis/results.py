"""What a diagnosis produces: each entity's outcome, the aggregated result, and the errors that mean there is none.

Errors::

    AllEntitiesFailed       no entity produced a usable answer (each outcome names its reason)
    └── NoEntitySelected    no entity was there to ask (an empty federation, or a request naming none)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from diagnosis.measured import MeasuredError
from diagnosis.tiers import FederationReport
from providers import MasteryUncertainty

__all__ = ["AllEntitiesFailed", "DiagnosisResult", "EntityOutcome", "NoEntitySelected"]


@dataclass(frozen=True)
class EntityOutcome:
    """What one entity contributed to a diagnosis. ``mastery`` is privatized; raw values are never kept.

    ``skipped``: the entity could not serve the request at all; ``mastery`` is None and
    ``error`` holds the reason. ``reason`` is the reason class of a failed or skipped entity
    (``EntityError.code``: unavailable, timeout, rejected, parse_error, circuit_open, skipped).

    Usage: the tokens the provider reported for the call, every attempt included, and their price
    (``cost_usd``); a failed call counts what its provider reported before failing (an unreadable answer
    was billed; a timeout or refusal reports nothing: 0). ``cache``: ``hit``/``miss`` from a response
    cache in front of the entity, None without one; a hit used no tokens and costs nothing."""

    name: str
    status: Literal["ok", "partial", "failed", "skipped"]
    latency_ms: float
    mastery: dict[str, float] | None = None
    missing: list[str] = field(default_factory=list)
    error: str | None = None
    reason: str | None = None
    model: str = ""
    attempts: int = 0
    repairs: dict[str, int] = field(default_factory=dict)  # repair rule -> count
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache: Literal["hit", "miss"] | None = None
    uncertainty: dict[str, MasteryUncertainty] = field(default_factory=dict)  # the entity's own (score-free)


@dataclass(frozen=True)
class DiagnosisResult:
    student_id: str
    request_id: str
    concepts: tuple[str, ...]
    mastery: dict[str, float]
    missing_concepts: list[str]
    entities: list[EntityOutcome]
    privacy: dict[str, object]
    calibration_id: str | None
    latency_ms: float
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # Bayes post-processing only
    interval_level: float | None = None
    # where the intervals are a stack's measured error: that error, so a stored diagnosis can re-read them
    interval_error: MeasuredError | None = None
    aggregation: str = "mean"  # the aggregator's kind: mean or posterior
    # field -> {"calibrated": ..., "served": ...} where this request's noise differs from the calibration's
    calibration_mismatch: dict[str, dict[str, object]] | None = None
    federation: FederationReport = field(default_factory=lambda: FederationReport(mode="all"))


class AllEntitiesFailed(RuntimeError):
    """No entity produced a usable answer; ``outcomes`` holds each entity's reason."""

    def __init__(self, outcomes: Sequence[EntityOutcome]) -> None:
        self.outcomes = list(outcomes)
        reasons = "; ".join(f"{o.name} ({o.status}): {o.error}" for o in outcomes) or "no entities selected"
        super().__init__(f"no entity answered ({reasons})")


class NoEntitySelected(AllEntitiesFailed):
    """No entity was there to ask, so none could answer; ``cause`` says why (raised before anything is asked or
    charged). An :class:`AllEntitiesFailed` with no outcomes, so callers that handle that handle this too."""

    def __init__(self, cause: str) -> None:
        self.outcomes: list[EntityOutcome] = []
        self.cause = cause
        RuntimeError.__init__(self, f"no entity to ask: {cause}; no diagnosis was made")

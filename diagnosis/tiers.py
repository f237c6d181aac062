"""Which entities a diagnosis asks, and in what order: the federation mode of a request.

Like a Flower ``Strategy``, a mode decides and the pipeline runs: :meth:`FederationMode.stages`
orders the selected entities into stages, and after each stage that answered the pipeline
aggregates *every* answer so far and asks :meth:`FederationMode.verdict` whether to stop.

* :class:`AskAll` — the paper's federation: every selected entity at once, one stage.
* :class:`Selective` — tier by tier, cheapest first (``EntitySpec.tier``: 0 for the free, local
  members). After a tier it stops when every assessed concept's posterior credible interval is
  narrower than ``threshold``; otherwise it asks the next tier. A tier that released nothing
  (every member failed or was skipped) escalates; the last tier always answers.

The intervals are those of the request's aggregation when it is a posterior. A mean (plain,
residual or stacking) has none: then ``gauge`` — a posterior aggregator, by default the
uncalibrated one — judges the same privatized answers. Either way it is post-processing of
released answers and costs no privacy; the answer itself is still the request's aggregation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from diagnosis.aggregation import Aggregation, Aggregator
from diagnosis.posterior import PosteriorAggregator
from privacy import Mechanism

__all__ = [
    "AskAll",
    "AskCalibrated",
    "FederationMode",
    "FederationReport",
    "Selective",
    "Stage",
    "StageReport",
    "Verdict",
]

Predictions = Mapping[str, Mapping[str, float]]
Decision = Literal["all", "confident", "uncertain", "tier failed", "last tier", "deadline"]


@dataclass(frozen=True)
class Stage:
    """Entities asked together. ``tier`` None: every tier at once (:class:`AskAll`)."""

    tier: int | None
    entities: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    """After a stage: ``enough`` stops the diagnosis; ``reason`` says why, for the response."""

    enough: bool
    decision: Decision
    reason: str
    widest: float | None = None  # widest credible interval over the assessed concepts, when judged


@dataclass(frozen=True)
class StageReport:
    tier: int | None
    entities: tuple[str, ...]
    decision: Decision
    reason: str
    widest: float | None = None


@dataclass(frozen=True)
class FederationReport:
    """What a diagnosis asked: its mode, each stage in order, and whether it went past the first."""

    mode: str
    stages: list[StageReport] = field(default_factory=list)
    threshold: float | None = None

    @property
    def escalated(self) -> bool:
        return sum(1 for s in self.stages if s.decision != "deadline") > 1


class FederationMode(ABC):
    """Orders the selected entities into stages and says, after each, whether the answer is good enough."""

    name: ClassVar[Literal["all", "calibrated", "selective"]]
    threshold: float | None = None

    @abstractmethod
    def stages(self, tiers: Mapping[str, int]) -> list[Stage]:
        """``tiers``: each selected entity's tier, in the order the request selected them."""

    @abstractmethod
    def verdict(
        self, aggregation: Aggregation, answered: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Verdict:
        """Whether the aggregation of every answer so far is good enough to release without the next stage."""

    def gauge_needed(self, aggregation: Aggregation) -> bool:
        """Whether :meth:`verdict` would aggregate again (the pipeline moves big aggregations off the event loop)."""
        return False

    @property
    def reads_uncertainty(self) -> bool:
        """Whether :meth:`verdict` may read the entities' own uncertainty (through a posterior gauge)."""
        return False


class AskAll(FederationMode):
    """Every selected entity at once (the paper's federation)."""

    name = "all"

    def stages(self, tiers: Mapping[str, int]) -> list[Stage]:
        return [Stage(tier=None, entities=tuple(tiers))]

    def verdict(
        self, aggregation: Aggregation, answered: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Verdict:
        return Verdict(enough=True, decision="all", reason="every selected entity, all tiers at once")


class AskCalibrated(AskAll):
    """Every selected entity at once, after the service left out those the calibration gives no weight
    (``CalibrationParams.unhelpful``): the selection differs, the stages do not."""

    name = "calibrated"

    def verdict(
        self, aggregation: Aggregation, answered: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Verdict:
        return Verdict(enough=True, decision="all", reason="every entity the calibration gives weight, all tiers at once")


class Selective(FederationMode):
    """Tier by tier, stopping once every assessed concept's credible interval is narrower than ``threshold``."""

    name = "selective"

    def __init__(self, *, threshold: float, gauge: Aggregator | None = None) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if gauge is not None and gauge.kind != "posterior":
            raise ValueError(f"the gauge must be a posterior aggregator (credible intervals), not {gauge.kind!r}")
        self.threshold = float(threshold)
        self.gauge = gauge or PosteriorAggregator()

    def stages(self, tiers: Mapping[str, int]) -> list[Stage]:
        levels = sorted(set(tiers.values()))
        return [Stage(tier=t, entities=tuple(n for n, level in tiers.items() if level == t)) for t in levels]

    def gauge_needed(self, aggregation: Aggregation) -> bool:
        return not aggregation.intervals and bool(aggregation.mastery)

    @property
    def reads_uncertainty(self) -> bool:
        return True  # its gauge is a posterior

    def verdict(
        self, aggregation: Aggregation, answered: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Verdict:
        if aggregation.missing:
            return Verdict(
                enough=False, decision="uncertain",
                reason=f"uncertain: concept {aggregation.missing[0]!r} unanswered",
            )
        intervals = aggregation.intervals
        if self.gauge_needed(aggregation):
            intervals = self.gauge.aggregate(answered, concepts, mechanism=mechanism).intervals
        widths = {c: hi - lo for c, (lo, hi) in intervals.items()}
        concept, widest = max(widths.items(), key=lambda kv: kv[1])
        if widest < self.threshold:
            return Verdict(
                enough=True, decision="confident", widest=widest,
                reason=f"confident: widest interval {widest:.3g} < {self.threshold:g}",
            )
        return Verdict(
            enough=False, decision="uncertain", widest=widest,
            reason=f"uncertain: concept {concept!r} width {widest:.3g} >= {self.threshold:g}",
        )

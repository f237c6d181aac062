"""The fitted parameters of each calibration method, one type per method, each building its own aggregator.

A :class:`CalibrationRecord <calibration.record.CalibrationRecord>` holds exactly one of these, so a
record never carries fields of a method it is not. ``PARAMS_BY_METHOD`` maps the stored method name
back to its type when a record is read.

Every type carries ``excluded``: the entities the calibration left out for too few successful validation
answers (:mod:`calibration.exclusion`); its aggregator drops their answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, Self

from calibration.exclusion import ExcludingPosteriorAggregator, ExcludingResidualAggregator, ExcludingStackingAggregator
from calibration.selection import SelectedStackingAggregator
from diagnosis import (
    DEFAULT_ALPHA,
    Aggregator,
    BetaPrior,
    CalibrationTag,
    MeasuredError,
    PosteriorAggregator,
    ResidualAggregator,
    StackingAggregator,
)
from diagnosis.posterior import Estimate

__all__ = [
    "PARAMS_BY_METHOD",
    "BiasParams",
    "CalibrationParams",
    "PaperParams",
    "PosteriorParams",
    "StackingParams",
    "params_from_json",
]

# A non-negative stacking weight at or below this gives an entity no say in a concept (NNLS returns exact zeros).
_ZERO_WEIGHT = 1e-6


@dataclass(frozen=True)
class CalibrationParams(ABC):
    """What one calibration method fitted; ``aggregator`` applies it to a diagnosis."""

    method: ClassVar[str]
    # entity -> {"answers": successful validation answers, "students": validation students asked}: left out for
    # too few answers; the aggregator drops their answers (empty in records written before this existed).
    excluded: dict[str, dict[str, int]] = field(default_factory=dict)

    @abstractmethod
    def aggregator(self, *, calibration: CalibrationTag | None = None, estimate: Estimate = "mean") -> Aggregator:
        """The aggregator this calibration prescribes (``estimate`` matters to posterior ones only)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def with_excluded(self, excluded: Mapping[str, Mapping[str, int]]) -> Self:
        """These parameters with ``excluded`` left out (fitted without them)."""
        return replace(self, excluded={e: dict(c) for e, c in excluded.items()})

    def unhelpful(self, concepts: Sequence[str]) -> dict[str, str]:
        """entity -> why asking it cannot move a diagnosis of ``concepts`` under this calibration (not worth
        asking nor charging): left out for too few validation answers (every method)."""
        return {e: f"the calibration left it out: it answered {c.get('answers', 0)} of {c.get('students', 0)} "
                   "validation students" for e, c in sorted(self.excluded.items())}


@dataclass(frozen=True)
class _Residuals(CalibrationParams):
    alpha: float = DEFAULT_ALPHA
    residuals: dict[str, dict[str, float]] = field(default_factory=dict)  # entity -> concept -> r

    def aggregator(self, *, calibration: CalibrationTag | None = None, estimate: Estimate = "mean") -> Aggregator:
        options: dict[str, Any] = {"residuals": self.residuals, "alpha": self.alpha, "calibration": calibration}
        if self.excluded:
            return ExcludingResidualAggregator(excluded=self.excluded, **options)
        return ResidualAggregator(**options)


@dataclass(frozen=True)
class PaperParams(_Residuals):
    """The paper's residuals against the cross-entity mean (a no-op: they sum to zero)."""

    method: ClassVar[str] = "paper"


@dataclass(frozen=True)
class BiasParams(_Residuals):
    """Truth-referenced residuals r_jk = E[ŷ_jk − y_k] and their weight α."""

    method: ClassVar[str] = "bias"


@dataclass(frozen=True)
class StackingParams(CalibrationParams):
    """Per-concept non-negative entity weights and intercepts, optional isotonic maps applied first, and
    the weights pooled over all concepts for concepts with too few validation students of their own.

    ``selection`` (empty in records written before it existed) records the cross-validated choice between the
    full stack and each member alone (:mod:`calibration.selection`): every candidate's score and the one served.
    When a single member was chosen, ``weights``/``pooled_weights`` give every other entity 0 and ``fallback`` holds
    that member's name and the stack of the other members ({member, weights, intercepts, pooled_weights,
    pooled_intercept}), which answers a concept the member did not.

    A DP release (``release`` non-empty) holds one stack pooled over all concepts (``weights`` empty), or — when the
    DP guard served the plain mean — no weights at all: the aggregator then takes the plain mean, as an
    uncalibrated diagnosis does."""

    method: ClassVar[str] = "stacking"
    weights: dict[str, dict[str, float]] = field(default_factory=dict)  # concept -> entity -> w ≥ 0
    intercepts: dict[str, float] = field(default_factory=dict)  # concept -> b
    isotonic: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)  # entity -> concept -> [[x], [y]]
    pooled_weights: dict[str, float] = field(default_factory=dict)  # entity -> w ≥ 0
    pooled_intercept: float = 0.0
    selection: dict[str, Any] = field(default_factory=dict)
    fallback: dict[str, Any] = field(default_factory=dict)
    # The served candidate's error on held-out validation students (diagnosis.MeasuredError as JSON; empty in records
    # written before it existed, in DP-released ones and on binary truths): the intervals its diagnoses serve.
    measured_error: dict[str, Any] = field(default_factory=dict)
    # How a DP release was made (calibration.release_stack, calibration.release_guard; empty without release_epsilon
    # and in records written before it existed): each part's ε and mechanism, the released stack, the guard's choice.
    release: dict[str, Any] = field(default_factory=dict)

    def _stacking(self, fitted: Mapping[str, Any]) -> StackingAggregator:
        return StackingAggregator(weights=fitted.get("weights", {}), intercepts=fitted.get("intercepts", {}),
                                  isotonic=self.isotonic, pooled_weights=fitted.get("pooled_weights", {}),
                                  pooled_intercept=fitted.get("pooled_intercept", 0.0))

    def aggregator(self, *, calibration: CalibrationTag | None = None, estimate: Estimate = "mean") -> Aggregator:
        built = self._aggregator(calibration)
        built.measured_error = MeasuredError.from_json(self.measured_error)  # read by the pipeline (diagnosis.measured)
        return built

    def _aggregator(self, calibration: CalibrationTag | None) -> Aggregator:
        if self.fallback:
            served = {"weights": self.weights, "intercepts": self.intercepts, "pooled_weights": self.pooled_weights,
                      "pooled_intercept": self.pooled_intercept}
            return SelectedStackingAggregator(member=self.fallback["member"], selected=self._stacking(served),
                                              others=self._stacking(self.fallback), excluded=self.excluded,
                                              calibration=calibration)
        options: dict[str, Any] = {
            "weights": self.weights, "intercepts": self.intercepts, "isotonic": self.isotonic,
            "pooled_weights": self.pooled_weights, "pooled_intercept": self.pooled_intercept, "calibration": calibration,
        }
        if self.excluded:
            return ExcludingStackingAggregator(excluded=self.excluded, **options)
        return StackingAggregator(**options)

    def unhelpful(self, concepts: Sequence[str]) -> dict[str, str]:
        """Also every entity whose stacking weight is 0 for each of ``concepts`` (its concept's fitted weights, or the
        pooled ones for a concept fitted on too few students)."""
        found = super().unhelpful(concepts)
        entities = {e for w in self.weights.values() for e in w} | set(self.pooled_weights)
        for entity in sorted(entities - set(found)):
            weights = [(self.weights.get(c) or self.pooled_weights).get(entity) for c in concepts]
            if concepts and all(w is not None and w <= _ZERO_WEIGHT for w in weights):
                found[entity] = "its stacking weight is 0 for every concept of this request"
        return found

    def with_excluded(self, excluded: Mapping[str, Mapping[str, int]]) -> StackingParams:
        """Also shows each left-out entity's weight as 0 wherever weights were fitted. Never in empty weights: those
        mean "the plain mean", and a dict of zeros would turn that into the intercept."""
        zero = dict.fromkeys(excluded, 0.0)
        fallback = dict(self.fallback)
        if fallback:
            fallback["weights"] = {c: {**w, **zero} for c, w in fallback.get("weights", {}).items()}
            fallback["pooled_weights"] = {**fallback.get("pooled_weights", {}), **zero} if fallback.get("pooled_weights") else {}
        return replace(
            super().with_excluded(excluded),
            weights={c: {**w, **zero} for c, w in self.weights.items()},
            pooled_weights={**self.pooled_weights, **zero} if self.pooled_weights else {},
            fallback=fallback,
        )


@dataclass(frozen=True)
class PosteriorParams(CalibrationParams):
    """Bayes post-processing: a Beta prior per concept and each entity's error sd τ (clean answers).

    An entity the calibration did not measure is of unknown skill and is not weighed (issue 33: its agreement with
    others must not narrow an interval); giving it the widest measured τ still let an unmeasured entity count as
    much as the least accurate measured one. An entity it asked that answered too few validation students is left
    out too, and listed (``excluded``).
    """

    method: ClassVar[str] = "posterior"
    priors: dict[str, list[float]] = field(default_factory=dict)  # concept -> [a, b]
    entity_error_sd: dict[str, float] = field(default_factory=dict)  # entity -> τ

    def aggregator(self, *, calibration: CalibrationTag | None = None, estimate: Estimate = "mean") -> Aggregator:
        options: dict[str, Any] = {
            "priors": {c: BetaPrior(a=ab[0], b=ab[1]) for c, ab in self.priors.items()},
            "entity_error_sd": self.entity_error_sd, "default_error_sd": None,  # unmeasured: unknown skill
            "estimate": estimate, "calibration": calibration,
        }
        if self.excluded:  # left out and listed: see calibration.exclusion
            return ExcludingPosteriorAggregator(excluded=self.excluded, **options)
        return PosteriorAggregator(**options)


PARAMS_BY_METHOD: dict[str, type[CalibrationParams]] = {
    t.method: t for t in (PaperParams, BiasParams, StackingParams, PosteriorParams)
}


def params_from_json(method: str, data: dict[str, Any]) -> CalibrationParams:
    try:
        kind = PARAMS_BY_METHOD[method]
    except KeyError:
        raise ValueError(f"unknown calibration method {method!r} (known: {', '.join(PARAMS_BY_METHOD)})") from None
    return kind(**data)

"""Aggregation over entities and concepts: :func:`posterior_aggregate` and :class:`PosteriorAggregator`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from diagnosis.aggregation import Aggregation, Aggregator, answered_by
from diagnosis.posterior.grid import (
    DEFAULT_GRID_SIZE,
    DEFAULT_LEVEL,
    Estimate,
    PosteriorSummary,
    _check_level,
    posterior_summary,
)
from diagnosis.posterior.kernels import ReportModel
from diagnosis.posterior.priors import UNIFORM_PRIOR, BetaPrior

# --------------------------------------------------------------------------------------------
# Aggregation over entities and concepts
# --------------------------------------------------------------------------------------------

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> privatized value


@dataclass(frozen=True)
class PosteriorAggregation(Aggregation):
    """An :class:`Aggregation` whose mastery is a posterior estimate, with credible intervals.

    ``intervals``: concept -> (lower, upper), the equal-tailed ``level`` credible interval (the
    response's ``mastery_interval``). Unpacks as ``mastery, intervals = posterior_aggregate(...)``.
    """

    intervals: dict[str, tuple[float, float]]
    summaries: dict[str, PosteriorSummary]
    level: float
    estimate: str

    def __iter__(self) -> Iterator[dict]:
        yield self.mastery
        yield self.intervals


def _per_entity_mechanisms(
    mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object], entities: Iterable[str]
) -> dict[str, Mapping[str, object]]:
    if isinstance(mechanisms.get("mechanism"), str):  # one description shared by every entity
        return {e: mechanisms for e in entities}  # type: ignore[misc]
    out: dict[str, Mapping[str, object]] = {}
    for e in entities:
        if e not in mechanisms:
            raise ValueError(f"no mechanism description for entity {e!r}")
        out[e] = mechanisms[e]  # type: ignore[assignment]
    return out


def posterior_aggregate(
    predictions: Predictions,
    concepts: Sequence[str],
    mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object],
    priors: Mapping[str, BetaPrior] | None = None,
    entity_error_sd: Mapping[str, float] | None = None,
    estimate: Estimate = "mean",
    *,
    level: float = DEFAULT_LEVEL,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> PosteriorAggregation:
    """Posterior mastery per concept over the entities that answered it, with credible intervals.

    ``mechanisms``: entity -> ``Mechanism.describe()``, or one description used for every entity
    (the pipeline privatizes all entities with the same mechanism). ``priors``: concept -> prior
    (uniform where absent). ``entity_error_sd``: entity -> τ (0 where absent). Concepts no entity
    answered are listed in ``missing``, as in :func:`diagnosis.aggregation.residual_aggregate`.
    Raises :class:`DegeneratePosteriorError` when noiseless reports (τ = 0) disagree.
    """
    if estimate not in ("mean", "median"):
        raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
    _check_level(level)
    priors = priors or {}
    errors = entity_error_sd or {}
    descriptions = _per_entity_mechanisms(mechanisms, predictions)
    models = {e: ReportModel(descriptions[e], float(errors.get(e, 0.0))) for e in predictions}
    mastery: dict[str, float] = {}
    intervals: dict[str, tuple[float, float]] = {}
    summaries: dict[str, PosteriorSummary] = {}
    contributors, missing = answered_by(predictions, concepts)
    for concept, names in contributors.items():
        summary = posterior_summary(
            [(float(predictions[n][concept]), models[n]) for n in names],
            priors.get(concept, UNIFORM_PRIOR),
            level=level,
            grid_size=grid_size,
        )
        summaries[concept] = summary
        mastery[concept] = summary.estimate(estimate)
        intervals[concept] = summary.interval
    return PosteriorAggregation(
        mastery=mastery,
        missing=missing,
        contributors=contributors,
        intervals=intervals,
        summaries=summaries,
        level=float(level),
        estimate=estimate,
    )


class PosteriorAggregator(Aggregator):
    """Bayes post-processing as an :class:`Aggregator`.

    The mechanism is chosen per request, so bind it before aggregating:
    ``aggregator.with_mechanism(mechanism.describe()).aggregate(predictions, concepts)``.
    """

    def __init__(
        self,
        *,
        mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object] | None = None,
        priors: Mapping[str, BetaPrior] | None = None,
        entity_error_sd: Mapping[str, float] | None = None,
        estimate: Estimate = "mean",
        level: float = DEFAULT_LEVEL,
        grid_size: int = DEFAULT_GRID_SIZE,
        calibration_id: str | None = None,
    ) -> None:
        if estimate not in ("mean", "median"):
            raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
        _check_level(level)
        self.mechanisms = mechanisms
        self.priors = dict(priors or {})
        self.entity_error_sd = dict(entity_error_sd or {})
        self.estimate: Estimate = estimate
        self.level = float(level)
        self.grid_size = grid_size
        self._calibration_id = calibration_id

    @property
    def calibration_id(self) -> str | None:
        return self._calibration_id

    def with_mechanism(
        self, mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object]
    ) -> PosteriorAggregator:
        """A copy bound to this request's mechanism description(s)."""
        return PosteriorAggregator(
            mechanisms=mechanisms,
            priors=self.priors,
            entity_error_sd=self.entity_error_sd,
            estimate=self.estimate,
            level=self.level,
            grid_size=self.grid_size,
            calibration_id=self._calibration_id,
        )

    def aggregate(self, predictions: Predictions, concepts: Sequence[str]) -> PosteriorAggregation:
        if self.mechanisms is None:
            raise ValueError("PosteriorAggregator needs the request's mechanism: call with_mechanism() first")
        return posterior_aggregate(
            predictions,
            concepts,
            self.mechanisms,
            self.priors,
            self.entity_error_sd,
            self.estimate,
            level=self.level,
            grid_size=self.grid_size,
        )

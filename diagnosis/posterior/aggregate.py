"""Aggregation over entities and concepts: :func:`posterior_aggregate` and :class:`PosteriorAggregator`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from diagnosis.aggregation import Aggregation, Aggregator, answered_by
from diagnosis.calibrated import CalibrationTag
from diagnosis.posterior.grid import (
    DEFAULT_GRID_SIZE,
    DEFAULT_LEVEL,
    Estimate,
    PosteriorSummary,
    check_level,
    posterior_summaries,
)
from diagnosis.posterior.model import ReportModel
from diagnosis.posterior.priors import UNIFORM_PRIOR, BetaPrior
from privacy import Mechanism

# --------------------------------------------------------------------------------------------
# Aggregation over entities and concepts
# --------------------------------------------------------------------------------------------

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> privatized value


# τ assumed for an entity when no posterior calibration measured any: an uncalibrated posterior.
# A calibration gives an entity it did not measure its *widest* measured τ instead (never a tighter one).
DEFAULT_ENTITY_ERROR_SD = 0.1


@dataclass(frozen=True)
class PosteriorAggregation(Aggregation):
    """An :class:`Aggregation` whose mastery is a posterior estimate, with credible intervals.

    ``intervals``: concept -> (lower, upper), the equal-tailed ``level`` credible interval (the
    response's ``mastery_interval``). Unpacks as ``mastery, intervals = posterior_aggregate(...)``.
    """

    summaries: dict[str, PosteriorSummary] = field(default_factory=dict)
    estimate: str = "mean"

    def __iter__(self) -> Iterator[dict]:
        yield self.mastery
        yield self.intervals


@lru_cache(maxsize=256)
def _report_model(mechanism: Mechanism, tau: float) -> ReportModel:
    """The report model of a mechanism and τ, built once per (mechanism, τ): every diagnosis at the same noise
    level reuses its kernel constants (mechanisms are frozen and hashable)."""
    return ReportModel(mechanism, tau)


def _per_entity_mechanisms(
    mechanisms: Mechanism | Mapping[str, Mechanism], entities: Iterable[str]
) -> dict[str, Mechanism]:
    if isinstance(mechanisms, Mechanism):  # one mechanism shared by every entity
        return {e: mechanisms for e in entities}
    out: dict[str, Mechanism] = {}
    for e in entities:
        if e not in mechanisms:
            raise ValueError(f"no mechanism description for entity {e!r}")
        out[e] = mechanisms[e]
    return out


def posterior_aggregate(
    predictions: Predictions,
    concepts: Sequence[str],
    mechanisms: Mechanism | Mapping[str, Mechanism],
    priors: Mapping[str, BetaPrior] | None = None,
    entity_error_sd: Mapping[str, float] | None = None,
    estimate: Estimate = "mean",
    *,
    level: float = DEFAULT_LEVEL,
    grid_size: int = DEFAULT_GRID_SIZE,
    default_error_sd: float = 0.0,
) -> PosteriorAggregation:
    """Posterior mastery per concept over the entities that answered it, with credible intervals.

    ``mechanisms``: entity -> the :class:`privacy.Mechanism` its answers were released through, or one
    mechanism for every entity (the pipeline privatizes all entities with the same mechanism). ``priors``: concept -> prior
    (uniform where absent). ``entity_error_sd``: entity -> τ (``default_error_sd`` where absent). Concepts no entity
    answered are listed in ``missing``, as in :func:`diagnosis.aggregation.residual_aggregate`.
    Raises :class:`DegeneratePosteriorError` when noiseless reports (τ = 0) disagree.
    """
    if estimate not in ("mean", "median"):
        raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
    check_level(level)
    priors = priors or {}
    errors = entity_error_sd or {}
    released_by = _per_entity_mechanisms(mechanisms, predictions)
    entities = list(predictions)
    models = [_report_model(released_by[e], float(errors.get(e, default_error_sd))) for e in entities]
    contributors, missing = answered_by(predictions, concepts)
    answered = list(contributors)
    # One vectorized posterior over every answered concept (rows) and entity (columns; NaN: no answer).
    reports = np.full((len(answered), len(entities)), np.nan)
    for j, entity in enumerate(entities):
        values = predictions[entity]
        for i, concept in enumerate(answered):
            if concept in values:
                reports[i, j] = float(values[concept])
    table = posterior_summaries(
        reports, models, [priors.get(c, UNIFORM_PRIOR) for c in answered], level=level, grid_size=grid_size
    )
    summaries = {concept: table[i] for i, concept in enumerate(answered)}
    mastery = {concept: s.estimate(estimate) for concept, s in summaries.items()}
    intervals = {concept: s.interval for concept, s in summaries.items()}
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
    """Bayes post-processing as an :class:`Aggregator`: it models the mechanism passed to ``aggregate``.

    ``entity_error_sd``: entity -> τ; an entity not listed gets ``default_error_sd``.
    """

    kind = "posterior"

    def __init__(
        self,
        *,
        priors: Mapping[str, BetaPrior] | None = None,
        entity_error_sd: Mapping[str, float] | None = None,
        default_error_sd: float = DEFAULT_ENTITY_ERROR_SD,
        estimate: Estimate = "mean",
        level: float = DEFAULT_LEVEL,
        grid_size: int = DEFAULT_GRID_SIZE,
        calibration: CalibrationTag | None = None,
    ) -> None:
        if estimate not in ("mean", "median"):
            raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
        if default_error_sd < 0:
            raise ValueError(f"default_error_sd must be >= 0, got {default_error_sd}")
        check_level(level)
        super().__init__(calibration=calibration)
        self.priors = dict(priors or {})
        self.entity_error_sd = dict(entity_error_sd or {})
        self.default_error_sd = float(default_error_sd)
        self.estimate: Estimate = estimate
        self.level = float(level)
        self.grid_size = grid_size

    def aggregate(
        self, predictions: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> PosteriorAggregation:
        return posterior_aggregate(
            predictions,
            concepts,
            mechanism,
            self.priors,
            self.entity_error_sd,
            self.estimate,
            level=self.level,
            grid_size=self.grid_size,
            default_error_sd=self.default_error_sd,
        )

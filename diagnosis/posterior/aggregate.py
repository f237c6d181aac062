"""Aggregation over entities and concepts: :func:`posterior_aggregate` and :class:`PosteriorAggregator`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
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
from diagnosis.posterior.spread import beta_floor_width, own_log_likelihood, uncertainty_of, widen_to
from privacy import Mechanism
from providers import MasteryUncertainty

# --------------------------------------------------------------------------------------------
# Aggregation over entities and concepts
# --------------------------------------------------------------------------------------------

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> privatized value


# τ a calibration that measured no entity gives the entities it did not measure (calibration.params: an unmeasured
# entity gets the *widest* measured τ, this when there is none). The uncalibrated aggregator assumes no τ at all:
# an entity never measured is of unknown skill and is not weighed (PosteriorAggregator).
DEFAULT_ENTITY_ERROR_SD = 0.1


@dataclass(frozen=True)
class PosteriorAggregation(Aggregation):
    """An :class:`Aggregation` whose mastery is a posterior estimate, with credible intervals.

    ``intervals``: concept -> (lower, upper), the equal-tailed ``level`` credible interval (the
    response's ``mastery_interval``). Unpacks as ``mastery, intervals = posterior_aggregate(...)``.
    """

    summaries: dict[str, PosteriorSummary] = field(default_factory=dict)
    estimate: str = "mean"
    weighed: dict[str, list[str]] = field(default_factory=dict)  # concept -> entities whose answers carried weight

    def __iter__(self) -> Iterator[dict]:
        yield self.mastery
        yield self.intervals


@lru_cache(maxsize=256)
def _report_model(mechanism: Mechanism, tau: float) -> ReportModel:
    """The report model of a mechanism and τ, built once per (mechanism, τ): every diagnosis at the same noise
    level reuses its kernel constants (mechanisms are frozen and hashable)."""
    return ReportModel(mechanism, tau)


@lru_cache(maxsize=256)
def _prior_summary(prior: BetaPrior, level: float, grid_size: int) -> PosteriorSummary:
    """The summary of a concept no answer weighed: its prior's, on the grid a diagnosis without reports uses. Built
    once per (prior, level, grid): an uncalibrated federation weighs no entity (unknown skill), so every concept of
    every such diagnosis is one of these, and the grid work would be the same each time."""
    return posterior_summaries(np.empty((1, 0)), [], prior, level=level, grid_size=grid_size)[0]


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
    default_error_sd: float | None = 0.0,
) -> PosteriorAggregation:
    """Posterior mastery per concept over the entities that answered it, with credible intervals.

    ``mechanisms``: entity -> the :class:`privacy.Mechanism` its answers were released through, or one
    mechanism for every entity (the pipeline privatizes all entities with the same mechanism). ``priors``: concept -> prior
    (uniform where absent). ``entity_error_sd``: entity -> τ (``default_error_sd`` where absent; ``None``: an entity
    not listed is of unknown skill and its answers are not weighed). An answer carrying the entity's own uncertainty
    (:class:`UncertainAnswer`, local-fed) is weighed by it instead of τ, and the unknown-skill floor applies
    (:mod:`diagnosis.posterior.spread`). Concepts no entity answered are listed in ``missing``, as in
    :func:`diagnosis.aggregation.residual_aggregate`; ``weighed`` names, per concept, the entities given weight.
    Raises :class:`DegeneratePosteriorError` when noiseless reports (τ = 0) disagree.
    """
    if estimate not in ("mean", "median"):
        raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
    check_level(level)
    priors = priors or {}
    errors = entity_error_sd or {}
    released_by = _per_entity_mechanisms(mechanisms, predictions)
    contributors, missing = answered_by(predictions, concepts)
    answered = list(contributors)
    # Columns: the entities weighed by a τ (measured, or given the default); NaN: no answer, or its own uncertainty.
    by_tau = [e for e in predictions if e in errors or default_error_sd is not None]
    models = [_report_model(released_by[e], float(errors.get(e, default_error_sd or 0.0))) for e in by_tau]
    reports = np.full((len(answered), len(by_tau)), np.nan)
    own: dict[int, list[tuple[float, MasteryUncertainty, Mechanism]]] = {}
    weighed: dict[str, list[str]] = {}
    for i, concept in enumerate(answered):
        for entity in contributors[concept]:
            value = float(predictions[entity][concept])
            spread = uncertainty_of(predictions[entity], concept)
            if spread is not None:
                own.setdefault(i, []).append((value, spread, released_by[entity]))
            elif entity in by_tau:
                reports[i, by_tau.index(entity)] = value
            else:
                continue  # of unknown skill: not weighed
            weighed.setdefault(concept, []).append(entity)

    def extra(centres: np.ndarray) -> np.ndarray:
        out = np.zeros((len(answered), centres.size))
        for i, sources in own.items():
            for value, spread, mechanism in sources:
                out[i] += own_log_likelihood(value, spread, mechanism, centres)
        return out

    # an own-uncertainty source already holds a prior (its model's): the concept's Beta prior is not applied again
    row_priors = [UNIFORM_PRIOR if i in own else priors.get(c, UNIFORM_PRIOR) for i, c in enumerate(answered)]
    if not models and not own:  # no entity weighed (each of unknown skill): every concept's posterior is its prior
        summaries = {concept: _prior_summary(row_priors[i], level, grid_size) for i, concept in enumerate(answered)}
    else:
        table = posterior_summaries(
            reports, models, row_priors, level=level, grid_size=grid_size, extra_log_likelihood=extra if own else None
        )
        summaries = {concept: _floored(table[i], own.get(i, []), reports[i], level)
                     for i, concept in enumerate(answered)}
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
        weighed=weighed,
    )


def _floored(
    summary: PosteriorSummary, own: list[tuple[float, MasteryUncertainty, Mechanism]], taus: np.ndarray, level: float
) -> PosteriorSummary:
    """The unknown-skill floor (:mod:`diagnosis.posterior.spread`): where nothing measured was weighed, an interval
    is no narrower than the widest Beta interval of the answers behind it."""
    if not own or any(spread.measured for _, spread, _ in own) or not np.all(np.isnan(taus)):
        return summary
    answers = max(spread.answers for _, spread, _ in own)
    lower, upper = widen_to(summary.lower, summary.median, summary.upper, beta_floor_width(answers, level, summary.mean))
    return replace(summary, lower=lower, upper=upper)


class PosteriorAggregator(Aggregator):
    """Bayes post-processing as an :class:`Aggregator`: it models the mechanism passed to ``aggregate``.

    ``entity_error_sd``: entity -> τ; an entity not listed gets ``default_error_sd``. Its default, ``None``, treats
    an entity no calibration measured as of unknown skill: its answers are not weighed (issue 33: assuming
    τ = 0.1 for every uncalibrated entity made skill-less entities that agree look like strong evidence). An answer
    carrying the entity's own uncertainty is weighed by it (:mod:`diagnosis.posterior.spread`).
    """

    kind = "posterior"

    def __init__(
        self,
        *,
        priors: Mapping[str, BetaPrior] | None = None,
        entity_error_sd: Mapping[str, float] | None = None,
        default_error_sd: float | None = None,
        estimate: Estimate = "mean",
        level: float = DEFAULT_LEVEL,
        grid_size: int = DEFAULT_GRID_SIZE,
        calibration: CalibrationTag | None = None,
    ) -> None:
        if estimate not in ("mean", "median"):
            raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
        if default_error_sd is not None and default_error_sd < 0:
            raise ValueError(f"default_error_sd must be >= 0, got {default_error_sd}")
        check_level(level)
        super().__init__(calibration=calibration)
        self.priors = dict(priors or {})
        self.entity_error_sd = dict(entity_error_sd or {})
        self.default_error_sd = None if default_error_sd is None else float(default_error_sd)
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

"""Fitting the aggregation on validation students: the paper's residuals, truth-referenced bias
residuals, Bayes post-processing (``posterior``) and stacking (:mod:`calibration.stacking`).

Each calibrator is a type: ``_fit`` turns a :class:`ValidationSet` into that method's typed
parameters (:mod:`calibration.params`), ``_release`` re-derives them with differential privacy
(:mod:`calibration.release`). ``fit`` adds what every method shares: the checks, the optional DP
release, and the metrics.

**Metrics.** ``validation_mae`` is cross-validated: k-fold over the validation students (k =
``folds``, at most n), each fold predicted by parameters fitted on the other folds, on the answers
as diagnoses see them (privatized, with the mechanism modelled by posterior aggregators). The fit
on all students scored on those same students is ``validation_mae_in_sample`` (optimistic: it has
seen them); ``validation_mae_uncalibrated`` is the plain mean of the same answers.

What a calibration releases about the validation students: residuals are per-(entity, concept)
means over n students, stacking weights are least-squares fits on them, posterior priors and τ
are moments and root-mean-square errors, and the metrics are averages. Without ``release_epsilon``
these are released without noise; the record's ``notes`` say so. With ``release_epsilon`` every released value is a
noisy one: the three MAEs above are statistics of the students outside the release's accounting, so they are not
computed nor published; only what the release itself published noisily is (a method's ``_release`` may return such
metrics: stacking's DP guard, :mod:`calibration.release_guard`), beside ``n_students`` and ``cv_folds`` (public
under replace-one DP) and ``entities_excluded``: which entities answered too few validation students is released
without noise, outside ε, as docs/privacy.md says.

**Entities with too few answers.** ``fit`` first leaves out every entity with fewer than ``min_answers``
successful validation answers (:mod:`calibration.exclusion`): the method is fitted (and released) on the other
entities' answers, the parameters list the left-out ones, and their aggregator drops those entities' answers. Which
entities answered how many validation students is released as it is (it counts the entities' failures). The
uncalibrated metric keeps every answer, as an uncalibrated diagnosis does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from calibration.exclusion import DEFAULT_MIN_ANSWERS, entities_to_exclude, exclusion_note, required_answers
from calibration.params import BiasParams, CalibrationParams, PaperParams, PosteriorParams
from calibration.release import noisy_posterior, noisy_residuals
from calibration.validation import Predictions, ValidationSet
from diagnosis import (
    DEFAULT_ALPHA,
    NO_NOISE,
    fit_concept_priors,
    fit_entity_error_sd,
    paper_residuals,
)
from privacy import Mechanism

__all__ = [
    "DEFAULT_FOLDS",
    "BiasCalibrator",
    "Calibrator",
    "FittedCalibration",
    "PaperCalibrator",
    "PosteriorCalibrator",
    "Released",
    "validation_mae",
]

DEFAULT_FOLDS = 5

RELEASE_NOTE = (
    "Released without noise: per-(entity, concept) means and fitted weights over the validation students' "
    "privatized entity answers and their truth, and the validation MAE."
)
WITHHELD_NOTE = (
    "no validation MAE is published: computed from the validation students without noise, it would be a release "
    "outside the ε accounted for (the metrics hold only counts and what the release published with noise)"
)


@dataclass
class Released:
    """A DP release: the re-derived parameters, notes on how, and metrics it published with noise (nothing else)."""

    params: CalibrationParams
    notes: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class FittedCalibration:
    params: CalibrationParams
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def method(self) -> str:
        return self.params.method

    def predict(
        self, predictions: Predictions, concepts: Sequence[str], *, mechanism: Mechanism = NO_NOISE
    ) -> dict[str, float]:
        return self.params.aggregator().aggregate(predictions, concepts, mechanism=mechanism).mastery


def validation_mae(params: CalibrationParams, data: ValidationSet) -> float:
    """MAE of ``params``' aggregator on ``data``'s answers (as released) against the truth."""
    aggregator = params.aggregator()
    errors: list[float] = []
    for answers, truth, mechanism in zip(data.answers, data.truths, data.mechanisms):
        got = aggregator.aggregate(answers, list(truth), mechanism=mechanism).mastery
        errors.extend(abs(got[c] - truth[c]) for c in truth if c in got)
    return float(np.mean(errors)) if errors else float("nan")


def _cross_validated_mae(fit: Callable[[ValidationSet], CalibrationParams], data: ValidationSet, folds: int) -> float:
    """k-fold MAE over students (seeded assignment); NaN with fewer than two students."""
    k = min(folds, len(data))
    if k < 2:
        return float("nan")
    fold_of = np.random.default_rng(0).permutation(len(data)) % k
    errors: list[float] = []
    for f in range(k):
        train = data.subset(np.flatnonzero(fold_of != f).tolist())
        held = data.subset(np.flatnonzero(fold_of == f).tolist())
        mae = validation_mae(fit(train), held)
        if not np.isnan(mae):
            errors.append(mae * sum(len(t) for t in held.truths))  # weight by pairs, as one pooled MAE
    pairs = sum(len(t) for t in data.truths)
    return float(sum(errors) / pairs) if errors and pairs else float("nan")


class Calibrator(ABC):
    method: ClassVar[str]
    fits_clean_answers: ClassVar[bool] = False  # True: _fit reads the clean answers (ValidationSet.clean)
    # True: a DP release scores its candidates on responses kept back from the entities (ValidationSet.checks)
    scores_held_out: ClassVar[bool] = False

    def fit(
        self,
        data: ValidationSet,
        *,
        release_epsilon: float | None = None,
        rng: np.random.Generator | None = None,
        folds: int = DEFAULT_FOLDS,
        min_answers: int = DEFAULT_MIN_ANSWERS,
    ) -> FittedCalibration:
        """Fit on the validation students; with ``release_epsilon`` the released parameters are
        differentially private (``calibration.release``) and no un-noised metric is published (module docstring).
        Entities with fewer than ``min_answers`` successful answers are left out (module docstring)."""
        if not len(data):
            raise ValueError("calibration needs at least one validation student")
        if folds < 2:
            raise ValueError(f"folds must be >= 2, got {folds}")
        excluded = entities_to_exclude(data, min_answers)
        kept = data.without(excluded)

        def fit_kept(part: ValidationSet) -> CalibrationParams:
            return self._fit(part.without(excluded))[0].with_excluded(excluded)

        params, notes = self._fit(kept)
        if release_epsilon is not None:  # the un-noised fit's notes describe the students (e.g. concepts with few
            notes = []                   # complete rows): only the release's own notes are published
        if excluded:
            notes.append(exclusion_note(excluded, required_answers(data, min_answers)))
        metrics = {"cv_folds": float(min(folds, len(data))), "n_students": float(len(data)),
                   "entities_excluded": float(len(excluded))}
        if release_epsilon is not None:
            if not release_epsilon > 0:
                raise ValueError(f"release_epsilon must be > 0, got {release_epsilon}")
            released = self._release(params, kept, release_epsilon, rng if rng is not None else np.random.default_rng())
            notes.append(
                f"released with differential privacy: ε = {release_epsilon:g} over the validation students (Laplace "
                "noise on the released statistics, sensitivity per student; see calibration/release.py)"
            )
            notes.extend([*released.notes, WITHHELD_NOTE])
            return FittedCalibration(params=released.params.with_excluded(excluded),
                                     metrics={**metrics, **released.metrics}, notes=notes)
        notes.append(RELEASE_NOTE)
        params = params.with_excluded(excluded)
        metrics = {
            "validation_mae_uncalibrated": validation_mae(BiasParams(alpha=0.0), data),
            "validation_mae": _cross_validated_mae(fit_kept, data, folds),
            "validation_mae_in_sample": validation_mae(params, data),
            **metrics,
        }
        return FittedCalibration(params=params, metrics=metrics, notes=notes)

    @abstractmethod
    def _fit(self, data: ValidationSet) -> tuple[CalibrationParams, list[str]]:
        """This method's parameters fitted on ``data``, and notes on how."""

    @abstractmethod
    def _release(
        self, params: CalibrationParams, data: ValidationSet, epsilon: float, rng: np.random.Generator
    ) -> Released:
        """The parameters re-derived from statistics released with ε-DP over the validation students."""


def _grid_alpha(
    make: Callable[[float], CalibrationParams], grid: Sequence[float], data: ValidationSet, prefer: float
) -> CalibrationParams:
    """The α on ``grid`` with the lowest validation MAE; ties go to the α nearest ``prefer``."""
    # Rounded so float noise (a no-op correction differs by 1e-17) cannot break a real tie.
    scored = [(round(validation_mae(make(a), data), 12), abs(a - prefer), a) for a in grid]
    return make(min(scored)[2])


class PaperCalibrator(Calibrator):
    """The paper: r_j = E[ŷ_j − ȳ] against the cross-entity mean, α by grid search in [0.2, 0.4].

    Σ_j r_j = 0, so for equal weights this is a no-op (every α gives the same MAE and the
    tie-break keeps the paper's 0.3). Kept for faithfulness; the record says so.
    """

    method = "paper"

    def __init__(self, *, alpha_grid: Sequence[float] = (0.2, 0.25, 0.3, 0.35, 0.4)) -> None:
        self.alpha_grid = tuple(alpha_grid)

    def _fit(self, data: ValidationSet) -> tuple[CalibrationParams, list[str]]:
        residuals = paper_residuals(data.answers)
        params = _grid_alpha(lambda a: PaperParams(alpha=a, residuals=residuals), self.alpha_grid, data, DEFAULT_ALPHA)
        return params, ["paper residuals are taken against the cross-entity mean: they sum to zero, a no-op"]

    def _release(
        self, params: CalibrationParams, data: ValidationSet, epsilon: float, rng: np.random.Generator
    ) -> Released:
        # The residuals use no truth, but α was chosen by the validation MAE, a statistic of the students' truths:
        # released, α is the paper's own (a no-op either way when every entity answered: the residuals sum to zero).
        assert isinstance(params, PaperParams)
        return Released(PaperParams(alpha=DEFAULT_ALPHA, residuals=params.residuals),
                        notes=[f"released with the paper's α = {DEFAULT_ALPHA:g}: a grid choice by the validation "
                               "MAE would be a release outside the ε accounted for"])


class BiasCalibrator(Calibrator):
    """Truth-referenced: r_jk = E[ŷ_jk − y_k] per entity and concept; α by grid search in [0, 1]."""

    method = "bias"

    def __init__(self, *, alpha_grid: Sequence[float] = tuple(np.round(np.linspace(0, 1, 11), 2))) -> None:
        self.alpha_grid = tuple(float(a) for a in alpha_grid)

    def _fit(self, data: ValidationSet) -> tuple[CalibrationParams, list[str]]:
        sums: dict[str, dict[str, list[float]]] = {}
        for preds, truth in zip(data.answers, data.truths):
            for entity, values in preds.items():
                for concept, value in values.items():
                    if concept in truth:
                        sums.setdefault(entity, {}).setdefault(concept, []).append(value - truth[concept])
        residuals = {e: {c: float(np.mean(v)) for c, v in by_c.items()} for e, by_c in sums.items()}
        return _grid_alpha(lambda a: BiasParams(alpha=a, residuals=residuals), self.alpha_grid, data, 1.0), []

    def _release(
        self, params: CalibrationParams, data: ValidationSet, epsilon: float, rng: np.random.Generator
    ) -> Released:
        assert isinstance(params, BiasParams)
        residuals = noisy_residuals(data.answers, data.truths, epsilon=epsilon, rng=rng)
        # α = 1 (the residuals applied whole), not the grid's choice: that choice reads the un-noised validation
        # MAE, a statistic of the students outside the ε accounted for.
        return Released(BiasParams(alpha=1.0, residuals=residuals),
                        notes=["released with α = 1: a grid choice by the validation MAE would be a release outside "
                               "the ε accounted for"])


class PosteriorCalibrator(Calibrator):
    """Bayes post-processing: a Beta prior per concept (from the validation truth) and each
    entity's error sd τ (RMS error of its *clean* answers against the truth, at least ``min_sd``).

    τ is fitted on the clean answers because the mechanism's noise is modelled exactly at diagnosis
    time (noisy answers would count it twice); the metrics score the privatized answers.
    """

    method = "posterior"
    fits_clean_answers = True

    def __init__(self, *, min_sd: float = 0.02) -> None:
        self.min_sd = min_sd

    def _fit(self, data: ValidationSet) -> tuple[CalibrationParams, list[str]]:
        priors = fit_concept_priors(data.truths)
        errors: dict[str, tuple[list[float], list[float]]] = {}
        for preds, truth in zip(data.clean_answers(), data.truths):
            for entity, values in preds.items():
                for concept, value in values.items():
                    if concept in truth:
                        errors.setdefault(entity, ([], []))[0].append(value)
                        errors[entity][1].append(truth[concept])
        tau = {e: max(self.min_sd, fit_entity_error_sd(a, t)) for e, (a, t) in errors.items()}
        params = PosteriorParams(priors={c: [p.a, p.b] for c, p in priors.items()}, entity_error_sd=tau)
        return params, [
            "posterior: priors and entity error sd fitted on clean validation answers; the mechanism's noise is "
            "modelled exactly when diagnosing; an entity without a fitted τ is of unknown skill and is not weighed"
        ]

    def _release(
        self, params: CalibrationParams, data: ValidationSet, epsilon: float, rng: np.random.Generator
    ) -> Released:
        priors, tau = noisy_posterior(data.clean_answers(), data.truths, epsilon=epsilon, rng=rng)
        return Released(PosteriorParams(priors=priors, entity_error_sd=tau))

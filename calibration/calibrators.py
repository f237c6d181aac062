"""Fitting the aggregation on a validation split: the paper's residuals, truth-referenced
bias residuals, and per-concept stacking.

Inputs are, per validation student, the entities' *privatized* predictions (entity ->
concept -> value, at the same noise level diagnosis will use) and the truth (concept ->
value). Each calibrator returns the fitted parameters and validation metrics; the
caller wraps them in a ``CalibrationRecord``.

What a calibration releases about the validation students: residuals are per-(entity,
concept) means over n students, stacking weights are least-squares fits on them, and
the validation MAE is an average. These are aggregate statistics of the validation
students' data, released without noise here; the record's ``notes`` say so.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from diagnosis.aggregation import (
    DEFAULT_ALPHA,
    paper_residuals,
    residual_aggregate,
    stacked_aggregate,
)

__all__ = [
    "BiasCalibrator",
    "CALIBRATORS",
    "Calibrator",
    "FittedCalibration",
    "PaperCalibrator",
    "PosteriorCalibrator",
    "StackingCalibrator",
    "make_calibrator",
]

Predictions = Mapping[str, Mapping[str, float]]
Truth = Mapping[str, float]

RELEASE_NOTE = (
    "Released without noise: per-(entity, concept) means and fitted weights over the validation students' "
    "privatized entity answers and their truth, and the validation MAE."
)


@dataclass
class FittedCalibration:
    method: str
    alpha: float = DEFAULT_ALPHA
    residuals: dict[str, dict[str, float]] = field(default_factory=dict)
    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    intercepts: dict[str, float] = field(default_factory=dict)
    isotonic: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    priors: dict[str, list[float]] = field(default_factory=dict)
    entity_error_sd: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def predict(self, predictions: Predictions, concepts: Sequence[str]) -> dict[str, float]:
        if self.method == "posterior":
            from diagnosis.posterior import BetaPrior, posterior_aggregate

            priors = {c: BetaPrior(a=ab[0], b=ab[1]) for c, ab in self.priors.items()}
            none = {"mechanism": "none", "epsilon": None, "sensitivity": None, "noise_scale": 0.0}
            return posterior_aggregate(predictions, concepts, none, priors, self.entity_error_sd).mastery
        if self.method == "stacking":
            return stacked_aggregate(
                predictions, concepts, weights=self.weights, intercepts=self.intercepts, isotonic=self.isotonic
            ).mastery
        return residual_aggregate(predictions, concepts, residuals=self.residuals, alpha=self.alpha).mastery


def _validation_mae(fitted: FittedCalibration, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> float:
    errors: list[float] = []
    for preds, truth in zip(predictions, truths):
        concepts = list(truth)
        got = fitted.predict(preds, concepts)
        errors.extend(abs(got[c] - truth[c]) for c in concepts if c in got)
    return float(np.mean(errors)) if errors else float("nan")


def _plain_mae(predictions: Sequence[Predictions], truths: Sequence[Truth]) -> float:
    return _validation_mae(FittedCalibration(method="none", alpha=0.0), predictions, truths)


class Calibrator(ABC):
    method: str

    def fit(
        self,
        predictions: Sequence[Predictions],
        truths: Sequence[Truth],
        *,
        release_epsilon: float | None = None,
        rng: np.random.Generator | None = None,
    ) -> FittedCalibration:
        """Fit on the validation split; with ``release_epsilon`` the released parameters are
        differentially private (``calibration.release``) and the metrics describe them."""
        if len(predictions) != len(truths):
            raise ValueError(f"{len(predictions)} prediction sets but {len(truths)} truths")
        if not predictions:
            raise ValueError("calibration needs at least one validation student")
        fitted = self._fit(predictions, truths)
        if release_epsilon is not None:
            if not release_epsilon > 0:
                raise ValueError(f"release_epsilon must be > 0, got {release_epsilon}")
            self._privatize(fitted, predictions, truths, release_epsilon, rng if rng is not None else np.random.default_rng())
        fitted.metrics = {
            "validation_mae_uncalibrated": _plain_mae(predictions, truths),
            "validation_mae": _validation_mae(fitted, predictions, truths),
            "n_students": float(len(predictions)),
        }
        if release_epsilon is None:
            fitted.notes.append(RELEASE_NOTE)
        return fitted

    def _privatize(
        self, fitted: FittedCalibration, predictions: Sequence[Predictions], truths: Sequence[Truth], epsilon: float, rng: np.random.Generator
    ) -> None:
        from calibration.release import noisy_posterior, noisy_residuals, noisy_stacking

        if fitted.method in ("bias", "paper"):
            if fitted.method == "paper":
                # The paper's residuals are a no-op and carry no truth; nothing about the truth is released.
                fitted.notes.append(f"released with ε = {epsilon:g}: the paper's residuals use no truth, alpha only")
                return
            fitted.residuals = noisy_residuals(predictions, truths, epsilon=epsilon, rng=rng)
        elif fitted.method == "posterior":
            fitted.priors, fitted.entity_error_sd = noisy_posterior(predictions, truths, epsilon=epsilon, rng=rng)
        elif fitted.method == "stacking":
            if fitted.isotonic:
                raise ValueError("isotonic maps have no DP release here: calibrate with release_epsilon \"none\" "
                                 "(e.g. on simulated or public validation students) or without isotonic")
            fitted.weights, fitted.intercepts = noisy_stacking(predictions, truths, epsilon=epsilon, rng=rng)
        fitted.notes.append(
            f"released with differential privacy: ε = {epsilon:g} over the validation students (Laplace noise on the "
            "released statistics, sensitivity per student; see calibration/release.py)"
        )

    @abstractmethod
    def _fit(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> FittedCalibration: ...


def _grid_alpha(
    make: Callable[[float], FittedCalibration], grid: Sequence[float], predictions: Sequence[Predictions], truths: Sequence[Truth], prefer: float
) -> FittedCalibration:
    """The α on ``grid`` with the lowest validation MAE; ties go to the α nearest ``prefer``."""
    # Rounded so float noise (a no-op correction differs by 1e-17) cannot break a real tie.
    scored = [(round(_validation_mae(make(a), predictions, truths), 12), abs(a - prefer), a) for a in grid]
    best = min(scored)[2]
    return make(best)


class PaperCalibrator(Calibrator):
    """The paper: r_j = E[ŷ_j − ȳ] against the cross-entity mean, α by grid search in [0.2, 0.4].

    Σ_j r_j = 0, so for equal weights this is a no-op (every α gives the same MAE and the
    tie-break keeps the paper's 0.3). Kept for faithfulness; the record says so.
    """

    method = "paper"

    def __init__(self, *, alpha_grid: Sequence[float] = (0.2, 0.25, 0.3, 0.35, 0.4)) -> None:
        self.alpha_grid = tuple(alpha_grid)

    def _fit(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> FittedCalibration:
        residuals = paper_residuals(predictions)
        fitted = _grid_alpha(
            lambda a: FittedCalibration(method=self.method, alpha=a, residuals=residuals),
            self.alpha_grid, predictions, truths, prefer=DEFAULT_ALPHA,
        )
        fitted.notes.append("paper residuals are taken against the cross-entity mean: they sum to zero, a no-op")
        return fitted


class BiasCalibrator(Calibrator):
    """Truth-referenced: r_jk = E[ŷ_jk − y_k] per entity and concept; α by grid search in [0, 1]."""

    method = "bias"

    def __init__(self, *, alpha_grid: Sequence[float] = tuple(np.round(np.linspace(0, 1, 11), 2))) -> None:
        self.alpha_grid = tuple(float(a) for a in alpha_grid)

    def _fit(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> FittedCalibration:
        sums: dict[str, dict[str, list[float]]] = {}
        for preds, truth in zip(predictions, truths):
            for entity, values in preds.items():
                for concept, value in values.items():
                    if concept in truth:
                        sums.setdefault(entity, {}).setdefault(concept, []).append(value - truth[concept])
        residuals = {e: {c: float(np.mean(v)) for c, v in by_c.items()} for e, by_c in sums.items()}
        return _grid_alpha(
            lambda a: FittedCalibration(method=self.method, alpha=a, residuals=residuals),
            self.alpha_grid, predictions, truths, prefer=1.0,
        )


class StackingCalibrator(Calibrator):
    """Per concept: y ≈ b + Σ_j w_j ŷ_j with w ≥ 0 (NNLS on centred data, optional ridge λ).

    Fitted on the validation students for whom every entity answered that concept; a
    concept with fewer than ``min_students`` such students keeps the plain mean (noted).
    With ``isotonic``, each entity's answers are first mapped through a monotone curve fitted
    per concept (isotonic regression of the truth on the answer), so an entity that is right
    in order but wrong in scale is straightened before it is weighted.
    """

    method = "stacking"

    def __init__(self, *, ridge: float = 0.0, min_students: int = 5, isotonic: bool = False) -> None:
        if ridge < 0:
            raise ValueError("ridge must be >= 0")
        self.ridge, self.min_students, self.isotonic = ridge, min_students, isotonic

    def _isotonic_maps(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> dict[str, dict[str, list[list[float]]]]:
        from scipy.optimize import isotonic_regression

        pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for preds, truth in zip(predictions, truths):
            for entity, values in preds.items():
                for concept, value in values.items():
                    if concept in truth:
                        pairs.setdefault((entity, concept), []).append((float(value), truth[concept]))
        maps: dict[str, dict[str, list[list[float]]]] = {}
        for (entity, concept), rows in pairs.items():
            if len(rows) < self.min_students:
                continue
            rows.sort()
            x = np.array([r[0] for r in rows])
            y = isotonic_regression(np.array([r[1] for r in rows])).x
            knots_x, index = np.unique(x, return_index=True)  # np.interp needs increasing x
            ends = [*index[1:], len(x)]
            knots_y = [float(np.mean(y[i:j])) for i, j in zip(index, ends)]
            maps.setdefault(entity, {})[concept] = [knots_x.tolist(), knots_y]
        return maps

    def _fit(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> FittedCalibration:
        isotonic = self._isotonic_maps(predictions, truths) if self.isotonic else {}
        if isotonic:
            from diagnosis.aggregation import apply_isotonic

            predictions = [apply_isotonic(p, isotonic) for p in predictions]
        entities = sorted({e for preds in predictions for e in preds})
        concepts = sorted({c for truth in truths for c in truth})
        weights: dict[str, dict[str, float]] = {}
        intercepts: dict[str, float] = {}
        notes: list[str] = []
        for concept in concepts:
            rows = [
                ([preds[e][concept] for e in entities], truth[concept])
                for preds, truth in zip(predictions, truths)
                if concept in truth and all(e in preds and concept in preds[e] for e in entities)
            ]
            if len(rows) < self.min_students:
                notes.append(f"concept '{concept}': {len(rows)} complete validation rows, plain mean kept")
                continue
            x = np.array([r[0] for r in rows], dtype=float)
            y = np.array([r[1] for r in rows], dtype=float)
            x_mean, y_mean = x.mean(axis=0), y.mean()
            xc, yc = x - x_mean, y - y_mean
            if self.ridge > 0:
                xc = np.vstack([xc, np.sqrt(self.ridge) * np.eye(len(entities))])
                yc = np.concatenate([yc, np.zeros(len(entities))])
            w, _ = nnls(xc, yc)
            weights[concept] = {e: float(wj) for e, wj in zip(entities, w)}
            intercepts[concept] = float(y_mean - x_mean @ w)
        if isotonic:
            notes.append("each entity's answers are mapped through an isotonic curve per concept before weighting")
        return FittedCalibration(method=self.method, weights=weights, intercepts=intercepts, isotonic=isotonic, notes=notes)


class PosteriorCalibrator(Calibrator):
    """Bayes post-processing: a Beta prior per concept (from the validation truth) and each
    entity's error sd τ (RMS error of its answers against the truth, at least ``min_sd``).

    Fit it on *clean* answers: the mechanism's noise is modelled exactly at diagnosis time,
    and noisy answers would count it twice (the calibration job runs without noise for this method).
    """

    method = "posterior"

    def __init__(self, *, min_sd: float = 0.02) -> None:
        self.min_sd = min_sd

    def _fit(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> FittedCalibration:
        from diagnosis.posterior import fit_concept_priors, fit_entity_error_sd

        priors = fit_concept_priors(truths)
        errors: dict[str, tuple[list[float], list[float]]] = {}
        for preds, truth in zip(predictions, truths):
            for entity, values in preds.items():
                for concept, value in values.items():
                    if concept in truth:
                        errors.setdefault(entity, ([], []))[0].append(value)
                        errors[entity][1].append(truth[concept])
        tau = {e: max(self.min_sd, fit_entity_error_sd(a, t)) for e, (a, t) in errors.items()}
        return FittedCalibration(
            method=self.method,
            priors={c: [p.a, p.b] for c, p in priors.items()},
            entity_error_sd=tau,
            notes=["posterior: priors and entity error sd fitted on clean validation answers; "
                   "the mechanism's noise is modelled exactly when diagnosing"],
        )


CALIBRATORS: dict[str, type[Calibrator]] = {
    "paper": PaperCalibrator,
    "bias": BiasCalibrator,
    "stacking": StackingCalibrator,
    "posterior": PosteriorCalibrator,
}


def make_calibrator(method: str, **options: object) -> Calibrator:
    try:
        return CALIBRATORS[method](**options)  # type: ignore[arg-type]
    except KeyError:
        raise ValueError(f"unknown calibration method {method!r} (use {', '.join(CALIBRATORS)})") from None

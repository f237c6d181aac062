"""Stacking: per concept y ≈ b + Σ_j w_j ŷ_j with w ≥ 0, fitted on the validation students' answers
at the noise diagnoses will use, so a strong entity keeps its weight and weak ones get little.

Rows are (student, concept) pairs where every entity answered. A concept with at least
``min_students`` rows gets its own weights; the rest use weights pooled over all concepts' rows
(one fit for the whole Q-matrix, so a concept seen by few validation students is not left to the
plain mean, which would drag a strong member down to the weak ones). With ``isotonic`` each
entity's answers are first mapped through a monotone curve fitted per concept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import isotonic_regression, nnls

from calibration.calibrators import Calibrator
from calibration.params import CalibrationParams, StackingParams
from calibration.release import noisy_stacking
from calibration.validation import Predictions, Truth, ValidationSet, stacking_rows
from diagnosis.aggregation import apply_isotonic

__all__ = ["StackingCalibrator"]


class StackingCalibrator(Calibrator):
    """See the module docstring. ``ridge`` ≥ 0 shrinks the weights (NNLS on centred data)."""

    method = "stacking"

    def __init__(self, *, ridge: float = 0.0, min_students: int = 20, isotonic: bool = False) -> None:
        if ridge < 0:
            raise ValueError("ridge must be >= 0")
        if min_students < 2:
            raise ValueError("min_students must be >= 2")
        self.ridge, self.min_students, self.isotonic = ridge, min_students, isotonic

    def _nnls(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        x_mean, y_mean = x.mean(axis=0), y.mean()
        xc, yc = x - x_mean, y - y_mean
        if self.ridge > 0:
            xc = np.vstack([xc, np.sqrt(self.ridge) * np.eye(x.shape[1])])
            yc = np.concatenate([yc, np.zeros(x.shape[1])])
        w, _ = nnls(xc, yc)
        return w, float(y_mean - x_mean @ w)

    def _isotonic_maps(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> dict[str, dict[str, list[list[float]]]]:
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

    def _fit(self, data: ValidationSet) -> tuple[CalibrationParams, list[str]]:
        predictions = data.answers
        isotonic = self._isotonic_maps(predictions, data.truths) if self.isotonic else {}
        if isotonic:
            predictions = [apply_isotonic(p, isotonic) for p in predictions]
        entities = sorted({e for preds in predictions for e in preds})
        rows = stacking_rows(predictions, data.truths, entities)
        weights: dict[str, dict[str, float]] = {}
        intercepts: dict[str, float] = {}
        pooled: dict[str, float] = {}
        pooled_intercept = 0.0
        notes: list[str] = []
        thin = sorted(c for c, (_, y) in rows.items() if y.size < self.min_students)
        for concept, (x, y) in rows.items():
            if y.size >= self.min_students:
                w, b = self._nnls(x, y)
                weights[concept] = {e: float(wj) for e, wj in zip(entities, w)}
                intercepts[concept] = b
        if rows:
            x_all = np.vstack([x for x, _ in rows.values()])
            y_all = np.concatenate([y for _, y in rows.values()])
            if y_all.size >= 2:
                w, pooled_intercept = self._nnls(x_all, y_all)
                pooled = {e: float(wj) for e, wj in zip(entities, w)}
        if thin:
            notes.append(f"{len(thin)} concept(s) had fewer than {self.min_students} complete validation rows and use "
                         f"the weights pooled over all concepts: {', '.join(thin[:20])}{' …' if len(thin) > 20 else ''}")
        if isotonic:
            notes.append("each entity's answers are mapped through an isotonic curve per concept before weighting")
        return StackingParams(weights=weights, intercepts=intercepts, isotonic=isotonic, pooled_weights=pooled,
                              pooled_intercept=pooled_intercept), notes

    def _release(
        self, params: CalibrationParams, data: ValidationSet, epsilon: float, rng: np.random.Generator
    ) -> CalibrationParams:
        if self.isotonic:
            raise ValueError("isotonic maps have no DP release here: calibrate with release_epsilon \"none\" "
                             "(e.g. on simulated or public validation students) or without isotonic")
        weights, intercepts, pooled, pooled_intercept = noisy_stacking(
            data.answers, data.truths, epsilon=epsilon, rng=rng, min_students=self.min_students)
        return StackingParams(weights=weights, intercepts=intercepts, pooled_weights=pooled, pooled_intercept=pooled_intercept)

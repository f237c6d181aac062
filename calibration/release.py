"""Releasing a calibration with differential privacy.

A calibration is a set of statistics of the validation students. With ``release_epsilon``
set, each released statistic gets Laplace noise calibrated to how much one student can
move it (replace-one neighbours, every student contributing to every statistic, so the
budget is split evenly over them by basic composition):

* ``bias`` / ``paper`` residuals r_jk — a mean over n_jk students of values in [−1, 1]:
  sensitivity 2 / n_jk;
* ``posterior`` priors — per concept the mean and the second moment of the truth in [0, 1]
  (the Beta prior is refitted from the noisy moments): sensitivity 1 / n_k each;
* ``stacking`` — the sufficient statistics of the least-squares fit (per concept the sums
  Σx, Σy, Σxxᵀ, Σxy of values in [0, 1]; sensitivity 1 per entry), from which the
  non-negative weights are re-solved ("sufficient-statistics perturbation").

The entity error sd τ of a posterior calibration is a root-mean-square over n students of
values in [−1, 1]: its square gets sensitivity 4 / n.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import minimize

__all__ = ["noisy_posterior", "noisy_residuals", "noisy_stacking"]

Predictions = Mapping[str, Mapping[str, float]]
Truth = Mapping[str, float]


def noisy_residuals(
    predictions: Sequence[Predictions], truths: Sequence[Truth], *, epsilon: float, rng: np.random.Generator
) -> dict[str, dict[str, float]]:
    """Truth-referenced residual means r_jk = mean(ŷ_jk − y_k), each with Laplace noise."""
    diffs: dict[tuple[str, str], list[float]] = {}
    for preds, truth in zip(predictions, truths):
        for entity, values in preds.items():
            for concept, value in values.items():
                if concept in truth:
                    diffs.setdefault((entity, concept), []).append(float(np.clip(value, 0, 1)) - truth[concept])
    eps_each = epsilon / max(1, len(diffs))
    out: dict[str, dict[str, float]] = {}
    for (entity, concept), values in diffs.items():
        noise = rng.laplace(0.0, (2.0 / len(values)) / eps_each)
        out.setdefault(entity, {})[concept] = float(np.clip(np.mean(values) + noise, -1.0, 1.0))
    return out


def noisy_posterior(
    predictions: Sequence[Predictions], truths: Sequence[Truth], *, epsilon: float, rng: np.random.Generator
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """(Beta prior [a, b] per concept from noisy moments, τ per entity from a noisy mean square)."""
    by_concept: dict[str, list[float]] = {}
    for truth in truths:
        for concept, value in truth.items():
            by_concept.setdefault(concept, []).append(value)
    sq: dict[str, list[float]] = {}
    for preds, truth in zip(predictions, truths):
        for entity, values in preds.items():
            for concept, value in values.items():
                if concept in truth:
                    sq.setdefault(entity, []).append((float(np.clip(value, 0, 1)) - truth[concept]) ** 2)
    eps_each = epsilon / max(1, 2 * len(by_concept) + len(sq))
    priors: dict[str, list[float]] = {}
    for concept, values in by_concept.items():
        n = len(values)
        m1 = float(np.clip(np.mean(values) + rng.laplace(0, (1 / n) / eps_each), 0.01, 0.99))
        m2 = float(np.clip(np.mean(np.square(values)) + rng.laplace(0, (1 / n) / eps_each), m1 * m1 + 1e-4, m1))
        var = m2 - m1 * m1
        common = m1 * (1 - m1) / var - 1
        priors[concept] = [float(np.clip(m1 * common, 0.5, 1000)), float(np.clip((1 - m1) * common, 0.5, 1000))]
    tau = {
        e: float(np.sqrt(np.clip(np.mean(v) + rng.laplace(0, (4 / len(v)) / eps_each), 0.02**2, 1.0))) for e, v in sq.items()
    }
    return priors, tau


def noisy_stacking(
    predictions: Sequence[Predictions],
    truths: Sequence[Truth],
    *,
    epsilon: float,
    rng: np.random.Generator,
    ridge: float = 1e-3,
    min_students: int = 5,
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per concept non-negative weights and intercept from noisy sufficient statistics."""
    entities = sorted({e for preds in predictions for e in preds})
    concepts = sorted({c for truth in truths for c in truth})
    j = len(entities)
    n_stats = len(concepts) * (1 + j + 1 + j * j + j)  # n, Σx, Σy, Σxxᵀ, Σxy
    scale = 1.0 / (epsilon / max(1, n_stats))
    weights: dict[str, dict[str, float]] = {}
    intercepts: dict[str, float] = {}
    for concept in concepts:
        rows = [
            ([float(np.clip(preds[e][concept], 0, 1)) for e in entities], truth[concept])
            for preds, truth in zip(predictions, truths)
            if concept in truth and all(e in preds and concept in preds[e] for e in entities)
        ]
        if len(rows) < min_students:
            continue
        x = np.array([r[0] for r in rows])
        y = np.array([r[1] for r in rows])
        n = max(1.0, len(rows) + rng.laplace(0, scale))
        sx = x.sum(axis=0) + rng.laplace(0, scale, size=j)
        sy = y.sum() + rng.laplace(0, scale)
        sxx = x.T @ x + rng.laplace(0, scale, size=(j, j))
        sxy = x.T @ y + rng.laplace(0, scale, size=j)
        sxx = (sxx + sxx.T) / 2
        mx, my = sx / n, sy / n
        cov = sxx / n - np.outer(mx, mx) + ridge * np.eye(j)
        cxy = sxy / n - mx * my
        result = minimize(lambda w: w @ cov @ w - 2 * cxy @ w, x0=np.full(j, 1.0 / j), jac=lambda w: 2 * (cov + cov.T) / 2 @ w - 2 * cxy, bounds=[(0, None)] * j, method="L-BFGS-B")
        w = result.x
        weights[concept] = {e: float(wj) for e, wj in zip(entities, w)}
        intercepts[concept] = float(my - mx @ w)
    return weights, intercepts

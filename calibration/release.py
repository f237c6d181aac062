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
  non-negative weights are re-solved ("sufficient-statistics perturbation"). A stacking calibration gives
  these (1 − ERROR_SHARE)·ε and its error's statistics the rest (:mod:`calibration.release_error`).

The entity error sd τ of a posterior calibration is a root-mean-square over n students of
values in [−1, 1]: its square gets sensitivity 4 / n.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize

from calibration.validation import Predictions, Truth, stacking_rows

__all__ = ["noisy_posterior", "noisy_residuals", "noisy_stacking"]


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


def _solve_stack(
    n: float, sx: np.ndarray, sy: float, sxx: np.ndarray, sxy: np.ndarray, ridge: float
) -> tuple[np.ndarray, float]:
    """Non-negative least-squares weights and intercept from (noisy) sufficient statistics."""
    j = sx.size
    sxx = (sxx + sxx.T) / 2
    mx, my = sx / n, sy / n
    cov = sxx / n - np.outer(mx, mx) + ridge * np.eye(j)
    cxy = sxy / n - mx * my
    result = minimize(lambda w: w @ cov @ w - 2 * cxy @ w, x0=np.full(j, 1.0 / j), jac=lambda w: 2 * cov @ w - 2 * cxy,
                      bounds=[(0, None)] * j, method="L-BFGS-B")
    return result.x, float(my - mx @ result.x)


def noisy_stacking(
    predictions: Sequence[Predictions],
    truths: Sequence[Truth],
    *,
    epsilon: float,
    rng: np.random.Generator,
    ridge: float = 1e-3,
    min_students: int = 20,
) -> tuple[dict[str, dict[str, float]], dict[str, float], dict[str, float], float]:
    """(weights, intercepts, pooled weights, pooled intercept) from noisy sufficient statistics.

    Every concept's statistics are released (values clipped to [0, 1]); a concept whose noisy count
    reaches ``min_students`` gets its own weights, and the pooled weights are solved from the sums of
    the noisy per-concept statistics (post-processing: no extra budget).
    """
    entities = sorted({e for preds in predictions for e in preds})
    concepts = sorted({c for truth in truths for c in truth})
    j = len(entities)
    rows = stacking_rows(predictions, truths, entities)
    n_stats = len(concepts) * (1 + j + 1 + j * j + j)  # n, Σx, Σy, Σxxᵀ, Σxy
    scale = 1.0 / (epsilon / max(1, n_stats))
    weights: dict[str, dict[str, float]] = {}
    intercepts: dict[str, float] = {}
    total = [0.0, np.zeros(j), 0.0, np.zeros((j, j)), np.zeros(j)]
    for concept in concepts:
        x, y = rows.get(concept, (np.zeros((0, j)), np.zeros(0)))
        x = np.clip(x, 0, 1)
        stats = [
            len(y) + rng.laplace(0, scale),
            x.sum(axis=0) + rng.laplace(0, scale, size=j),
            y.sum() + rng.laplace(0, scale),
            x.T @ x + rng.laplace(0, scale, size=(j, j)),
            x.T @ y + rng.laplace(0, scale, size=j),
        ]
        total = [t + s for t, s in zip(total, stats)]
        if stats[0] >= min_students:
            w, b = _solve_stack(stats[0], *stats[1:], ridge)  # type: ignore[arg-type]
            weights[concept] = {e: float(wj) for e, wj in zip(entities, w)}
            intercepts[concept] = b
    pooled, pooled_intercept = {}, 0.0
    if j and total[0] >= 2:
        w, pooled_intercept = _solve_stack(total[0], *total[1:], ridge)  # type: ignore[arg-type]
        pooled = {e: float(wj) for e, wj in zip(entities, w)}
    return weights, intercepts, pooled, pooled_intercept

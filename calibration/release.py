"""Releasing a calibration with differential privacy.

A calibration is a set of statistics of the validation students. With ``release_epsilon``
set, each released statistic gets Laplace noise calibrated to how much one student can
move it (replace-one neighbours, every student contributing to every statistic, so the
budget is split evenly over them by basic composition):

* ``bias`` / ``paper`` residuals r_jk — a mean over n_jk students of values in [−1, 1]:
  sensitivity 2 / n_jk;
* ``posterior`` priors — per concept the mean and the second moment of the truth in [0, 1]
  (the Beta prior is refitted from the noisy moments): sensitivity 1 / n_k each;
* ``stacking`` — its own modules: one stack pooled over all concepts from per-student-weighted sufficient
  statistics (:mod:`calibration.release_stack`; their sensitivity does not grow with the number of concepts), a DP
  guard that chooses among it, each member alone and the plain mean (:mod:`calibration.release_guard`: the
  exponential mechanism; the plain mean unless another is clearly better), and the served
  candidate's error (:mod:`calibration.release_error`), ε split between the three by basic composition.

The entity error sd τ of a posterior calibration is a root-mean-square over n students of
values in [−1, 1]: its square gets sensitivity 4 / n.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calibration.validation import Predictions, Truth

__all__ = ["noisy_posterior", "noisy_residuals"]


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

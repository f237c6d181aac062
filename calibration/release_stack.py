"""Releasing a stacking calibration with differential privacy: one stack pooled over every concept, from sufficient
statistics whose noise does not grow with the Q-matrix, solved with a ridge toward the plain mean that the noise sets.

**Why not per concept.** The release this replaces perturbed K·(2 + 2j + j²) statistics (per concept the count, Σx,
Σy, Σxxᵀ, Σxy; K concepts, j entities), each of sensitivity 1, so each got Laplace noise of scale K·(2 + 2j + j²)/ε:
on FrcSub's 8 concepts and three entities 136/ε on sums over ~300 students, which made the stack far worse than no
calibration. Here a student weighs 1 in all, so its statistics move by a bounded amount whatever K, and one stack is
fitted across the concepts (per-concept weights are not worth their noise at a few hundred students: each concept's
statistics would hold ~n/K of the weight under the same noise).

**The rows.** A student's complete rows are the concepts of its truth that every entity answered: answers
x ∈ [0, 1]^j and truth y ∈ [0, 1] (values clipped to [0, 1]), centred at ½ (x' = x − ½, y' = y − ½ ∈ [−½, ½]).
Its m rows weigh 1/m each (a student with no complete row weighs nothing).

**The statistics.** With z = (1, x', y'), the unique entries of Σ_students (1/m) Σ_rows z zᵀ but y'²:
the count Σw, Σw·x'_a, Σw·y', Σw·x'_a·x'_b (a ≤ b), Σw·x'_a·y' — (j + 1)(j + 4)/2 numbers (14 for three entities).

**Sensitivity.** Replace-one neighbours: replacing one student changes only its own contribution, the mean of its
rows' vectors (0 without rows), so Δ₁ is the largest L1 distance between two such vectors. Write u = (x', y') ∈
[−½, ½]^p (p = j + 1) for a row; a mean of rows lies in the convex hull of the rows' vectors, and an L1 distance
is convex, so single rows (and 0) are the extreme cases.

* Two students with rows: the counts agree. Per coordinate a, with d = |u_a − u'_a| and e = |u_a + u'_a|
  (d + e = 2·max(|u_a|, |u'_a|) ≤ 1), the linear entry and the square move by d + |u_a² − u'_a²| = d(1 + e) ≤
  d(2 − d) ≤ 1 (y' has no square: d ≤ 1); each of the p(p − 1)/2 other products lies in [−¼, ¼] and moves by ≤ ½.
  In all at most p + p(p − 1)/4.
* A student with rows and one without: 1 (the count) + p·½ + j·¼ + p(p − 1)/2·¼, which is never more.

So ``stack_sensitivity(j)`` Δ₁ = (j + 1)(j + 4)/4 (7 for three entities, whatever K), and each statistic gets Laplace
noise of scale Δ₁/ε. (A bound, not attained: for three entities a grid over single rows finds at most 5.25.) Centring
at ½ is what keeps the products' range at [−¼, ¼] (uncentred, [0, 1]).

**The solve** (post-processing: no more ε). θ = (b', w) minimises θᵀ(Â + λI)θ − 2(ĉ + λθ₀)ᵀθ with w ≥ 0: least
squares of y' on (1, x') from the noisy Gram matrix Â (count, Σwx', Σwx'x'ᵀ) and cross-products ĉ (Σwy', Σwx'y'),
with a ridge λ toward θ₀ = (0, 1/j, …, 1/j) — the plain mean (equal weights; intercept 0, on the centred scale as on
the original one, since those weights sum to 1). A cohort too small for its noise so gets (nearly) the plain mean,
not weights shrunk toward zero, which would pull every diagnosis toward the intercept. λ is the noise's own level
(as AdaSSP, Wang 2018, "Revisiting differentially private linear regression", chooses its ridge): the noise E on the
(j + 1)-square Â has ‖E‖₂ ≤ its largest absolute row sum (Gershgorin), each row a sum of j + 1 |Laplace(b)| — a
Gamma(j + 1, b) — so by a union bound over the rows λ = ``Gamma(j + 1, b).ppf(1 − RIDGE_TAIL/(j + 1))`` bounds ‖E‖₂
with probability 1 − ``RIDGE_TAIL`` (λ ≈ 9.7·b for three entities), and then Â + λI ⪰ A ⪰ 0: the noise cannot make
the Gram matrix indefinite, and directions the data pin down by less than the noise (the entities' disagreements,
the small eigenvalues of A, are ~n times their variance) stay near the plain mean. AdaSSP lowers λ by a private
estimate of A's smallest eigenvalue; entities answering the same truths are nearly collinear, so that eigenvalue is
small here and not worth its share of ε. ``RIDGE_TAIL`` 0.05: the usual 95 % bound; in the rare rest a ridge still
makes Â + λI positive definite (it is raised to that if needed), only with a less certain margin.

The released stack then faces the plain mean in a DP guard (:mod:`calibration.release_guard`), and its error is
released after (:mod:`calibration.release_error`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear
from scipy.stats import gamma

from calibration.validation import Predictions, Truth, student_rows

__all__ = ["RIDGE_TAIL", "ReleasedStack", "release_stack", "ridge_for", "solve_stack", "stack_sensitivity",
           "stack_statistics"]

RIDGE_TAIL = 0.05


def stack_sensitivity(entities: int) -> float:
    """Δ₁ of :func:`stack_statistics` for ``entities`` entities (module docstring)."""
    return (entities + 1) * (entities + 4) / 4


def stack_statistics(students: Sequence[tuple[np.ndarray, np.ndarray]], entities: int) -> np.ndarray:
    """The unique entries of Σ (1/m) Σ_rows z zᵀ but y'², z = (1, x − ½, y − ½), values clipped to [0, 1] first (so
    the sensitivity holds whatever the caller passes; a row with a value that is not a number is left out before the
    student's 1/m), in the order of ``np.triu_indices(entities + 2)``."""
    upper = np.triu_indices(entities + 2)
    keep = ~((upper[0] == entities + 1) & (upper[1] == entities + 1))  # y'² is not needed by the fit
    total = np.zeros(int(keep.sum()))
    for x, y in students:
        finite = np.isfinite(x).all(axis=1) & np.isfinite(y) if len(y) else np.zeros(0, dtype=bool)
        x, y = x[finite], y[finite]
        if len(y):
            z = np.column_stack([np.ones(len(y)), np.clip(x, 0, 1) - 0.5, np.clip(y, 0, 1) - 0.5])
            total += ((z.T @ z) / len(y))[upper][keep]
    return total


def _unpack(stats: np.ndarray, entities: int) -> tuple[np.ndarray, np.ndarray]:
    """(Â: the (j + 1)-square Gram matrix of (1, x'), ĉ: its cross-products with y') from :func:`stack_statistics`."""
    p = entities + 2
    full = np.zeros((p, p))
    upper = np.triu_indices(p)
    keep = ~((upper[0] == p - 1) & (upper[1] == p - 1))
    full[upper[0][keep], upper[1][keep]] = stats
    full = full + np.triu(full, 1).T
    return full[:-1, :-1], full[:-1, -1]


def ridge_for(entities: int, scale: float) -> float:
    """λ: the (1 − ``RIDGE_TAIL``) bound on the spectral norm of Laplace(``scale``) noise on the Gram matrix."""
    p = entities + 1
    return float(gamma.ppf(1 - RIDGE_TAIL / p, p, scale=scale))


def solve_stack(stats: np.ndarray, entities: int, ridge: float) -> tuple[np.ndarray, float]:
    """(weights ≥ 0, intercept on the original scale) from (noisy) statistics, with ``ridge`` toward the plain mean."""
    gram, cross = _unpack(stats, entities)
    prior = np.concatenate([[0.0], np.full(entities, 1.0 / entities)])
    matrix = gram + ridge * np.eye(entities + 1)
    lowest = float(np.linalg.eigvalsh(matrix)[0])
    floor = 1e-6 * max(1.0, abs(float(matrix[0, 0])))
    if lowest < floor:  # the noise beat the bound (probability < RIDGE_TAIL): raise the ridge until it is PD
        matrix = matrix + (floor - lowest) * np.eye(entities + 1)
    root = np.linalg.cholesky(matrix).T  # rootᵀ·root = matrix: minimise ‖root·θ − d‖², rootᵀd = ĉ + λθ₀
    target = np.linalg.solve(root.T, cross + ridge * prior)
    lower = np.concatenate([[-np.inf], np.zeros(entities)])
    theta = lsq_linear(root, target, bounds=(lower, np.full(entities + 1, np.inf))).x
    weights = theta[1:]
    return weights, float(theta[0] + (1.0 - weights.sum()) / 2)  # back from the centred scale


@dataclass(frozen=True)
class ReleasedStack:
    """The released pooled stack: weights per entity, intercept, and how it was released (no un-noised value)."""

    weights: dict[str, float]
    intercept: float
    epsilon: float
    sensitivity: float
    ridge: float
    noisy_count: float

    def to_json(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "mechanism": "laplace", "sensitivity": self.sensitivity,
                "statistics": "pooled over concepts, per-student weights 1/m, centred at 1/2",
                "ridge_toward_plain_mean": self.ridge, "noisy_count": self.noisy_count}

    def note(self) -> str:
        weights = ", ".join(f"{e} {w:.3f}" for e, w in sorted(self.weights.items()))
        return (f"the stack released with differential privacy (ε = {self.epsilon:g}, Laplace, L1 sensitivity "
                f"{self.sensitivity:g} per student whatever the concepts): one stack pooled over all concepts "
                f"(weights {weights}; intercept {self.intercept:+.3f}), ridge {self.ridge:.3g} toward the plain mean "
                f"set by the noise; ~{self.noisy_count:.0f} students (noisy count)")


def release_stack(predictions: Sequence[Predictions], truths: Sequence[Truth], *, epsilon: float,
                  rng: np.random.Generator) -> ReleasedStack:
    """The pooled stack of ``predictions`` against ``truths``, released with ``epsilon``-DP (module docstring)."""
    entities = sorted({e for preds in predictions for e, values in preds.items() if values})
    j = len(entities)
    if not j:
        return ReleasedStack({}, 0.0, epsilon, 0.0, 0.0, 0.0)
    sensitivity = stack_sensitivity(j)
    scale = sensitivity / epsilon
    stats = stack_statistics(student_rows(predictions, truths, entities), j)
    noisy = stats + rng.laplace(0.0, scale, size=stats.size)
    ridge = ridge_for(j, scale)
    weights, intercept = solve_stack(noisy, j, ridge)
    return ReleasedStack(dict(zip(entities, weights.tolist())), intercept, epsilon, sensitivity, ridge, float(noisy[0]))

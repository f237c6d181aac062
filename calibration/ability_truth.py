"""Calibration truth on the serving model's scale (issue 31, part 4): what a validation student's responses say of
each concept, read through the item parameters the item forecasts use.

A calibration fits the aggregate to a truth per (student, concept). When that truth is derived from the student's
responses, the paper's rule takes the proportion correct of the concept's items. But an item forecast reads the
aggregate as an ability on the serving model's scale (``θ = logit(mastery)``, then ``σ(α_i · mean θ + c_i)``,
:mod:`diagnosis.forecast`), and a proportion correct is not on that scale: it mixes the student's ability with how
hard the items they happened to answer were, and its logit is compressed towards 0. A stack fitted to it maps every
member onto the proportion-correct scale, and the forecast then reads that scale as the model's: on held-out students
the served aggregate forecast worse than its own best member while ranking students no worse (docs/results/issue31).

So where a trained model serves the Q-matrix (:func:`trained_scale`), the truth is the student's ability as the model reads *all* their
responses: per student, the maximum a-posteriori abilities of the concepts their responses assess, under the model's
item-response function and its prior over each concept (independent concepts, as the forecasts assume)::

    maximise  Σ_r [y_r log σ(η_r) + (1 − y_r) log(1 − σ(η_r))] − Σ_k (θ_k − μ_k)² / (2 s_k²),
    η_r = α_r · mean_{k ∈ Q_r} θ_k + c_r,                        truth_k = σ(θ̂_k)

The prior keeps a concept answered only right (or only wrong) finite. This is a statistic of the validation
student's responses, as the proportion correct is; it is computed where those responses are (the calibrate job, or
the evaluation's validation split) and released only through the fitted calibration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from providers.item_response import ItemResponseFunction
from qmatrix import Response

__all__ = ["SERVING_SCALE", "ability_truth", "ability_truths", "restrict", "trained_scale"]

SERVING_SCALE = "serving-model-ability"  # the truth source recorded on a calibration fitted to this truth


def trained_scale(irf: ItemResponseFunction) -> bool:
    """Whether a trained model gives ``irf`` any item's parameters. The untrained evidence model (α = 1, c = 0 on
    every item) reads a mastery as the chance of a right answer, so the proportion correct is already on its scale:
    the truth is then left as the paper's rule derives it."""
    return any(basis != "untrained" for basis in irf.basis)


def ability_truth(irf: ItemResponseFunction, responses: Sequence[Response],
                  concepts: Sequence[str] | None = None) -> dict[str, float]:
    """One student's truth: concept -> σ(θ̂) for the concepts of ``responses``' items (restricted to ``concepts``
    when given). Items ``irf`` does not list are skipped; a concept none of the listed items assesses gets none."""
    index = {item_id: n for n, item_id in enumerate(irf.item_ids)}
    rows = [(index[r.item_id], float(r.score)) for r in responses if r.item_id in index]
    assessed = sorted({c for n, _ in rows for c in irf.concepts[n]})
    if not assessed:
        return {}
    column = {c: j for j, c in enumerate(assessed)}
    # design: η = A θ + c, with A[r, k] = α_r / |Q_r| for k ∈ Q_r
    design = np.zeros((len(rows), len(assessed)))
    for r, (n, _) in enumerate(rows):
        for c in irf.concepts[n]:
            design[r, column[c]] = irf.alpha[n] / len(irf.concepts[n])
    offset = np.array([irf.intercept[n] for n, _ in rows], dtype=float)
    y = np.array([score for _, score in rows], dtype=float)
    mu = np.array([irf.prior_mean.get(c, 0.0) for c in assessed], dtype=float)
    precision = 1.0 / np.square([max(irf.prior_sd.get(c, 1.0), 1e-3) for c in assessed])

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        eta = design @ theta + offset
        nll = -float(np.sum(y * log_expit(eta) + (1 - y) * log_expit(-eta)))
        gap = theta - mu
        grad = design.T @ (expit(eta) - y) + precision * gap
        return nll + 0.5 * float(np.sum(precision * gap**2)), grad

    theta = minimize(loss, mu.copy(), jac=True, method="L-BFGS-B").x  # convex: a unique optimum
    wanted = set(concepts) if concepts is not None else None
    return {c: float(expit(theta[j])) for c, j in column.items() if wanted is None or c in wanted}


def ability_truths(irf: ItemResponseFunction, students: Sequence[Sequence[Response]],
                   concepts: Sequence[Sequence[str] | None] | None = None) -> list[dict[str, float]]:
    """:func:`ability_truth` per student (``concepts``: per student, the concepts to keep; None keeps all)."""
    keep: Sequence[Sequence[str] | None] = concepts if concepts is not None else [None] * len(students)
    return [ability_truth(irf, responses, wanted) for responses, wanted in zip(students, keep, strict=True)]


def restrict(truths: Sequence[Mapping[str, float]], like: Sequence[Mapping[str, float]]) -> list[dict[str, float]]:
    """``truths`` keeping, per student, only the concepts ``like`` has (the same pairs as another truth)."""
    return [{c: v for c, v in t.items() if c in other} for t, other in zip(truths, like, strict=True)]

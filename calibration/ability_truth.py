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
item-response function and its prior over each concept (independent concepts, as the forecasts assume), found by
:func:`diagnosis.next_items.predictive_mode` on the bank of the student's answered items::

    maximise  Σ_r [y_r log σ(η_r) + (1 − y_r) log(1 − σ(η_r))] − Σ_k (θ_k − μ_k)² / (2 s_k²),
    η_r = α_r · mean_{k ∈ Q_r} θ_k + c_r,                        truth_k = σ(θ̂_k)

The prior keeps a concept answered only right (or only wrong) finite. This is a statistic of the validation
student's responses, as the proportion correct is; it is computed where those responses are (the calibrate job, or
the evaluation's validation split) and released only through the fitted calibration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.special import expit

from diagnosis.next_items import predictive_mode
from providers.item_response import ItemResponseFunction
from providers.serving_bank import ServingBank
from qmatrix import Response

__all__ = ["SERVING_SCALE", "ability_truth", "ability_truths", "restrict", "trained_scale"]

SERVING_SCALE = "serving-model-ability"  # the truth source recorded on a calibration fitted to this truth
_MIN_PRIOR_SD = 1e-3  # a prior sd of 0 would pin the ability: never below this


def trained_scale(irf: ItemResponseFunction) -> bool:
    """Whether a trained model gives ``irf`` any item's parameters. The untrained evidence model (α = 1, c = 0 on
    every item) reads a mastery as the chance of a right answer, so the proportion correct is already on its scale:
    the truth is then left as the paper's rule derives it."""
    return any(basis != "untrained" for basis in irf.basis)


def _answered_bank(irf: ItemResponseFunction, rows: Sequence[int], assessed: Sequence[str]) -> ServingBank:
    """The bank of the answered items ``rows`` of ``irf`` over the ``assessed`` concepts, one ability each, under the
    prior of the forecasts: each concept's marginal, independent of the others."""
    column = {c: j for j, c in enumerate(assessed)}
    width = max(len(irf.concepts[n]) for n in rows)
    index, weight = np.zeros((len(rows), width), dtype=np.int64), np.zeros((len(rows), width))
    for r, n in enumerate(rows):
        q = irf.concepts[n]
        index[r, : len(q)] = [column[c] for c in q]
        weight[r, : len(q)] = 1.0 / len(q)
    sd = np.array([max(irf.prior_sd.get(c, 1.0), _MIN_PRIOR_SD) for c in assessed])
    return ServingBank(
        model=irf.model, kind="item-response-function", trained=trained_scale(irf), concepts=tuple(assessed),
        dim_of=np.arange(len(assessed)), prior_mean=np.array([irf.prior_mean.get(c, 0.0) for c in assessed]),
        prior_cov=np.diag(sd**2), item_ids=tuple(irf.item_ids[n] for n in rows),
        item_concepts=tuple(irf.concepts[n] for n in rows), alpha=np.asarray(irf.alpha, np.float64)[list(rows)],
        intercept=np.asarray(irf.intercept, np.float64)[list(rows)], index=index, weight=weight,
        basis=tuple(irf.basis[n] for n in rows), usable=np.ones(len(rows), dtype=bool),
    )


def ability_truth(irf: ItemResponseFunction, responses: Sequence[Response],
                  concepts: Sequence[str] | None = None) -> dict[str, float]:
    """One student's truth: concept -> σ(θ̂) for the concepts of ``responses``' items (restricted to ``concepts``
    when given). Items ``irf`` does not list are skipped; a concept none of the listed items assesses gets none."""
    index = {item_id: n for n, item_id in enumerate(irf.item_ids)}
    answered = [(index[r.item_id], float(r.score)) for r in responses if r.item_id in index]
    assessed = sorted({c for n, _ in answered for c in irf.concepts[n]})
    if not assessed:
        return {}
    bank = _answered_bank(irf, [n for n, _ in answered], assessed)
    theta = predictive_mode(bank, np.arange(len(answered)), np.array([score for _, score in answered]))
    wanted = set(concepts) if concepts is not None else None
    return {c: float(expit(theta[j])) for j, c in enumerate(assessed) if wanted is None or c in wanted}


def ability_truths(irf: ItemResponseFunction, students: Sequence[Sequence[Response]],
                   concepts: Sequence[Sequence[str] | None] | None = None) -> list[dict[str, float]]:
    """:func:`ability_truth` per student (``concepts``: per student, the concepts to keep; None keeps all)."""
    keep: Sequence[Sequence[str] | None] = concepts if concepts is not None else [None] * len(students)
    return [ability_truth(irf, responses, wanted) for responses, wanted in zip(students, keep, strict=True)]


def restrict(truths: Sequence[Mapping[str, float]], like: Sequence[Mapping[str, float]]) -> list[dict[str, float]]:
    """``truths`` keeping, per student, only the concepts ``like`` has (the same pairs as another truth)."""
    return [{c: v for c, v in t.items() if c in other} for t, other in zip(truths, like, strict=True)]

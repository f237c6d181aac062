"""The link from concept mastery to the probability of answering an item correctly.

For the held-out protocol a diagnosis must predict responses it did not see. We use

    P(correct_i) = sigmoid(a · m̄_i + c · d_i + b),   a ≥ 0, c ≥ 0,

where m̄_i is the mean diagnosed mastery over the concepts item i requires and d_i the item's
easiness: the logit of its proportion correct among the TRAIN students (smoothed toward the
train mean, so an item few or no train students answered sits near the average). (a, b, c) are
fitted by maximum likelihood on the validation students' held-out responses — never on test
students. The classical baselines know each item's parameters from the same train split; the
``item-difficulty`` reference row (a = 0) shows what the item term alone predicts, so what a
diagnosis adds is the distance above it.

**Monotone by construction.** a ≥ 0: more mastery never predicts fewer correct answers. An
unconstrained slope fitted on a few validation students can come out negative and turn a
diagnosis's ranking upside down on the test students (AUC far below 0.5).

Partial credit: a score y in [0, 1] counts as y of a correct and 1 − y of a wrong answer
(``evaluation.metrics``), in the likelihood as in every metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, logit

__all__ = ["ItemEasiness", "LogisticLink", "fit_link", "item_easiness"]

EASINESS_PRIOR_WEIGHT = 2.0  # pseudo-responses at the train mean added to every item's count
_RIDGE = 1e-3


@dataclass(frozen=True)
class ItemEasiness:
    """Logit of each item's smoothed train proportion correct; unseen items get the train mean's logit."""

    by_item: Mapping[str, float]
    default: float

    def __call__(self, item_ids: Sequence[str]) -> np.ndarray:
        return np.array([self.by_item.get(i, self.default) for i in item_ids], dtype=float)


def item_easiness(scores: Mapping[str, Sequence[float]]) -> ItemEasiness:
    """From item -> the train students' scores on it: (Σ y + w·ȳ) / (n + w), w = ``EASINESS_PRIOR_WEIGHT``."""
    flat = [s for values in scores.values() for s in values]
    mean = float(np.clip(np.mean(flat), 0.01, 0.99)) if flat else 0.5
    w = EASINESS_PRIOR_WEIGHT
    by_item = {i: float(logit(np.clip((sum(v) + w * mean) / (len(v) + w), 0.01, 0.99))) for i, v in scores.items()}
    return ItemEasiness(by_item=by_item, default=float(logit(mean)))


@dataclass(frozen=True)
class LogisticLink:
    a: float
    b: float
    c: float = 0.0

    def __call__(self, mastery: np.ndarray, easiness: np.ndarray | None = None) -> np.ndarray:
        z = self.a * np.asarray(mastery, dtype=float) + self.b
        if easiness is not None:
            z = z + self.c * np.asarray(easiness, dtype=float)
        return expit(z)


def fit_link(mastery: np.ndarray, outcomes: np.ndarray, easiness: np.ndarray | None = None) -> LogisticLink:
    """Maximum-likelihood (a ≥ 0, b, c ≥ 0), with a tiny ridge so separable data stay finite.

    Without ``easiness`` the item term is left out (c = 0)."""
    m = np.asarray(mastery, dtype=float)
    y = np.asarray(outcomes, dtype=float)
    d = np.zeros_like(m) if easiness is None else np.asarray(easiness, dtype=float)
    if m.size == 0:
        raise ValueError("cannot fit the link on no validation responses")
    if m.shape != y.shape or d.shape != m.shape:
        raise ValueError(f"mastery, outcomes and easiness differ in shape: {m.shape}, {y.shape}, {d.shape}")

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        a, b, c = params
        p = np.clip(expit(a * m + b + c * d), 1e-12, 1 - 1e-12)
        nll = -np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)) + _RIDGE * (a * a + b * b + c * c)
        r = p - y
        grad = np.array([np.sum(r * m), np.sum(r), np.sum(r * d)]) + 2 * _RIDGE * params
        return float(nll), grad

    bounds = [(0.0, None), (None, None), (0.0, None) if easiness is not None else (0.0, 0.0)]
    result = minimize(loss, x0=np.array([1.0, 0.0, 1.0 if easiness is not None else 0.0]), jac=True,
                      method="L-BFGS-B", bounds=bounds)
    a, b, c = (float(v) for v in result.x)
    return LogisticLink(a=a, b=b, c=c)

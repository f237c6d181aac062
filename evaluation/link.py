"""The link from concept mastery to the probability of answering an item correctly.

For the held-out protocol a diagnosis must predict responses it did not see. We use
P(correct_i) = sigmoid(a · m̄_i + b), where m̄_i is the mean diagnosed mastery over the
concepts item i requires (those the diagnosis covers), with (a, b) fitted by maximum
likelihood on the validation students' held-out responses — never on test students.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

__all__ = ["LogisticLink", "fit_link"]


@dataclass(frozen=True)
class LogisticLink:
    a: float
    b: float

    def __call__(self, mastery: np.ndarray) -> np.ndarray:
        return expit(self.a * np.asarray(mastery, dtype=float) + self.b)


def fit_link(mastery: np.ndarray, outcomes: np.ndarray) -> LogisticLink:
    """Maximum-likelihood (a, b), with a tiny ridge so separable data stay finite."""
    m = np.asarray(mastery, dtype=float)
    y = np.asarray(outcomes, dtype=float)
    if m.size == 0:
        raise ValueError("cannot fit the link on no validation responses")

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = params
        p = np.clip(expit(a * m + b), 1e-12, 1 - 1e-12)
        nll = -np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)) + 1e-3 * (a * a + b * b)
        r = p - y
        return float(nll), np.array([np.sum(r * m) + 2e-3 * a, np.sum(r) + 2e-3 * b])

    result = minimize(loss, x0=np.array([1.0, 0.0]), jac=True, method="L-BFGS-B")
    return LogisticLink(a=float(result.x[0]), b=float(result.x[1]))

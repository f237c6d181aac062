"""Two-parameter logistic IRT, fitted by marginal maximum likelihood (Bock–Aitkin EM).

The 2PL model puts each student on one continuous ability θ and each item at a difficulty
b_i with a discrimination (slope) a_i:

    P(correct | θ) = sigmoid(a_i · (θ − b_i)).

Ability is a random effect, θ ~ N(0, 1), integrated out over a fixed Gauss–Hermite grid
(41 nodes by default), so the item parameters are estimated from the *marginal* likelihood
Σ_s log Σ_q w_q Π_i P(x_si | θ_q). Joint MAP over (θ, a, b) is deliberately not used: with
few items per student it is inconsistent and its slopes drift to large, degenerate values.
EM alternates the posterior of every student over the grid (E-step) with a per-item
Newton update of (a_i, c_i = −a_i b_i) on the expected counts (M-step), with step halving
so every M-step increases its objective. A weak Gaussian prior on a and c, and bounds
a ∈ [0.05, 6], keep items that everyone (or no one) answers correctly finite; the
recorded ``loglik_trace_`` is therefore the *penalized* marginal log-likelihood, the
quantity EM is guaranteed not to decrease. Items never answered in training keep the
prior mode (a = 1, b = 0). Partial credit counts as a Bernoulli weight (see ``common``).

New students get their posterior over the grid from their observed responses only:
EAP θ = posterior mean, and ``predict_proba`` is the posterior-averaged P(correct).
**IRT has no concepts**, so ``mastery`` is projected through the Q-matrix: mastery of k is
the expected proportion correct, under the student's posterior, on all items requiring k
(the model's prediction of the protocol's per-concept proportion correct).
"""

from __future__ import annotations

from typing import Self

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy import sparse
from scipy.special import expit, log_expit, logsumexp

from evaluation.baselines.common import CDMBaseline, check_q, check_responses, select_items, sparse_scores

__all__ = ["IRT2PL", "eap", "irt_2pl_prob", "normal_quadrature"]


def irt_2pl_prob(theta: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P(correct) = sigmoid(a (θ − b)), broadcast to shape (len(θ), len(a))."""
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    return expit(np.asarray(a, dtype=float)[None, :] * (theta[:, None] - np.asarray(b, dtype=float)[None, :]))


def normal_quadrature(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Hermite nodes and weights (summing to 1) for integrating against N(0, 1)."""
    nodes, weights = hermegauss(n_nodes)
    return nodes, weights / weights.sum()


def grid_log_likelihood(responses: np.ndarray, a: np.ndarray, c: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Students x nodes log P(observed responses | θ = node), logit = a θ + c; nan cells skipped."""
    _, correct, wrong = sparse_scores(responses)
    return _grid_log_likelihood(correct, wrong, a, c, nodes)


def _grid_log_likelihood(
    correct: sparse.csr_array, wrong: sparse.csr_array, a: np.ndarray, c: np.ndarray, nodes: np.ndarray
) -> np.ndarray:
    z = nodes[:, None] * a[None, :] + c[None, :]  # nodes x items
    return np.asarray(correct @ log_expit(z).T + wrong @ log_expit(-z).T)


def eap(
    responses: np.ndarray, a: np.ndarray, b: np.ndarray, nodes: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(θ_EAP, posterior)``: each student's posterior mean ability and posterior over the grid."""
    a = np.asarray(a, dtype=float)
    log_post = grid_log_likelihood(np.asarray(responses, dtype=float), a, -a * np.asarray(b, dtype=float), nodes)
    log_post += np.log(weights)[None, :]
    post = np.exp(log_post - logsumexp(log_post, axis=1, keepdims=True))
    return post @ nodes, post


class IRT2PL(CDMBaseline):
    """2PL IRT by marginal-likelihood EM over a fixed N(0, 1) quadrature grid."""

    name = "irt-2pl"

    def __init__(
        self,
        *,
        n_nodes: int = 41,
        max_iter: int = 500,
        tol: float = 1e-7,
        slope_bounds: tuple[float, float] = (0.05, 6.0),
        slope_prior_sd: float = 2.0,
        intercept_prior_sd: float = 5.0,
        newton_steps: int = 3,
    ) -> None:
        if n_nodes < 3:
            raise ValueError(f"n_nodes must be >= 3, got {n_nodes}")
        if max_iter < 1 or newton_steps < 1:
            raise ValueError("max_iter and newton_steps must be >= 1")
        if tol <= 0:
            raise ValueError(f"tol must be > 0, got {tol}")
        lo, hi = slope_bounds
        if not 0 < lo < 1 < hi:
            raise ValueError(f"slope_bounds must satisfy 0 < low < 1 < high, got {slope_bounds}")
        if slope_prior_sd <= 0 or intercept_prior_sd <= 0:
            raise ValueError("prior standard deviations must be > 0")
        self.n_nodes, self.max_iter, self.tol = n_nodes, max_iter, tol
        self.slope_bounds = (float(lo), float(hi))
        self.slope_prior_sd, self.intercept_prior_sd = slope_prior_sd, intercept_prior_sd
        self.newton_steps = newton_steps
        self.nodes_, self.weights_ = normal_quadrature(n_nodes)
        self.a_: np.ndarray | None = None
        self.b_: np.ndarray | None = None
        self.loglik_trace_: list[float] = []
        self.converged_ = False

    # --- fitting -----------------------------------------------------------------------
    def _log_prior(self, a: np.ndarray, c: np.ndarray) -> np.ndarray:
        return -0.5 * ((a - 1.0) / self.slope_prior_sd) ** 2 - 0.5 * (c / self.intercept_prior_sd) ** 2

    def _item_objective(self, a: np.ndarray, c: np.ndarray, n: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Expected complete-data log-likelihood + log prior, per item (n, r: items x nodes counts)."""
        z = a[:, None] * self.nodes_[None, :] + c[:, None]
        return (r * log_expit(z) + (n - r) * log_expit(-z)).sum(axis=1) + self._log_prior(a, c)

    def _m_step(self, a: np.ndarray, c: np.ndarray, n: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Projected Newton on every item at once, halving steps that would not increase its objective."""
        theta = self.nodes_[None, :]
        va, vc = self.slope_prior_sd**2, self.intercept_prior_sd**2
        current = self._item_objective(a, c, n, r)
        for _ in range(self.newton_steps):
            p = expit(a[:, None] * theta + c[:, None])
            resid, info = r - n * p, n * p * (1 - p)
            ga = (resid * theta).sum(1) - (a - 1.0) / va
            gc = resid.sum(1) - c / vc
            haa = (info * theta**2).sum(1) + 1 / va  # negative Hessian, positive definite
            hac = (info * theta).sum(1)
            hcc = info.sum(1) + 1 / vc
            det = haa * hcc - hac**2
            da, dc = (hcc * ga - hac * gc) / det, (haa * gc - hac * ga) / det
            # a slope held at a bound by its gradient stays there; the intercept then moves alone
            lo, hi = self.slope_bounds
            held = ((a <= lo) & (ga < 0)) | ((a >= hi) & (ga > 0))
            da, dc = np.where(held, 0.0, da), np.where(held, gc / hcc, dc)
            new_a, new_c = a.copy(), c.copy()
            # items whose Newton step promises (almost) nothing are at their optimum: leave them
            pending, step = np.flatnonzero(ga * da + gc * dc > 1e-10), 1.0
            if pending.size == 0:
                break
            for _ in range(20):  # halve the step for the items whose objective did not increase
                na, nc = np.clip(a[pending] + step * da[pending], *self.slope_bounds), c[pending] + step * dc[pending]
                value = self._item_objective(na, nc, n[pending], r[pending])
                better = value >= current[pending]
                accepted = pending[better]
                new_a[accepted], new_c[accepted], current[accepted] = na[better], nc[better], value[better]
                pending, step = pending[~better], step / 2
                if pending.size == 0:
                    break
            a, c = new_a, new_c
        return a, c

    def fit(self, responses: np.ndarray, q: np.ndarray) -> Self:
        """Marginal-ML EM from a = 1 and intercepts at each item's logit proportion correct."""
        q = check_q(q)
        responses = check_responses(responses, n_items=q.shape[0])
        observed, correct, wrong = sparse_scores(responses)
        answered, right = observed.sum(axis=0), correct.sum(axis=0)
        p0 = np.clip(right / np.maximum(answered, 1), 0.05, 0.95)
        a = np.ones(q.shape[0])
        c = np.where(answered > 0, np.log(p0 / (1 - p0)), 0.0)
        log_w = np.log(self.weights_)
        trace: list[float] = []
        self.converged_ = False
        for _ in range(self.max_iter):
            log_joint = _grid_log_likelihood(correct, wrong, a, c, self.nodes_) + log_w[None, :]
            log_marg = logsumexp(log_joint, axis=1, keepdims=True)
            trace.append(float(log_marg.sum() + self._log_prior(a, c).sum()))
            if len(trace) > 1 and trace[-1] - trace[-2] < self.tol * (1 + abs(trace[-1])):
                self.converged_ = True
                break
            post = np.exp(log_joint - log_marg)  # students x nodes
            n, r = np.asarray(observed.T @ post), np.asarray(correct.T @ post)  # items x nodes expected counts
            a, c = self._m_step(a, c, n, r)
        self._q, self.a_, self.b_, self.loglik_trace_ = q, a, -c / a, trace
        return self

    # --- new students ------------------------------------------------------------------
    def posterior(self, responses: np.ndarray) -> np.ndarray:
        """Each new student's posterior over the quadrature nodes (students x nodes)."""
        responses = self._new_responses(responses)
        return eap(responses, self.a_, self.b_, self.nodes_, self.weights_)[1]

    def theta(self, responses: np.ndarray) -> np.ndarray:
        """EAP ability of each new student."""
        return self.posterior(responses) @ self.nodes_

    def predict_proba(self, responses: np.ndarray, items: np.ndarray | None = None) -> np.ndarray:
        """Posterior-averaged P(correct): Σ_q P(θ_q | observed) · sigmoid(a_i (θ_q − b_i))."""
        idx = select_items(items, self.q_.shape[0])
        post = self.posterior(responses)
        return post @ irt_2pl_prob(self.nodes_, self.a_[idx], self.b_[idx])

    def mastery(self, responses: np.ndarray) -> np.ndarray:
        """Expected proportion correct on the items requiring each concept (Q-matrix projection)."""
        q = self.q_.astype(float)
        return (self.predict_proba(responses) @ q) / q.sum(axis=0)[None, :]

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
so every M-step increases its objective. Gaussian priors a_i ~ N(μ_a, σ_a²), c_i ~ N(μ_c, σ_c²)
and bounds a ∈ [0.05, 6] keep items that everyone (or no one) answers correctly finite.

**The item prior is estimated from the items (empirical Bayes) by default.** Real item banks are
sparse (ASSIST0910: median 6 training responses per item), and an item answered by three students,
all correctly, says little about its own difficulty but a lot when read against the other items:
with a fixed, wide prior its difficulty runs off to ±30 and its forecasts with it. So (μ, σ) of
slopes and intercepts are fitted too, by the EM update of a hierarchical model under a Laplace
approximation of each item's posterior: μ = mean of the item estimates, σ² = mean of (estimate − μ)²
+ posterior variance (the variance term stops σ from collapsing onto the shrunken estimates). Well-
answered items are barely moved; rare items are pulled towards the bank's typical item, as much as
their few responses leave undecided. Hyperparameters and items are first updated together until
the prior settles; then EM runs with the prior held fixed, and ``loglik_trace_`` records that phase's
*penalized* marginal log-likelihood, the quantity EM is guaranteed not to decrease. Passing
``slope_prior_sd`` / ``intercept_prior_sd`` fixes that prior instead (centred on a = 1, c = 0: the
baseline's behaviour before the empirical prior). Items never answered in training get the prior
mode. Partial credit counts as a Bernoulli weight (see ``common``).

New students get their posterior over the grid from their observed responses only:
EAP θ = posterior mean, and ``predict_proba`` is the posterior-averaged P(correct).
**IRT has no concepts**, so ``mastery`` is projected through the Q-matrix: mastery of k is
the expected proportion correct, under the student's posterior, on all items requiring k
(the model's prediction of the protocol's per-concept proportion correct).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy import sparse
from scipy.special import expit, log_expit, logsumexp

from evaluation.baselines.common import CDMBaseline, check_q, check_responses, select_items, sparse_scores

__all__ = ["IRT2PL", "ItemPrior", "eap", "irt_2pl_prob", "normal_quadrature"]

MIN_PRIOR_SD = 0.05  # a prior of zero width would freeze every item at the mean (and make Newton singular)
# the estimated prior counts as settled when no mean or sd moves more than this in one EM step: EM for hyperparameters
# creeps (ASSIST0910 seed 0: ~50 steps at 1e-3, ~160 at 1e-4) and held-out AUC moved 0.0006 between the two
PRIOR_TOL = 1e-3


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


@dataclass(frozen=True)
class ItemPrior:
    """Gaussian prior of the item slopes a ~ N(slope_mean, slope_sd²) and intercepts c ~ N(intercept_mean, ...)."""

    slope_mean: float
    slope_sd: float
    intercept_mean: float
    intercept_sd: float


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
        slope_prior_sd: float | None = None,
        intercept_prior_sd: float | None = None,
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
        if any(sd is not None and sd <= 0 for sd in (slope_prior_sd, intercept_prior_sd)):
            raise ValueError("prior standard deviations must be > 0 (or None: estimated from the items)")
        self.n_nodes, self.max_iter, self.tol = n_nodes, max_iter, tol
        self.slope_bounds = (float(lo), float(hi))
        self.slope_prior_sd, self.intercept_prior_sd = slope_prior_sd, intercept_prior_sd
        self.newton_steps = newton_steps
        self.nodes_, self.weights_ = normal_quadrature(n_nodes)
        self.prior_ = ItemPrior(1.0, slope_prior_sd or 1.0, 0.0, intercept_prior_sd or 2.0)
        self.a_: np.ndarray | None = None
        self.b_: np.ndarray | None = None
        self.loglik_trace_: list[float] = []
        self.converged_ = False

    # --- fitting -----------------------------------------------------------------------
    def _log_prior(self, a: np.ndarray, c: np.ndarray) -> np.ndarray:
        pr = self.prior_
        slope, intercept = (a - pr.slope_mean) / pr.slope_sd, (c - pr.intercept_mean) / pr.intercept_sd
        return -0.5 * slope**2 - 0.5 * intercept**2

    def _information(self, a: np.ndarray, c: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The negative Hessian (haa, hac, hcc) of each item's M-step objective, prior included."""
        theta = self.nodes_[None, :]
        p = expit(a[:, None] * theta + c[:, None])
        info = n * p * (1 - p)
        haa = (info * theta**2).sum(1) + 1 / self.prior_.slope_sd**2
        return haa, (info * theta).sum(1), info.sum(1) + 1 / self.prior_.intercept_sd**2

    def _update_prior(self, a: np.ndarray, c: np.ndarray, n: np.ndarray, answered: np.ndarray) -> ItemPrior:
        """EM update of the estimated prior parts from the answered items (Laplace approximation of each posterior)."""
        haa, hac, hcc = (h[answered] for h in self._information(a, c, n))
        det = haa * hcc - hac**2
        pr = self.prior_

        def moments(x: np.ndarray, var: np.ndarray) -> tuple[float, float]:
            mean = float(x.mean())
            return mean, max(MIN_PRIOR_SD, float(np.sqrt(((x - mean) ** 2 + var).mean())))

        slope = moments(a[answered], hcc / det) if self.slope_prior_sd is None else (pr.slope_mean, pr.slope_sd)
        intercept = (moments(c[answered], haa / det) if self.intercept_prior_sd is None
                     else (pr.intercept_mean, pr.intercept_sd))
        return ItemPrior(*slope, *intercept)

    def _item_objective(self, a: np.ndarray, c: np.ndarray, n: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Expected complete-data log-likelihood + log prior, per item (n, r: items x nodes counts)."""
        z = a[:, None] * self.nodes_[None, :] + c[:, None]
        # r·log σ(z) + (n − r)·log σ(−z), with log σ(−z) = log σ(z) − z: one transcendental per cell, not two
        return (n * log_expit(z) - (n - r) * z).sum(axis=1) + self._log_prior(a, c)

    def _m_step(self, a: np.ndarray, c: np.ndarray, n: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Projected Newton on every item at once, halving steps that would not increase its objective."""
        theta = self.nodes_[None, :]
        pr = self.prior_
        va, vc = pr.slope_sd**2, pr.intercept_sd**2
        current = self._item_objective(a, c, n, r)
        for _ in range(self.newton_steps):
            p = expit(a[:, None] * theta + c[:, None])
            resid, info = r - n * p, n * p * (1 - p)
            ga = (resid * theta).sum(1) - (a - pr.slope_mean) / va
            gc = resid.sum(1) - (c - pr.intercept_mean) / vc
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

    def _e_step(
        self, data: tuple[sparse.csr_array, ...], a: np.ndarray, c: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """``(penalized log-likelihood, n, r)``: the objective at (a, c) and the items x nodes expected counts."""
        observed, correct, wrong = data
        log_joint = _grid_log_likelihood(correct, wrong, a, c, self.nodes_) + np.log(self.weights_)[None, :]
        log_marg = logsumexp(log_joint, axis=1, keepdims=True)
        post = np.exp(log_joint - log_marg)  # students x nodes
        value = float(log_marg.sum() + self._log_prior(a, c).sum())
        return value, np.asarray(observed.T @ post), np.asarray(correct.T @ post)

    def _settle_prior(self, data: tuple[sparse.csr_array, ...], a: np.ndarray, c: np.ndarray,
                      answered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """EM steps that update the items and the estimated prior together, until the prior stops moving."""
        for _ in range(self.max_iter):
            _, n, r = self._e_step(data, a, c)
            a, c = self._m_step(a, c, n, r)
            before, self.prior_ = self.prior_, self._update_prior(a, c, n, answered)
            if max(abs(x - y) for x, y in zip(vars(before).values(), vars(self.prior_).values())) < PRIOR_TOL:
                break
        return a, c

    def fit(self, responses: np.ndarray, q: np.ndarray) -> Self:
        """Marginal-ML EM from a = 1 and intercepts at each item's logit proportion correct (see the module doc)."""
        q = check_q(q)
        responses = check_responses(responses, n_items=q.shape[0])
        data = sparse_scores(responses)
        answered, right = data[0].sum(axis=0), data[1].sum(axis=0)
        p0 = np.clip(right / np.maximum(answered, 1), 0.05, 0.95)
        start = np.log(p0 / (1 - p0))[answered > 0]
        # a fixed prior as given; an estimated one starts at a = 1 and the spread of the items' logit proportions
        fixed_c = self.intercept_prior_sd is not None or start.size == 0
        self.prior_ = ItemPrior(
            1.0, self.slope_prior_sd or 1.0,
            0.0 if fixed_c else float(start.mean()),
            self.intercept_prior_sd or (1.0 if fixed_c else max(1.0, float(start.std()))),
        )
        a = np.ones(q.shape[0])
        c = np.where(answered > 0, np.log(p0 / (1 - p0)), self.prior_.intercept_mean)
        if (self.slope_prior_sd is None or self.intercept_prior_sd is None) and start.size:
            a, c = self._settle_prior(data, a, c, answered > 0)
        trace: list[float] = []
        self.converged_ = False
        for _ in range(self.max_iter):  # the prior held fixed from here on: a monotone EM
            value, n, r = self._e_step(data, a, c)
            trace.append(value)
            if len(trace) > 1 and trace[-1] - trace[-2] < self.tol * (1 + abs(trace[-1])):
                self.converged_ = True
                break
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

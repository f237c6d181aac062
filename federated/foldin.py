"""The fold-in of local-fed v2: one student's concept abilities from their responses, given the item
parameters and the higher-order prior (pure functions; the model is :mod:`federated.hocdm`).

The objective is the log posterior of θ ∈ R^K under θ ~ N(μ, Σ), Σ = λλᵀ + diag(ψ), and a composite
likelihood in which a response to item i adds ``w_ik = 1/|Q_i|`` of its Bernoulli log-likelihood
log σ(±(α_i θ_k + c_i)) to each concept k the item requires. Its negative Hessian is
``H = Σ⁻¹ + diag(information) = diag(A) − u uᵀ`` (one-factor precision, by Woodbury), so every
Newton direction costs O(K) (Sherman–Morrison) and H, an M-matrix when λ ≥ 0, has an entrywise
non-negative inverse: the mode is non-decreasing in every score (``federated.hocdm`` says why that
makes a correct answer never lower a mastery).

Each response touches only its item's concepts: ``index`` (B, L, R) names them and ``w`` (B, L, R)
weighs them (0 for padding), so a step costs O(L·R), not O(L·K) (ASSIST0910: R = 4, K = 110).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["Evidence", "Prior", "fold_in"]

STEP_SIZES = (1.0, 0.5, 0.25, 0.125)  # the backtracking line search's candidates


class Prior(NamedTuple):
    mean: torch.Tensor  # μ (K,)
    loading: torch.Tensor  # λ ≥ 0 (K,)
    unique_var: torch.Tensor  # ψ > 0 (K,)


class Evidence(NamedTuple):
    alpha: torch.Tensor  # discrimination of each response's item (B, L)
    intercept: torch.Tensor  # c of each response's item (B, L)
    index: torch.Tensor  # the concepts each response's item requires (B, L, R)
    weight: torch.Tensor  # 1/|Q_i| per (response, concept), 0 for padding and unused responses (B, L, R)
    scores: torch.Tensor  # (B, L) in [0, 1]


def _gather(theta: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """θ (..., K) at concept indices (..., L, R) -> (..., L, R)."""
    return torch.gather(theta.unsqueeze(-2).expand(*index.shape[:-1], theta.shape[-1]), -1, index)


def _scatter(values: torch.Tensor, index: torch.Tensor, k: int) -> torch.Tensor:
    """Sum values (..., L, R) into their concepts (..., K)."""
    out = values.new_zeros(*values.shape[:-2], k)
    return out.scatter_add(-1, index.flatten(-2), values.flatten(-2))


def _hessian_pieces(prior: Prior, info: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """H = diag(A) − u uᵀ: returns (A, u, 1 − uᵀA⁻¹u)."""
    _, lam, psi = prior
    u = (lam / psi) / torch.sqrt(1 + (lam.pow(2) / psi).sum())
    a = 1 / psi + info
    return a, u, 1 - (u.pow(2) / a).sum(-1, keepdim=True)


def _newton(prior: Prior, theta: torch.Tensor, e: Evidence) -> tuple[torch.Tensor, torch.Tensor]:
    """The Newton direction (B, K) at ``theta`` and the likelihood's information (B, K)."""
    mu, lam, psi = prior
    p = torch.sigmoid(e.alpha.unsqueeze(-1) * _gather(theta, e.index) + e.intercept.unsqueeze(-1))
    k = theta.shape[-1]
    resid = _scatter((e.scores.unsqueeze(-1) - p) * e.weight * e.alpha.unsqueeze(-1), e.index, k)
    info = _scatter(e.weight * e.alpha.pow(2).unsqueeze(-1) * p * (1 - p), e.index, k)
    d = theta - mu
    prior_grad = d / psi - (lam / psi) * ((d * lam / psi).sum(-1, keepdim=True) / (1 + (lam.pow(2) / psi).sum()))
    g = resid - prior_grad
    a, u, denom = _hessian_pieces(prior, info)
    step = g / a + (u / a) * ((u * g / a).sum(-1, keepdim=True) / denom)
    return step.clamp(-4.0, 4.0), info


def _log_posterior(prior: Prior, theta: torch.Tensor, e: Evidence) -> torch.Tensor:
    """The objective (up to a constant) per student (B,)."""
    mu, lam, psi = prior
    z = e.alpha.unsqueeze(-1) * _gather(theta, e.index) + e.intercept.unsqueeze(-1)
    y = e.scores.unsqueeze(-1)
    loglik = (e.weight * (y * F.logsigmoid(z) + (1 - y) * F.logsigmoid(-z))).sum((-2, -1))
    d = theta - mu
    quad = (d.pow(2) / psi).sum(-1) - (d * lam / psi).sum(-1).pow(2) / (1 + (lam.pow(2) / psi).sum())
    return loglik - 0.5 * quad


def fold_in(prior: Prior, evidence: Evidence, *, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior mode θ* (B, K) and the Laplace variance of each θ_k (B, K).

    ``steps − 1`` Newton steps with a backtracking line search run without gradient (plain Newton
    oscillated for sharply discriminating items; the search makes every step an ascent step), then
    one full Newton step from the mode carries the gradient to the parameters: at the fixed point its
    derivative equals the implicit-function derivative, so training needs no backpropagation through
    the iterations (and per-student DP-SGD under ``vmap`` stays cheap).
    """
    fixed = Evidence(*(t.detach() for t in evidence))
    frozen = Prior(*(t.detach() for t in prior))
    theta = frozen.mean.expand(*evidence.scores.shape[:-1], frozen.mean.shape[-1])
    with torch.no_grad():
        value = _log_posterior(frozen, theta, fixed)
        for _ in range(steps - 1):
            step, _ = _newton(frozen, theta, fixed)
            best, best_value = theta, value
            for size in STEP_SIZES:
                candidate = theta + size * step
                candidate_value = _log_posterior(frozen, candidate, fixed)
                better = (candidate_value > best_value).unsqueeze(-1)
                best = torch.where(better, candidate, best)
                best_value = torch.maximum(candidate_value, best_value)
            theta, value = best, best_value
    step, _ = _newton(prior, theta, evidence)
    theta = theta + step
    with torch.no_grad():  # the variance at the mode (it sizes intervals; no gradient)
        _, info = _newton(frozen, theta.detach(), fixed)
        a, u, denom = _hessian_pieces(frozen, info)
        var = 1 / a + (u / a).pow(2) / denom
    return theta, var

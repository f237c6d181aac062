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

Training needs torch here (the gradient through the last step, ``vmap`` for per-student DP-SGD). Item selection
maximises the same objective in numpy (``diagnosis.next_items.fold_in_mode``: torch's per-operation cost is too much
for a selection against a whole bank); ``tests/diagnosis/test_next_items.py`` checks the two modes agree.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["Evidence", "Prior", "fold_in", "predictive_variance"]

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
    """H = diag(A) − u uᵀ: returns (A, u, 1 − uᵀA⁻¹u).

    The last piece is not computed as written: with s = Σ λ²/ψ, uᵀA⁻¹u = Σ_k (λ_k²/ψ_k)/(1 + ψ_k·info_k) / (1 + s),
    so 1 − uᵀA⁻¹u = (1 + Σ_k λ_k²·info_k/(1 + ψ_k·info_k)) / (1 + s): a sum of non-negative terms, never below
    1/(1 + s) > 0. The difference form cancels catastrophically in float32 once the loadings are large (s ≫ 1) and
    could turn negative, which flipped the Newton step and the variance.
    """
    _, lam, psi = prior
    s = (lam.pow(2) / psi).sum()
    u = (lam / psi) / torch.sqrt(1 + s)
    a = 1 / psi + info
    denom = (1 + (lam.pow(2) * info / (1 + psi * info)).sum(-1, keepdim=True)) / (1 + s)
    return a, u, denom


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


def predictive_variance(prior: Prior, evidence: Evidence, theta: torch.Tensor) -> torch.Tensor:
    """The Laplace variance of each θ_k (B, K) under the model that *predicts*, at abilities ``theta`` (B, K).

    The fold-in's own variance (:func:`fold_in`) comes from the split likelihood, where an item requiring |Q_i|
    concepts counts 1/|Q_i| of its information on each of them as if each alone explained the answer, and drops
    every covariance: intervals from it were too narrow (a "90 %" interval covered 74–85 % of simulated truth, issue
    33). Responses are predicted from P(correct) = σ(α_i · Σ_k w_ik θ_k + c_i) with w_ik = 1/|Q_i| (the same
    weights), so that model's negative Hessian is the full K × K matrix
    H = Σ⁻¹ + Σ_i α_i² p_i (1 − p_i) w_i w_iᵀ, and the variance is diag(H⁻¹). It is solved in float64 by
    Cholesky (K ≤ a few hundred: cheap next to the fold-in), with Σ⁻¹ = diag(1/ψ) − v vᵀ from Woodbury.
    """
    _, lam, psi = (t.detach().double() for t in prior)
    th = theta.detach().double()
    k = th.shape[-1]
    weight = evidence.weight.detach().double()
    alpha = evidence.alpha.detach().double()
    rows = th.new_zeros(*weight.shape[:-1], k).scatter_add(-1, evidence.index, weight)  # w_i (B, L, K)
    logit = alpha * (rows * th.unsqueeze(-2)).sum(-1) + evidence.intercept.detach().double()
    p = torch.sigmoid(logit)
    used = (weight.sum(-1) > 0).double()  # padding and unused responses carry no information
    j = rows * (alpha * torch.sqrt(p * (1 - p) * used)).unsqueeze(-1)  # (B, L, K)
    v = (lam / psi) / torch.sqrt(1 + (lam.pow(2) / psi).sum())
    precision = torch.diag(1 / psi) - torch.outer(v, v)
    h = precision + j.transpose(-1, -2) @ j
    chol, info = torch.linalg.cholesky_ex(h)
    if bool((info != 0).any()):  # cannot happen for a valid prior; a tiny ridge rather than a crash
        chol = torch.linalg.cholesky(h + 1e-9 * torch.eye(k, dtype=h.dtype))
    eye = torch.eye(k, dtype=h.dtype).expand_as(h)
    cov = torch.cholesky_solve(eye, chol)
    return cov.diagonal(dim1=-2, dim2=-1).to(theta.dtype)

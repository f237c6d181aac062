"""Simulated students for the coverage report (issue 33): stated generators, seeded, and the coverage of intervals.

Two generators, each on a Q-matrix's item bank; every response draws an item uniformly from the bank (with
replacement, so 100 responses on FrcSub's 20 items answer each about five times, each a fresh draw):

* ``model``: local-fed's own family (:class:`federated.hocdm.HigherOrderCDM`), with item parameters and a prior drawn
  from :func:`generator_model`. Truth: mastery σ(θ_k) (the pinned scale, docs/uncertainty.md).
* ``dina``: DINA (slip, guess; attributes drawn independently with probability ½). Its truth is binary, so an
  interval cannot "cover" it; what is checked is the reported mastery read as a probability of mastery: its
  calibration against the true attributes (:func:`binned_calibration`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from federated.hocdm import HigherOrderCDM
from federated.itembank import inv_softplus
from qmatrix import QMatrix

__all__ = ["Simulated", "binned_calibration", "coverage", "generator_model", "simulate_dina", "simulate_model"]


@dataclass(frozen=True)
class Simulated:
    """Students × responses: item rows ``feats`` (B, L, F) of ``model``'s bank, ``scores`` (B, L), and the truth
    (B, K): mastery in [0, 1] (``model``) or attributes in {0, 1} (``dina``)."""

    feats: torch.Tensor
    scores: torch.Tensor
    truth: np.ndarray
    answered: np.ndarray  # (B, K) bool: the student answered at least one item requiring the concept


def generator_model(q: QMatrix, seed: int) -> HigherOrderCDM:
    """A model of local-fed's family with stated random parameters: per-item discrimination log-normal (sd 0.3
    around 1), intercept N(0, 1); prior mean N(0, 0.5²), loadings 0.8 ± 0.2, unique variances 0.5 ± 0.2."""
    g = torch.Generator().manual_seed(seed)
    model = HigherOrderCDM(q.concepts, items=q.item_ids)
    k, n = len(q.concepts), len(q.items)
    with torch.no_grad():
        alpha = torch.exp(0.3 * torch.randn(n, generator=g))
        model.item_delta[1:, 0] = torch.log(torch.expm1(alpha - 0.05)) - inv_softplus(1.0)
        model.item_delta[1:, 1] = torch.randn(n, generator=g)
        model.prior_mean.copy_(0.5 * torch.randn(k, generator=g))
        loading = 0.8 + 0.2 * (2 * torch.rand(k, generator=g) - 1)
        psi = 0.5 + 0.2 * (2 * torch.rand(k, generator=g) - 1)
        model.loading.copy_(torch.log(torch.expm1(loading)))
        model.unique_var.copy_(torch.log(torch.expm1(psi - 0.05)))
    model.mark_seen(q.item_ids)
    return model


def _draw_items(q: QMatrix, model: HigherOrderCDM, n_students: int, n_responses: int, rng: np.random.Generator
                ) -> tuple[torch.Tensor, np.ndarray]:
    table = torch.from_numpy(model.item_table(q))
    picks = rng.integers(0, len(q.items), size=(n_students, n_responses))
    feats = table[torch.from_numpy(picks)]
    k = len(q.concepts)
    answered = (feats[..., :k].sum(1) > 0).numpy()
    return feats, answered


def simulate_model(q: QMatrix, model: HigherOrderCDM, *, n_students: int, n_responses: int, seed: int) -> Simulated:
    """Students θ ~ N(μ, λλᵀ + diag ψ) of ``model``; responses from its predictive model."""
    rng = np.random.default_rng(seed)
    feats, answered = _draw_items(q, model, n_students, n_responses, rng)
    with torch.no_grad():
        mu, lam, psi = (t.detach().double() for t in model.prior())
        z = torch.from_numpy(rng.standard_normal((n_students, 1)))
        e = torch.from_numpy(rng.standard_normal((n_students, len(q.concepts))))
        theta = (mu + z * lam + e * psi.sqrt()).float()
        p = torch.sigmoid(model.response_logit(theta, feats)).numpy()
    scores = torch.from_numpy((rng.random(p.shape) < p).astype(np.float32))
    return Simulated(feats, scores, torch.sigmoid(theta).double().numpy(), answered)


def simulate_dina(q: QMatrix, model: HigherOrderCDM, *, n_students: int, n_responses: int, seed: int,
                  slip: float = 0.1, guess: float = 0.2) -> Simulated:
    """DINA students: attributes ~ Bernoulli(½) each; an item is right with 1 − slip when every attribute it needs
    is held, else with ``guess``."""
    rng = np.random.default_rng(seed)
    feats, answered = _draw_items(q, model, n_students, n_responses, rng)
    k = len(q.concepts)
    attributes = (rng.random((n_students, k)) < 0.5).astype(np.float64)
    need = feats[..., :k].double().numpy()
    held = (need * (1 - attributes[:, None, :])).sum(-1) == 0
    p = np.where(held, 1 - slip, guess)
    scores = torch.from_numpy((rng.random(p.shape) < p).astype(np.float32))
    return Simulated(feats, scores, attributes, answered)


def coverage(truth: np.ndarray, lower: np.ndarray, upper: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """(share of masked cells whose truth lies in [lower, upper], the worst concept's share)."""
    inside = (truth >= lower) & (truth <= upper)
    overall = float(inside[mask].mean())
    per_concept = [float(inside[:, k][mask[:, k]].mean()) for k in range(mask.shape[1]) if mask[:, k].sum() >= 20]
    return overall, min(per_concept, default=overall)


def binned_calibration(forecast: np.ndarray, outcome: np.ndarray, bins: int = 10) -> tuple[float, list[dict]]:
    """(expected calibration error, reliability rows {bin, mean forecast, observed rate, count}) of probabilities
    ``forecast`` against 0/1 ``outcome`` (equal-width bins)."""
    f, y = np.asarray(forecast, float).ravel(), np.asarray(outcome, float).ravel()
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(f, edges[1:-1]), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            rows.append({"bin": f"{edges[b]:.1f}-{edges[b + 1]:.1f}", "forecast": float(f[sel].mean()),
                         "observed": float(y[sel].mean()), "count": int(sel.sum())})
            ece += sel.mean() * abs(f[sel].mean() - y[sel].mean())
    return float(ece), rows

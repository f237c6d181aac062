"""local-fed's one-factor kind: a 2PL IRT over the platform's item bank, with a Bayesian fold-in.

One latent ability ``θ ~ N(0, 1)`` per student; item ``i`` answers ``P(correct) = σ(a_i θ + c_i)`` with
the item parameters of :mod:`federated.itembank` (a feature part from the Q-row and text, plus a per-item
part for items seen in training). The fixed prior pins the scale (``scale = "population"``, docs/mastery.md): the
ability is standardised in the training population, and the item parameters carry its location and unit. It is
the field's standard baseline model (ASSIST0910's published 2PL reaches a held-out AUC the higher-order kind does
not, docs/results/local-fed-kinds), trained federatedly by the same loop and chosen over the higher-order kind only
when the coordinator's held-out students say it predicts better (:func:`federated.train.train_federated`).

* **Fold-in**: the posterior mode of θ given a student's responses (1-D Newton with a backtracking line
  search on a concave objective), its Laplace variance for intervals, and the same last-step trick as
  :mod:`federated.foldin` so training needs no backpropagation through the iterations.
* **Mastery** of every concept is ``σ(θ*)``: the probability of answering a unit-discrimination item of
  average easiness, the same convention as the higher-order kind's ``σ(θ_k)``, so ``logit(mastery)`` *is* the
  ability and the served item forecasts (``diagnosis/forecast.py``: ``η_i = α_i · mean logit(mastery_k) + c_i``
  with this model's ``α_i, c_i`` and its N(0, 1) prior) are exactly this model's item-response function. A
  one-factor model says nothing that separates concepts: a student's concepts share one mastery. It is
  non-decreasing in every answer (``∂θ*/∂y_j = a_j / H > 0`` in one dimension).
* **Warm start** also fits the intercept's feature part to the items' pooled proportions correct (weighted
  least squares on the Q-rows), so an item never seen starts where its concepts' items are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from federated.foldin import STEP_SIZES
from federated.itembank import POPULATION, ItemBank, Scale

__all__ = ["IRT2PL", "MODEL_KIND"]

MODEL_KIND = "irt-2pl"
_EPS = 1e-6
_Z90 = 1.6448536269514722  # a 90 % central credible interval


def _log_posterior(theta: torch.Tensor, alpha: torch.Tensor, c: torch.Tensor, y: torch.Tensor,
                   w: torch.Tensor) -> torch.Tensor:
    z = alpha * theta.unsqueeze(-1) + c
    return (w * (y * F.logsigmoid(z) + (1 - y) * F.logsigmoid(-z))).sum(-1) - 0.5 * theta.pow(2)


def _newton(theta: torch.Tensor, alpha: torch.Tensor, c: torch.Tensor, y: torch.Tensor, w: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(Newton step, negative Hessian) of the log posterior at ``theta`` (B,)."""
    p = torch.sigmoid(alpha * theta.unsqueeze(-1) + c)
    g = (w * alpha * (y - p)).sum(-1) - theta
    h = (w * alpha.pow(2) * p * (1 - p)).sum(-1) + 1.0
    return (g / h).clamp(-4.0, 4.0), h


class IRT2PL(ItemBank):
    """Responses over an item bank -> one posterior ability per student, served as per-concept mastery
    (module docstring). Inputs as :class:`~federated.hocdm.HigherOrderCDM`'s: ``feats`` (B, L, F) item
    rows from :meth:`item_table`, ``scores`` (B, L) in [0, 1], ``context`` (B, L) the usable responses."""

    scale: Scale = POPULATION  # θ ~ N(0, 1) has always been fixed: every 2PL ever published is on the pinned scale

    def __init__(self, concepts: Sequence[str], *, items: Sequence[str] = (), text_dim: int = 0,
                 newton_steps: int = 12, item_prior_sd: float = 1.0,
                 generator: torch.Generator | None = None) -> None:
        if newton_steps < 1:
            raise ValueError(f"need newton_steps >= 1, got {newton_steps}")
        super().__init__(concepts, items=items, text_dim=text_dim, item_prior_sd=item_prior_sd)
        del generator  # every parameter starts at a fixed value
        self.newton_steps = newton_steps

    # --- the student side ------------------------------------------------------------
    def posterior(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mode θ* (B,) and its Laplace variance (B,)."""
        alpha, c = self.item_parameters(feats)
        w = context.to(alpha.dtype)
        fixed = (alpha.detach(), c.detach(), scores.detach(), w)
        theta = torch.zeros(scores.shape[:-1], dtype=alpha.dtype, device=alpha.device)
        with torch.no_grad():
            value = _log_posterior(theta, *fixed)
            for _ in range(self.newton_steps - 1):
                step, _ = _newton(theta, *fixed)
                best, best_value = theta, value
                for size in STEP_SIZES:  # every accepted step ascends (as in federated.foldin)
                    candidate = theta + size * step
                    candidate_value = _log_posterior(candidate, *fixed)
                    better = candidate_value > best_value
                    best = torch.where(better, candidate, best)
                    best_value = torch.maximum(candidate_value, best_value)
                theta, value = best, best_value
        step, _ = _newton(theta, alpha, c, scores, w)  # carries the gradient (implicit-function derivative)
        theta = theta + step
        with torch.no_grad():
            _, h = _newton(theta.detach(), *fixed)
        return theta, 1.0 / h

    def mastery(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Mastery σ(θ*) (B, K), the same for every concept (module docstring), non-decreasing in every score."""
        theta, _ = self.posterior(feats, scores, context)
        return torch.sigmoid(theta).unsqueeze(-1).expand(-1, len(self.concepts))

    def mastery_interval(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mastery, 5 % bound, 95 % bound), each (B, K): θ's 90 % Laplace credible interval through σ."""
        theta, var = self.posterior(feats, scores, context)
        sd, k = var.sqrt(), len(self.concepts)
        return tuple(torch.sigmoid(t).unsqueeze(-1).expand(-1, k)  # type: ignore[return-value]
                     for t in (theta, theta - _Z90 * sd, theta + _Z90 * sd))

    # --- responses -----------------------------------------------------------------
    def response_logit(self, theta: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """Logit of P(correct) (B, T) for target items ``feats`` (B, T, F) at abilities ``theta`` (B,)."""
        alpha, c = self.item_parameters(feats)
        return alpha * theta.unsqueeze(-1) + c

    def response_proba(self, mastery: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """P(correct) (B, T) at point mastery (B, K): the ability ``logit(mastery)`` averaged over the target item's
        concepts (exact for :meth:`mastery`'s output, where every concept carries the same θ)."""
        k = len(self.concepts)
        q = feats[..., :k]
        qbar = q / q.sum(-1, keepdim=True).clamp(min=1.0)
        theta = (qbar * torch.logit(mastery.clamp(_EPS, 1 - _EPS)).unsqueeze(-2)).sum(-1)  # (B, T)
        alpha, c = self.item_parameters(feats)
        return torch.sigmoid(alpha * theta + c)

    def forward(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Masked-response prediction: posterior-predictive P(correct) at every position from ``context``
        (the probit approximation over θ's Laplace posterior)."""
        theta, var = self.posterior(feats, scores, context)
        alpha, _ = self.item_parameters(feats)
        spread = alpha.pow(2) * var.unsqueeze(-1)
        return torch.sigmoid(self.response_logit(theta, feats) / torch.sqrt(1 + math.pi / 8 * spread))

    # --- warm start ------------------------------------------------------------------
    def warm_start(self, table: np.ndarray, correct: np.ndarray, count: np.ndarray, *,
                   prior_weight: float = 2.0) -> None:
        """:meth:`ItemBank.warm_start`, after fitting the intercept's feature part to the answered items'
        smoothed logits (least squares weighted by responses, a unit ridge): the fallback for items never seen
        starts where their concepts' items are."""
        target = self._warm_targets(table, correct, count, prior_weight)
        if target is not None:
            logit, seen = target
            x = torch.as_tensor(table)[:, :-1].double()[seen]
            x = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
            weight = torch.as_tensor(np.asarray(count, dtype=np.float64))[torch.as_tensor(table)[:, -1].round().long()]
            weight = weight[seen]
            gram = x.T @ (weight.unsqueeze(1) * x) + torch.eye(x.shape[1], dtype=x.dtype)
            solution = torch.linalg.solve(gram, x.T @ (weight * logit[seen].double()))
            with torch.no_grad():
                self.feature_w[1] = solution[:-1].float()
                self.feature_b[1] = float(solution[-1])
        super().warm_start(table, correct, count, prior_weight=prior_weight)

    def config(self) -> dict[str, Any]:
        return {"kind": MODEL_KIND, "concepts": list(self.concepts), "items": list(self.items),
                "text_dim": self.text_dim, "newton_steps": self.newton_steps, "item_prior_sd": self.item_prior_sd}

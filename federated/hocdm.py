"""local-fed v2: a higher-order IRT model over a platform's item bank, with a Bayesian fold-in.

Why this form (docs/local-fed.md; measured against v1, IRT, DINA and NCDM in docs/results/local-fed-ablation):

* **Item parameters per item.** Item ``i`` has a discrimination ``α_i > 0`` and an intercept
  ``c_i`` (easiness). Each is the sum of a *feature* part, a function of the item's Q-row (and
  hashed text), and a *per-item* part learned for items seen in training. A platform's item bank
  is shared by the institutions that use it, so item ids are a shared vocabulary
  (``items``, fixed when the model is built). An item never seen in training keeps its per-item
  part at 0 (a Gaussian prior pulls it there), so the feature part is the fallback for new items
  and rarely seen items are shrunk toward it.
* **Structure between concepts.** Concept abilities ``θ ∈ R^K`` have the higher-order prior
  ``θ ~ N(μ, Σ)``, ``Σ = ΛΛᵀ + Ψ`` with loadings ``Λ ≥ 0`` on one general ability and
  concept-specific variances ``Ψ``: evidence on one concept moves correlated ones.
* **Fold-in, not an amortised guess.** A new student's abilities are the posterior mode given
  their responses and the learned parameters (Newton's method on a K-dimensional concave
  problem), with the Laplace posterior variance for a credible interval. Few responses leave
  the student near the prior (shrinkage); no retraining is needed for new students.
* **Evidence split across an item's concepts.** In the fold-in an item requiring ``|Q_i|``
  concepts adds ``1/|Q_i|`` of its log-likelihood to each of them (a composite likelihood).
  This is what keeps the diagnosis **monotone**: the Hessian of the fold-in objective is then
  ``Σ⁻¹ + diag(information)``, and with ``Λ ≥ 0`` the one-factor precision ``Σ⁻¹`` has no
  positive off-diagonal entry, so the Hessian is an M-matrix whose inverse is entrywise
  ``≥ 0``. By the implicit function theorem ``∂θ*/∂y_j = H⁻¹ ∂g/∂y_j ≥ 0``: a correct answer
  never lowers any mastery, whatever the parameters (the full compensatory likelihood would
  allow MIRT's known "paradoxical" results, Hooker et al. 2009).
* **Responses** are predicted compensatorily from the mean ability over the item's concepts,
  ``P(correct) = σ(α_i · mean_{k∈Q_i} θ_k + c_i)``, averaged over the posterior (probit
  approximation), so an uncertain student is predicted less confidently.

Mastery of concept k is ``σ(θ_k)``: the probability of answering a unit-discrimination item of
average easiness on k; the credible interval maps ``θ_k ± z·sd_k`` through the same function.

Training (``federated.local``) is the masked-response objective: fold in from some responses,
predict the hidden ones. The fold-in iterates are detached and one last Newton step carries the
gradient; at the fixed point that step's derivative equals the implicit-function derivative, so
the gradient is exact without backpropagating through the iterations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from federated.features import hash_text
from federated.foldin import Evidence, Prior, fold_in
from qmatrix import QMatrix, QMatrixError

__all__ = ["HigherOrderCDM", "MODEL_KIND"]

MODEL_KIND = "higher-order-irt"
_EPS = 1e-6
_Z90 = 1.6448536269514722  # a 90 % central credible interval


def _inv_softplus(y: float) -> float:
    return math.log(math.expm1(y))


class HigherOrderCDM(nn.Module):
    """Responses over an item bank -> posterior concept abilities (see the module docstring).

    Inputs are padded per student: ``feats`` (B, L, F) item rows from :meth:`item_table`
    (Q-row, hashed text, then the item's 1-based bank index, 0 for an item outside the bank),
    ``scores`` (B, L) in [0, 1] and ``context`` (B, L), the responses the diagnosis may use.
    """

    def __init__(
        self,
        concepts: Sequence[str],
        *,
        items: Sequence[str] = (),
        text_dim: int = 0,
        newton_steps: int = 12,
        item_prior_sd: float = 1.0,
        max_item_concepts: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not concepts:
            raise ValueError("concepts must be non-empty")
        if text_dim < 0 or newton_steps < 1 or not item_prior_sd > 0:
            raise ValueError(f"need text_dim >= 0, newton_steps >= 1, item_prior_sd > 0; got {text_dim}, "
                             f"{newton_steps}, {item_prior_sd}")
        if len(set(items)) != len(items):
            raise ValueError("items must be distinct ids")
        del generator  # every parameter starts at a fixed value: two builds are identical anywhere
        k, f = len(concepts), len(concepts) + text_dim
        self.concepts, self.items = tuple(concepts), tuple(items)
        self.text_dim, self.newton_steps, self.item_prior_sd = text_dim, newton_steps, float(item_prior_sd)
        # the most concepts a bank item requires: the fold-in's width where it cannot read it from the data
        self.max_item_concepts = max_item_concepts
        self.seen_item_ids: set[str] = set()
        self._row = {item_id: r for r, item_id in enumerate(self.items)}
        # item parameters: a feature part (Q-row + text) and a per-item part (0 until trained)
        self.feature_w = nn.Parameter(torch.zeros(2, f))
        self.feature_b = nn.Parameter(torch.tensor([_inv_softplus(1.0), 0.0]))
        self.item_delta = nn.Parameter(torch.zeros(len(self.items) + 1, 2))  # row 0: outside the bank, never trained
        # higher-order prior over concept abilities
        self.prior_mean = nn.Parameter(torch.zeros(k))
        self.loading = nn.Parameter(torch.full((k,), _inv_softplus(1.0)))
        self.unique_var = nn.Parameter(torch.full((k,), _inv_softplus(1.0)))

    # --- inputs --------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return len(self.concepts) + self.text_dim + 1

    def item_row(self, item_id: str, concepts: Sequence[str], text: str | None = None) -> np.ndarray:
        """One item's input row; raises ``KeyError`` for a concept the model does not know."""
        column = {c: k for k, c in enumerate(self.concepts)}
        row = np.zeros(self.n_features, dtype=np.float32)
        row[[column[c] for c in concepts]] = 1.0
        if self.text_dim:
            row[len(self.concepts):-1] = hash_text(text, dim=self.text_dim)
        row[-1] = float(self._row.get(item_id, -1) + 1)
        return row

    def item_table(self, qmatrix: QMatrix) -> np.ndarray:
        """Input rows of ``qmatrix.items`` in order; a concept the model does not know raises
        :class:`QMatrixError` naming it (the model has no parameters for it)."""
        unknown = [c for c in qmatrix.concepts if c not in self.concepts]
        if unknown:
            raise QMatrixError([f"Q-matrix '{qmatrix.id}' uses concepts the model does not know: {', '.join(unknown)}"])
        return np.stack([self.item_row(i.id, i.concepts, i.text) for i in qmatrix.items]) if qmatrix.items \
            else np.zeros((0, self.n_features), np.float32)

    # --- parameters ----------------------------------------------------------------
    def item_parameters(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(discrimination α > 0, intercept c) for item rows ``feats`` (..., F)."""
        base = F.linear(feats[..., :-1], self.feature_w, self.feature_b)
        index = feats[..., -1].round().long().clamp(0, len(self.items))
        raw = base + self.item_delta[index]
        return F.softplus(raw[..., 0]) + 0.05, raw[..., 1]

    def prior(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mean μ, loadings λ ≥ 0, unique variances ψ > 0) of θ ~ N(μ, λλᵀ + diag ψ)."""
        return self.prior_mean, F.softplus(self.loading), F.softplus(self.unique_var) + 0.05

    def penalty(self) -> torch.Tensor:
        """Negative log prior of the per-item parameters (data-independent; the trainer scales it
        by 1 / training students so it weighs as one prior over the whole sample)."""
        return 0.5 * self.item_delta[1:].pow(2).sum() / self.item_prior_sd**2

    def concept_correlation(self) -> np.ndarray:
        """The prior correlation between concept abilities (K x K), for reports."""
        with torch.no_grad():
            _, lam, psi = self.prior()
            cov = torch.outer(lam, lam) + torch.diag(psi)
            sd = cov.diag().sqrt()
            return (cov / torch.outer(sd, sd)).numpy()

    # --- fold-in -------------------------------------------------------------------
    def _evidence(self, feats: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(index, w): each context response's concepts and their weights 1/|Q_i| (see ``federated.foldin``)."""
        k = len(self.concepts)
        q = feats[..., :k] * context.unsqueeze(-1).to(feats.dtype)
        try:  # as many slots as the most concepts any item here requires
            width = max(1, int(q.sum(-1).max()))
        except RuntimeError:  # under vmap (per-student DP-SGD) a shape cannot depend on data: the bank's bound
            width = self.max_item_concepts or k
        present, index = q.topk(min(width, k), dim=-1)
        return index, present / q.sum(-1, keepdim=True).clamp(min=1.0)

    def posterior(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mode θ* (B, K) and the Laplace posterior variance of each θ_k (B, K)."""
        index, w = self._evidence(feats, context)
        alpha, c = self.item_parameters(feats)
        return fold_in(Prior(*self.prior()), Evidence(alpha, c, index, w, scores), steps=self.newton_steps)

    def mastery(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Mastery σ(θ*_k) (B, K), non-decreasing in every score in ``context``."""
        return torch.sigmoid(self.posterior(feats, scores, context)[0])

    def mastery_interval(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mastery, 5 % bound, 95 % bound), each (B, K): the 90 % Laplace credible interval."""
        theta, var = self.posterior(feats, scores, context)
        sd = var.sqrt()
        return torch.sigmoid(theta), torch.sigmoid(theta - _Z90 * sd), torch.sigmoid(theta + _Z90 * sd)

    # --- responses -----------------------------------------------------------------
    def response_logit(self, theta: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """Logit of P(correct) (B, T) for target items ``feats`` (B, T, F) at abilities ``theta`` (B, K)."""
        k = len(self.concepts)
        q = feats[..., :k]
        qbar = q / q.sum(-1, keepdim=True).clamp(min=1.0)
        alpha, c = self.item_parameters(feats)
        return alpha * (qbar * theta.unsqueeze(-2)).sum(-1) + c

    def response_proba(self, mastery: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """P(correct) (B, T) at point mastery (B, K) (v1's signature: no posterior spread)."""
        theta = torch.logit(mastery.clamp(_EPS, 1 - _EPS))
        return torch.sigmoid(self.response_logit(theta, feats))

    def forward(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Masked-response prediction: posterior-predictive P(correct) at every position from ``context``."""
        theta, var = self.posterior(feats, scores, context)
        k = len(self.concepts)
        q = feats[..., :k]
        qbar = q / q.sum(-1, keepdim=True).clamp(min=1.0)
        alpha, _ = self.item_parameters(feats)
        spread = alpha.pow(2) * (qbar.pow(2) * var.unsqueeze(-2)).sum(-1)  # diagonal part of qᵀ H⁻¹ q
        return torch.sigmoid(self.response_logit(theta, feats) / torch.sqrt(1 + math.pi / 8 * spread))

    def item_weights(self, features: torch.Tensor, item_index: torch.Tensor, observed: torch.Tensor
                     ) -> dict[str, np.ndarray]:
        """Per-row weights of the per-item parameters: how many of these responses each bank row got.

        FedAvg averages ``item_delta`` row by row over the clients that saw the item, weighted by
        their responses to it (a client that never saw an item says nothing about it).
        """
        rows = features[:, -1].round().long()[item_index[observed]]
        return {"item_delta": np.bincount(rows.numpy(), minlength=len(self.items) + 1).astype(np.float64)}

    def item_sums(self, features: torch.Tensor, item_index: torch.Tensor, observed: torch.Tensor,
                  scores: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(sum of scores, responses) per bank row over these students: one client's share of the warm start."""
        rows = features[:, -1].round().long()[item_index[observed]].numpy()
        size = len(self.items) + 1
        return (np.bincount(rows, weights=scores[observed].numpy().astype(np.float64), minlength=size),
                np.bincount(rows, minlength=size).astype(np.float64))

    def warm_start(self, table: np.ndarray, correct: np.ndarray, count: np.ndarray, *,
                   prior_weight: float = 2.0) -> None:
        """Start each bank item's intercept at the logit of its pooled proportion correct, smoothed toward
        the overall mean by ``prior_weight`` pseudo-responses (IRT's usual starting values).

        ``table`` holds the bank's input rows (:meth:`item_table`); ``correct`` and ``count`` are the
        summed :meth:`item_sums` of every client. Without a warm start the per-item intercepts are
        learned from sparse minibatch gradients alone, which on ASSIST0910's 16,804-item bank left
        most of them near the feature fallback (docs/local-fed.md).
        """
        correct, count = np.asarray(correct, dtype=np.float64), np.asarray(count, dtype=np.float64)
        total = count[1:].sum()
        if total <= 0:
            return
        mean = float(np.clip(correct[1:].sum() / total, 0.01, 0.99))
        pooled = np.divide(correct + prior_weight * mean, count + prior_weight, out=np.full_like(count, mean),
                           where=count + prior_weight > 0)
        p = np.clip(pooled, 0.01, 0.99)
        rows = torch.as_tensor(table)
        index = rows[:, -1].round().long()
        with torch.no_grad():
            base = F.linear(rows[:, :-1], self.feature_w, self.feature_b)[:, 1]  # the intercept's feature part
            target = torch.as_tensor(np.log(p / (1 - p)), dtype=torch.float32)[index]
            seen = torch.as_tensor(count > 0)[index] & (index > 0)
            self.item_delta[index[seen], 1] = (target - base)[seen]

    # --- bookkeeping -----------------------------------------------------------------
    def mark_seen(self, item_ids: Sequence[str] | set[str]) -> None:
        self.seen_item_ids.update(item_ids)

    def config(self) -> dict[str, Any]:
        return {"kind": MODEL_KIND, "concepts": list(self.concepts), "items": list(self.items),
                "text_dim": self.text_dim, "newton_steps": self.newton_steps, "item_prior_sd": self.item_prior_sd,
                "max_item_concepts": self.max_item_concepts}

    def get_extra_state(self) -> dict[str, Any]:
        return {"seen_item_ids": sorted(self.seen_item_ids), "config": self.config()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if state.get("config", self.config()) != self.config():
            raise ValueError("state was saved from a model with another config")
        self.seen_item_ids = set(state.get("seen_item_ids", []))

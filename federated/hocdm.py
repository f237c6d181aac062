"""local-fed v2: a higher-order IRT model over a platform's item bank, with a Bayesian fold-in.

Why this form (docs/local-fed.md; measured against v1, IRT, DINA and NCDM in docs/results/local-fed-ablation):

* **Item parameters per item** (:mod:`federated.itembank`, shared with the 2PL kind). Item ``i`` has a discrimination ``α_i > 0`` and an intercept
  ``c_i`` (easiness). Each is the sum of a *feature* part, a function of the item's Q-row (and
  hashed text), and a *per-item* part learned for items seen in training. A platform's item bank
  is shared by the institutions that use it, so item ids are a shared vocabulary
  (``items``, fixed when the model is built). An item never seen in training keeps its per-item
  part at 0 (a Gaussian prior pulls it there), so the feature part is the fallback for new items
  and rarely seen items are shrunk toward it.
* **Structure between concepts.** Concept abilities ``θ ∈ R^K`` have the higher-order prior
  ``θ ~ N(μ, Σ)``, ``Σ = ΛΛᵀ + Ψ`` with loadings ``Λ ≥ 0`` on one general ability and
  concept-specific variances ``Ψ``: evidence on one concept moves correlated ones.
* **A pinned scale** (``scale="population"``, what :func:`federated.models.new_model` builds; docs/mastery.md).
  ``μ = 0`` and ``Ψ_k = 1 − λ_k²`` with ``λ_k ∈ (0, λ_max]``, so ``Σ`` is a correlation matrix: every ability is
  standardised in the training population (mean 0, sd 1) and the items' discriminations and intercepts carry what a
  learned mean and scale did (the abilities' location and unit are not identified otherwise, and drifted between
  trainings). Only the loadings, i.e. the correlations ``λ_j λ_k``, are learned. ``λ_max`` keeps ``Ψ_k`` above the
  free prior's floor, so the fold-in's ``1/ψ`` stays bounded. ``scale="free"`` is the parametrisation before it
  (``μ``, ``Λ = softplus(·)``, ``Ψ = softplus(·) + floor``, all learned): a model published with it loads and
  serves unchanged and says so (``scale``), since no exact conversion exists — a concept-specific shift or unit
  cannot move into the intercept and discrimination of an item that requires several concepts (the split
  likelihood below gives each of them ``α_i θ_k + c_i``), nor into the feature fallback's softplus. ``free`` is also
  the constructor's default, so a configuration saved before the option existed rebuilds the model it described,
  and serves priors set by hand (the untrained evidence model's, simulation generators).
* **Fold-in, not an amortised guess.** A new student's abilities are the posterior mode given
  their responses and the learned parameters (Newton's method on a K-dimensional concave
  problem), with the Laplace posterior variance for a credible interval. Few responses leave
  the student near the prior (shrinkage); no retraining is needed for new students.
* **Evidence split across an item's concepts.** In the fold-in an item requiring ``|Q_i|``
  concepts adds ``1/|Q_i|`` of its log-likelihood to each of them (a composite likelihood).
  This is what keeps the diagnosis **monotone**: the Hessian of the fold-in objective is then
  ``Σ⁻¹ + diag(information)``, and with ``Λ ≥ 0`` the one-factor precision ``Σ⁻¹`` has no
  positive off-diagonal entry (by Woodbury, ``(Σ⁻¹)_jk = −λ_j λ_k / (ψ_j ψ_k (1 + Σ_m λ_m²/ψ_m))`` for ``j ≠ k``,
  whichever way ``ψ > 0`` is tied to ``λ``: it holds for the pinned scale's ``ψ_k = 1 − λ_k²`` too), so the
  Hessian is an M-matrix whose inverse is entrywise ``≥ 0``. By the implicit function theorem
  ``∂θ*/∂y_j = H⁻¹ ∂g/∂y_j ≥ 0``: a correct answer never lowers any mastery, whatever the parameters (the full
  compensatory likelihood would allow MIRT's known "paradoxical" results, Hooker et al. 2009).
* **Responses** are predicted compensatorily from the mean ability over the item's concepts,
  ``P(correct) = σ(α_i · mean_{k∈Q_i} θ_k + c_i)``, averaged over the posterior (probit
  approximation), so an uncertain student is predicted less confidently.

Mastery of concept k is ``σ(θ_k)``: the probability of answering a unit-discrimination item of
average easiness on k; the credible interval maps ``θ_k ± z·sd_k`` through the same function. On the pinned scale
0.5 is the training population's typical ability on k and ``σ(1) ≈ 0.73`` one population sd above it.

Training (``federated.local``) is the masked-response objective: fold in from some responses,
predict the hidden ones. The fold-in iterates are detached and one last Newton step carries the
gradient; at the fixed point that step's derivative equals the implicit-function derivative, so
the gradient is exact without backpropagating through the iterations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from federated.foldin import Evidence, Prior, fold_in, predictive_variance
from federated.itembank import FREE, POPULATION, SCALES, ItemBank, Scale, inv_softplus

__all__ = ["HigherOrderCDM", "MODEL_KIND"]

MODEL_KIND = "higher-order-irt"
_EPS = 1e-6
_Z90 = 1.6448536269514722  # a 90 % central credible interval
_MIN_UNIQUE = 0.05  # the least concept-specific variance ψ_k: the fold-in divides by it
_MAX_LOADING = math.sqrt(1 - _MIN_UNIQUE)  # on the pinned scale ψ_k = 1 − λ_k² ≥ _MIN_UNIQUE
# The free prior starts at λ_k = 1, ψ_k = 1 + _MIN_UNIQUE; the pinned one starts there standardised (λ and the items'
# discriminations rescaled by the start's sd), an exact conversion since every concept then shares mean 0 and unit.
_FREE_START_LOADING, _FREE_START_UNIQUE = 1.0, 1.0 + _MIN_UNIQUE
_FREE_START_SD = math.sqrt(_FREE_START_LOADING**2 + _FREE_START_UNIQUE)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


class HigherOrderCDM(ItemBank):
    """Responses over an item bank -> posterior concept abilities (see the module docstring).

    Inputs are padded per student: ``feats`` (B, L, F) item rows from :meth:`item_table`
    (Q-row, hashed text, then the item's 1-based bank index, 0 for an item outside the bank),
    ``scores`` (B, L) in [0, 1] and ``context`` (B, L), the responses the diagnosis may use.
    """

    # a state saved before the option existed is of the free scale
    CONFIG_ADDED: ClassVar[dict[str, Any]] = {"scale": FREE}

    def __init__(
        self,
        concepts: Sequence[str],
        *,
        items: Sequence[str] = (),
        text_dim: int = 0,
        newton_steps: int = 12,
        item_prior_sd: float = 1.0,
        max_item_concepts: int | None = None,
        scale: Scale = FREE,
        generator: torch.Generator | None = None,
    ) -> None:
        if newton_steps < 1:
            raise ValueError(f"need newton_steps >= 1, got {newton_steps}")
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
        super().__init__(concepts, items=items, text_dim=text_dim, item_prior_sd=item_prior_sd)
        del generator  # every parameter starts at a fixed value: two builds are identical anywhere
        k = len(concepts)
        self.newton_steps = newton_steps
        # the most concepts a bank item requires: the fold-in's width where it cannot read it from the data
        self.max_item_concepts = max_item_concepts
        self.scale: Scale = scale
        # higher-order prior over concept abilities
        if scale == POPULATION:  # μ = 0 is not learned; ψ follows from λ (module docstring)
            self.register_buffer("prior_mean", torch.zeros(k))
            start = _FREE_START_LOADING / _FREE_START_SD
            self.loading = nn.Parameter(torch.full((k,), _logit(start / _MAX_LOADING)))
            self.rescale_start_discrimination(_FREE_START_SD)
        else:
            self.prior_mean = nn.Parameter(torch.zeros(k))
            self.loading = nn.Parameter(torch.full((k,), inv_softplus(_FREE_START_LOADING)))
            self.unique_var = nn.Parameter(torch.full((k,), inv_softplus(_FREE_START_UNIQUE - _MIN_UNIQUE)))

    # --- parameters ----------------------------------------------------------------
    def prior(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mean μ, loadings λ ≥ 0, unique variances ψ > 0) of θ ~ N(μ, λλᵀ + diag ψ); on the pinned scale
        μ = 0 and λ_k² + ψ_k = 1."""
        if self.scale == POPULATION:
            lam = _MAX_LOADING * torch.sigmoid(self.loading)
            return self.prior_mean, lam, 1 - lam.pow(2)
        return self.prior_mean, F.softplus(self.loading), F.softplus(self.unique_var) + _MIN_UNIQUE

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

    def _fold_in_inputs(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> tuple[Prior, Evidence]:
        index, w = self._evidence(feats, context)
        alpha, c = self.item_parameters(feats)
        return Prior(*self.prior()), Evidence(alpha, c, index, w, scores)

    def posterior(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mode θ* (B, K) and the split likelihood's Laplace variance of each θ_k (B, K) (training's
        posterior-predictive spread; intervals use :meth:`mastery_interval`'s full curvature)."""
        return fold_in(*self._fold_in_inputs(feats, scores, context), steps=self.newton_steps)

    def mastery(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Mastery σ(θ*_k) (B, K), non-decreasing in every score in ``context``."""
        return torch.sigmoid(self.posterior(feats, scores, context)[0])

    def mastery_interval(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mastery, 5 % bound, 95 % bound), each (B, K): the 90 % Laplace credible interval of the model that
        predicts (:func:`federated.foldin.predictive_variance`: full curvature, covariances kept) at the mode."""
        prior, evidence = self._fold_in_inputs(feats, scores, context)
        theta, _ = fold_in(prior, evidence, steps=self.newton_steps)
        sd = predictive_variance(prior, evidence, theta).sqrt()
        return torch.sigmoid(theta), torch.sigmoid(theta - _Z90 * sd), torch.sigmoid(theta + _Z90 * sd)

    def logit_sd_curve(self, feats: torch.Tensor, context: torch.Tensor, shifts: Sequence[float]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mastery points, posterior sd of θ_k there), each (S, B, K): the Laplace sd of the predictive model
        evaluated at θ = μ + t for each shift t, *not* at the student's mode.

        It depends on which items were answered, never on the scores, so an entity may release it next to its
        privatized mastery without spending privacy; the aggregator reads it at the mastery it is weighing
        (:mod:`diagnosis.posterior.spread`). Where the mode lies along the same shift it equals the sd at the mode.
        """
        prior, evidence = self._fold_in_inputs(feats, torch.zeros_like(feats[..., 0]), context)
        mu = prior.mean.detach()
        base = mu.expand(*feats.shape[:-2], mu.shape[-1])
        sds = [predictive_variance(prior, evidence, base + t).sqrt() for t in shifts]
        points = [torch.sigmoid(base + t) for t in shifts]
        return torch.stack(points), torch.stack(sds)

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

    # --- bookkeeping -----------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {"kind": MODEL_KIND, "concepts": list(self.concepts), "items": list(self.items),
                "text_dim": self.text_dim, "newton_steps": self.newton_steps, "item_prior_sd": self.item_prior_sd,
                "max_item_concepts": self.max_item_concepts, "scale": self.scale}

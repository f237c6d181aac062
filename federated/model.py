"""An inductive cognitive-diagnosis model: responses in, per-concept mastery out.

Why this shape:

* **Inductive, no item ids.** Every item-dependent quantity is a function of the item's
  feature row (Q-row + optional hashed text, :mod:`federated.features`). A new item needs
  no retraining, and clients in a federation need not share an item-id vocabulary.
* **Monotone by construction.** For concept k the encoder computes

      D_k = sum_i q_ik (a+_ik s_i - a-_ik (1 - s_i)) / (1/2 sum_i q_ik (a+_ik + a-_ik) + c_k)
      mastery_k = sigmoid(prior_k + sum_j M_kj D_j)

  with a+, a- = softplus(item features) >= 0, c_k >= 0 and M = softplus(.) >= 0. The
  denominator does not depend on the scores s_i, so dD_j/ds_i = q_ij (a+_ij + a-_ij)/den >= 0
  and every mastery is non-decreasing in every score: a correct answer can never lower a
  mastery, whatever the weights. A teacher can trust the direction of every update; DP
  noise or federated averaging cannot break it either, since it holds for all parameters.
  The pseudo-count c_k shrinks concepts with little evidence toward the prior; M lets
  evidence on one concept inform correlated ones (initialised near the identity).
* **Q-respecting interaction.** A response is predicted only from the concepts its item
  requires, either NeuralCD-style (``"ncd"``: positive-weight MLP over
  q_i * (mastery - difficulty_i) * discrimination_i) or DINA-style (``"dina"``: guess +
  (1 - slip - guess) * prod_k mastery_k^q_ik, a soft AND). Both increase in mastery.

Parameters are created directly from an injected ``torch.Generator`` (never the global RNG),
so two models built with the same seed are identical on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from federated.features import hash_text, item_features
from qmatrix import QMatrix

__all__ = ["CDModel", "Interaction", "default_device", "masked_bce"]

Interaction = Literal["ncd", "dina"]
MODEL_KIND = "evidence-encoder"  # local-fed v1
_EPS = 1e-6


def default_device() -> torch.device:
    """CUDA when available (the same code runs there), else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> nn.Parameter:
    return nn.Parameter((torch.rand(shape, generator=generator) * 2 - 1) * bound)


def _inv_softplus(y: float) -> float:
    return math.log(math.expm1(y))


class CDModel(nn.Module):
    """Student responses -> mastery of every concept in ``concepts`` (see the module docstring)."""

    def __init__(
        self,
        concepts: Sequence[str],
        *,
        text_dim: int = 0,
        hidden: int = 32,
        interaction: Interaction = "dina",
        generator: torch.Generator | None = None,
        kind: str = MODEL_KIND,
    ) -> None:
        super().__init__()
        if kind != MODEL_KIND:
            raise ValueError(f"CDModel is the {MODEL_KIND!r} model, not {kind!r}")
        if not concepts:
            raise ValueError("concepts must be non-empty")
        if interaction not in ("ncd", "dina"):
            raise ValueError(f"interaction must be 'ncd' or 'dina', got {interaction!r}")
        if text_dim < 0 or hidden < 1:
            raise ValueError(f"need text_dim >= 0 and hidden >= 1, got {text_dim}, {hidden}")
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        self.concepts = tuple(concepts)
        self.text_dim, self.hidden, self.interaction = text_dim, hidden, interaction
        self.seen_item_ids: set[str] = set()
        k, f = len(self.concepts), len(self.concepts) + text_dim
        # Item trunk shared by the encoder (evidence weights) and the decoder (item parameters).
        bound = 1 / math.sqrt(f)
        self.trunk_w, self.trunk_b = _uniform((hidden, f), bound, g), _uniform((hidden,), bound, g)
        small = 0.1 / math.sqrt(hidden)
        self.evidence_w = _uniform((2 * k, hidden), small, g)
        self.evidence_b = nn.Parameter(torch.full((2 * k,), _inv_softplus(1.0)))
        self.prior = nn.Parameter(torch.zeros(k))
        self.pseudo_count = nn.Parameter(torch.full((k,), _inv_softplus(0.5)))
        self.mix = nn.Parameter(torch.full((k, k), -6.0) + torch.eye(k) * (6.0 + _inv_softplus(4.0)))
        if interaction == "ncd":
            # difficulty per concept (k) and discrimination (1); then a positive MLP.
            # Initialised so the output logit starts in about (-2, 2), not saturated.
            item_b = torch.zeros(k + 1)
            item_b[k] = _inv_softplus(4.0)
            self.item_w, self.item_b = _uniform((k + 1, hidden), small, g), nn.Parameter(item_b)
            width = max(8, min(2 * k, 64))
            self.pos1_w = nn.Parameter(_uniform((width, k), 0.5, g).detach() + _inv_softplus(1.0))
            self.pos1_b = _uniform((width,), 1.0, g)
            self.pos2_w = nn.Parameter(_uniform((1, width), 0.1, g).detach() + _inv_softplus(4.0 / width))
            self.pos2_b = nn.Parameter(torch.full((1,), -2.0))
        else:
            # guess and slip logits, each squashed into (0, 0.5).
            self.item_w, self.item_b = _uniform((2, hidden), small, g), nn.Parameter(torch.full((2,), -1.0))

    # --- encoder -----------------------------------------------------------------
    def _trunk(self, feats: torch.Tensor) -> torch.Tensor:
        return torch.tanh(F.linear(feats, self.trunk_w, self.trunk_b))

    def evidence(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Normalised signed evidence D (B, K) from the responses flagged in ``context`` (B, L)."""
        k = len(self.concepts)
        q = feats[..., :k] * context.unsqueeze(-1).to(feats.dtype)
        a = F.softplus(F.linear(self._trunk(feats), self.evidence_w, self.evidence_b))
        a_pos, a_neg = a[..., :k] * q, a[..., k:] * q
        s = scores.unsqueeze(-1)
        numerator = (a_pos * s - a_neg * (1 - s)).sum(-2)
        denominator = 0.5 * (a_pos + a_neg).sum(-2) + F.softplus(self.pseudo_count) + _EPS
        return numerator / denominator

    def mastery(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Mastery (B, K) in (0, 1), non-decreasing in every score in ``context``."""
        d = self.evidence(feats, scores, context)
        return torch.sigmoid(self.prior + d @ F.softplus(self.mix).T)

    # --- decoder -----------------------------------------------------------------
    def response_proba(self, mastery: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """P(correct) (B, T) for target items ``feats`` (B, T, F), given ``mastery`` (B, K)."""
        k = len(self.concepts)
        q = feats[..., :k]
        out = F.linear(self._trunk(feats), self.item_w, self.item_b)
        m = mastery.unsqueeze(-2)
        if self.interaction == "ncd":
            difficulty, discrimination = torch.sigmoid(out[..., :k]), F.softplus(out[..., k:])
            x = q * (m - difficulty) * discrimination
            h = torch.sigmoid(F.linear(x, F.softplus(self.pos1_w), self.pos1_b))
            return torch.sigmoid(F.linear(h, F.softplus(self.pos2_w), self.pos2_b)).squeeze(-1)
        guess, slip = 0.5 * torch.sigmoid(out[..., 0]), 0.5 * torch.sigmoid(out[..., 1])
        log_all = (q * torch.log(m.clamp(min=_EPS))).sum(-1)
        return guess + (1 - slip - guess) * torch.exp(log_all)

    def forward(self, feats: torch.Tensor, scores: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Masked-response prediction: P(correct) at every position, from ``context`` responses only."""
        return self.response_proba(self.mastery(feats, scores, context), feats)

    # --- inputs ----------------------------------------------------------------------
    def item_table(self, qmatrix: QMatrix) -> np.ndarray:
        """Input rows of ``qmatrix.items`` (Q-row + hashed text): items are features, never ids."""
        return item_features(qmatrix, self.concepts, text_dim=self.text_dim)

    def item_row(self, item_id: str, concepts: Sequence[str], text: str | None = None) -> np.ndarray:
        """One item's input row; raises ``KeyError`` for a concept the model does not know."""
        del item_id  # v1 sees items only through their features
        column = {c: k for k, c in enumerate(self.concepts)}
        row = np.zeros(len(self.concepts) + self.text_dim, dtype=np.float32)
        row[[column[c] for c in concepts]] = 1.0
        if self.text_dim:
            row[len(self.concepts):] = hash_text(text, dim=self.text_dim)
        return row

    def penalty(self) -> torch.Tensor:
        """No prior on v1's weights (the trainer's interface; see ``HigherOrderCDM.penalty``)."""
        return torch.zeros(())

    def item_weights(self, features: torch.Tensor, item_index: torch.Tensor, observed: torch.Tensor
                     ) -> dict[str, np.ndarray]:
        """v1 has no per-item parameters: every parameter is averaged as a whole."""
        del features, item_index, observed
        return {}

    # --- bookkeeping -------------------------------------------------------------
    def mark_seen(self, item_ids: Sequence[str] | set[str]) -> None:
        """Record items trained on, so predictions can flag the ones the model never saw."""
        self.seen_item_ids.update(item_ids)

    def config(self) -> dict[str, Any]:
        """Constructor arguments, so a receiver can rebuild the architecture before loading weights."""
        return {"kind": MODEL_KIND, "concepts": list(self.concepts), "text_dim": self.text_dim,
                "hidden": self.hidden, "interaction": self.interaction}

    def get_extra_state(self) -> dict[str, Any]:
        return {"seen_item_ids": sorted(self.seen_item_ids), "config": self.config()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        saved = {"kind": MODEL_KIND, **state.get("config", self.config())}  # v1 states saved before "kind" existed
        if saved != self.config():
            raise ValueError(f"state was saved from a model with config {state['config']}, not {self.config()}")
        self.seen_item_ids = set(state.get("seen_item_ids", []))


def masked_bce(proba: torch.Tensor, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-student mean BCE over the ``target`` positions, shape (B,); 0 for students without targets.

    Each student counts once however many responses they hid, which is also the unit that
    student-level DP clips.
    """
    p = proba.clamp(_EPS, 1 - _EPS)
    bce = -(scores * torch.log(p) + (1 - scores) * torch.log1p(-p))
    weight = target.to(bce.dtype)
    return (bce * weight).sum(-1) / weight.sum(-1).clamp(min=1)

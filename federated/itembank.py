"""Per-item parameters over a platform's item bank: what every item-response kind of local-fed shares.

Item ``i`` has a discrimination ``α_i > 0`` and an intercept ``c_i`` (easiness), each the sum of a
*feature* part (a linear function of the item's Q-row and hashed text) and a *per-item* part learned
for items seen in training. Item ids are the institutions' shared vocabulary (``items``, fixed when
the model is built); an item never seen keeps its per-item part at 0 (a Gaussian prior pulls it
there), so the feature part is the fallback for new items and rare items are shrunk toward it.

The kinds (:mod:`federated.hocdm`'s higher-order IRT, :mod:`federated.irt2pl`'s one-factor 2PL) differ
only in the student side: how abilities are folded in and how an item's response depends on them.

Parameters are registered here first (``feature_w``, ``feature_b``, ``item_delta``), so a subclass's
``parameters()`` order, the federation's wire format, starts with them.

**The ability scale** (``Scale``, docs/mastery.md). An ability's location and unit trade off against the item
parameters: adding m to every ability and −α_i·m to every intercept, or multiplying abilities by s and
discriminations by 1/s, predicts the same answers. A kind fixes them with its prior over abilities: ``population``
fixes its mean at 0 and every marginal variance at 1, so abilities are standardised in the training population and
the item parameters carry what the location and unit did; ``free`` learns the prior's mean and variances (models
published before issue 33), so a mastery from one such version is not on the same scale as another's.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from federated.features import hash_text
from qmatrix import QMatrix, QMatrixError

__all__ = ["FREE", "POPULATION", "SCALES", "ItemBank", "Scale", "inv_softplus"]

Scale = Literal["population", "free"]
POPULATION: Scale = "population"  # prior mean 0, unit marginal variances: standardised in the training population
FREE: Scale = "free"  # the prior's mean and variances learned: the scale is not pinned (models before issue 33)
SCALES: tuple[Scale, ...] = (POPULATION, FREE)
_MIN_DISCRIMINATION = 0.05  # α = softplus(·) + this: an item always says something about the ability


def inv_softplus(y: float) -> float:
    return math.log(math.expm1(y))


class ItemBank(nn.Module, ABC):
    """Item rows and per-item parameters (see the module docstring). A subclass adds the student side,
    ``config()`` (what :func:`federated.models.build_model` rebuilds it from) and ``scale``, how its prior pins the
    abilities' location and unit (module docstring)."""

    scale: Scale
    # config keys added after models were published, with the value a state saved without them implies
    CONFIG_ADDED: ClassVar[dict[str, Any]] = {}

    def __init__(self, concepts: Sequence[str], *, items: Sequence[str] = (), text_dim: int = 0,
                 item_prior_sd: float = 1.0) -> None:
        super().__init__()
        if not concepts:
            raise ValueError("concepts must be non-empty")
        if text_dim < 0 or not item_prior_sd > 0:
            raise ValueError(f"need text_dim >= 0, item_prior_sd > 0; got {text_dim}, {item_prior_sd}")
        if len(set(items)) != len(items):
            raise ValueError("items must be distinct ids")
        f = len(concepts) + text_dim
        self.concepts, self.items = tuple(concepts), tuple(items)
        self.text_dim, self.item_prior_sd = text_dim, float(item_prior_sd)
        self.seen_item_ids: set[str] = set()
        self._row = {item_id: r for r, item_id in enumerate(self.items)}
        # item parameters: a feature part (Q-row + text) and a per-item part (0 until trained)
        self.feature_w = nn.Parameter(torch.zeros(2, f))
        self.feature_b = nn.Parameter(torch.tensor([inv_softplus(1.0), 0.0]))
        self.item_delta = nn.Parameter(torch.zeros(len(self.items) + 1, 2))  # row 0: outside the bank, never trained

    @property
    def scale_pinned(self) -> bool:
        """Whether abilities are standardised in the training population (docs/mastery.md); ``False`` for a model
        published before the scale was pinned, whose masteries are not comparable with another version's."""
        return self.scale == POPULATION

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """The kind's build configuration, written to the manifest (each kind names itself and its own options)."""

    # --- inputs --------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return len(self.concepts) + self.text_dim + 1

    def item_row(self, item_id: str, concepts: Sequence[str], text: str | None = None) -> np.ndarray:
        """One item's input row (Q-row, hashed text, 1-based bank index or 0); raises ``KeyError`` for a
        concept the model does not know."""
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
        return F.softplus(raw[..., 0]) + _MIN_DISCRIMINATION, raw[..., 1]

    def rescale_start_discrimination(self, factor: float) -> None:
        """Multiply the discrimination every item starts with by ``factor`` (its feature part's bias: before
        training, the feature weights and per-item parts are 0); a kind whose ability unit differs from another's
        starts from the same predictions."""
        with torch.no_grad():
            alpha = float(F.softplus(self.feature_b[0])) + _MIN_DISCRIMINATION
            self.feature_b[0] = inv_softplus(alpha * factor - _MIN_DISCRIMINATION)

    def penalty(self) -> torch.Tensor:
        """Negative log prior of the per-item parameters (data-independent; the trainer scales it
        by 1 / training students so it weighs as one prior over the whole sample)."""
        return 0.5 * self.item_delta[1:].pow(2).sum() / self.item_prior_sd**2

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
        target = self._warm_targets(table, correct, count, prior_weight)
        if target is None:
            return
        logit, seen = target
        rows = torch.as_tensor(table)
        index = rows[:, -1].round().long()
        with torch.no_grad():
            base = F.linear(rows[:, :-1], self.feature_w, self.feature_b)[:, 1]  # the intercept's feature part
            self.item_delta[index[seen], 1] = (logit - base)[seen]

    def _warm_targets(self, table: np.ndarray, correct: np.ndarray, count: np.ndarray, prior_weight: float
                      ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(smoothed logit of each table row's pooled proportion correct, whether the row was answered)."""
        correct, count = np.asarray(correct, dtype=np.float64), np.asarray(count, dtype=np.float64)
        total = count[1:].sum()
        if total <= 0:
            return None
        mean = float(np.clip(correct[1:].sum() / total, 0.01, 0.99))
        pooled = np.divide(correct + prior_weight * mean, count + prior_weight, out=np.full_like(count, mean),
                           where=count + prior_weight > 0)
        p = np.clip(pooled, 0.01, 0.99)
        index = torch.as_tensor(table)[:, -1].round().long()
        logit = torch.as_tensor(np.log(p / (1 - p)), dtype=torch.float32)[index]
        return logit, torch.as_tensor(count > 0)[index] & (index > 0)

    # --- bookkeeping -----------------------------------------------------------------
    def mark_seen(self, item_ids: Sequence[str] | set[str]) -> None:
        self.seen_item_ids.update(item_ids)

    def get_extra_state(self) -> dict[str, Any]:
        return {"seen_item_ids": sorted(self.seen_item_ids), "config": self.config()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if {**self.CONFIG_ADDED, **state.get("config", self.config())} != self.config():
            raise ValueError("state was saved from a model with another config")
        self.seen_item_ids = set(state.get("seen_item_ids", []))

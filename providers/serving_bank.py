"""The serving model read out for adaptive item selection (issue 34): its item parameters over a whole item bank and
its prior over abilities, as plain arrays, so :mod:`diagnosis.next_items` can choose the next items without torch.

The item parameters are :func:`providers.item_response.item_response_function`'s (the ones item forecasts use). Two
kinds are read:

* ``higher-order-irt``: one ability per concept, ``θ ~ N(μ, λλᵀ + diag ψ)``; an item requiring ``Q_i`` weighs each
  of its concepts ``1/|Q_i|`` in ``η_i = α_i Σ_k w_ik θ_k + c_i``;
* ``irt-2pl``: one ability for every concept, ``θ ~ N(0, 1)``, ``η_i = α_i θ + c_i``.

The student's posterior mode is computed from these arrays by :mod:`diagnosis.next_items` (the fold-in's objective,
in numpy: a selection against ASSIST0910's 16,804 items must stay within milliseconds, and torch's per-operation cost
made the fold-in alone ~20 ms).

Any other kind (local-fed v1 has no per-item parameters) is replaced by the untrained evidence model, and the bank
says so (``basis``). An item requiring a concept the model does not know cannot be read (``usable`` False): it is
neither evidence nor a candidate, as in ``local-fed``'s own diagnosis (``item_skipped``).

Nothing here reads or keeps a student's responses beyond the call that passes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from providers.item_response import ItemBasis, ItemToForecast, item_response_function

if TYPE_CHECKING:  # torch is imported only when a bank is read
    from federated.registry import LoadedModel

__all__ = ["ServingBank", "serving_bank"]


@dataclass(frozen=True, eq=False)
class ServingBank:
    """One model's view of one Q-matrix's items (module docstring). ``D`` ability dimensions, ``T`` items, each
    reading at most ``R`` dimensions.

    ``index``/``weight`` (T × R): the dimensions each item reads and their weights ``w_ik`` (0: padding), so that
    ``η_i = alpha_i · Σ_r weight[i, r] · θ[index[i, r]] + intercept_i``; the fold-in counts ``weight[i, r]`` of item
    ``i``'s log-likelihood on dimension ``index[i, r]`` (``federated.foldin``). ``dim_of`` (K,): the dimension each
    concept's mastery is read from (``mastery_k = σ(θ[dim_of[k]])``)."""

    model: str
    kind: str
    trained: bool
    concepts: tuple[str, ...]
    dim_of: np.ndarray
    prior_mean: np.ndarray  # (D,)
    prior_cov: np.ndarray  # (D, D)
    item_ids: tuple[str, ...]
    item_concepts: tuple[tuple[str, ...], ...]
    alpha: np.ndarray  # (T,)
    intercept: np.ndarray  # (T,)
    index: np.ndarray  # (T, R) int
    weight: np.ndarray  # (T, R)
    basis: tuple[ItemBasis, ...]
    usable: np.ndarray  # (T,) bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "position", {item_id: n for n, item_id in enumerate(self.item_ids)})
        object.__setattr__(self, "prior_precision", np.linalg.inv(self.prior_cov))
        # w_i w_iᵀ as flat (D·D) indices and weights per item, for quadratic forms w_iᵀ M w_i over the whole bank
        d = self.prior_cov.shape[0]
        object.__setattr__(self, "pair_index", self.index[:, :, None] * d + self.index[:, None, :])
        object.__setattr__(self, "pair_weight", self.weight[:, :, None] * self.weight[:, None, :])

    def positions(self, item_ids: Sequence[str]) -> np.ndarray:
        where: dict[str, int] = self.position  # type: ignore[attr-defined]
        return np.asarray([where[i] for i in item_ids], dtype=np.int64)


def _prior(loaded: LoadedModel) -> tuple[np.ndarray, np.ndarray]:
    """(mean, covariance) of the model's prior over θ: the higher-order one, or 2PL's N(0, 1)."""
    import torch

    prior = getattr(loaded.model, "prior", None)
    if prior is None:
        return np.zeros(1), np.ones((1, 1))
    with torch.no_grad():
        mean, loading, unique = (t.double().numpy() for t in prior())
    return mean, np.outer(loading, loading) + np.diag(unique)


def serving_bank(loaded: LoadedModel, items: Sequence[ItemToForecast], *, untrained: LoadedModel) -> ServingBank:
    """The bank of ``items`` as ``loaded`` (the model serving the Q-matrix) reads it; ``untrained``: the untrained
    evidence model over the Q-matrix's concepts, which replaces a model whose kind cannot be read (blocking)."""
    model = loaded.model
    if not (hasattr(model, "item_parameters") and hasattr(model, "posterior")):
        loaded, model = untrained, untrained.model
    irf = item_response_function(loaded, items, untrained=untrained)
    one_factor = getattr(model, "prior", None) is None
    known = {c: k for k, c in enumerate(model.concepts)}
    usable = np.asarray([bool(q) and set(q) <= known.keys() for q in irf.concepts])
    width = 1 if one_factor else max([len(q) for q, ok in zip(irf.concepts, usable, strict=True) if ok] or [1])
    index = np.zeros((len(items), width), dtype=np.int64)
    weight = np.zeros((len(items), width))
    for n, q in enumerate(irf.concepts):
        if usable[n]:
            dims = [0] if one_factor else [known[c] for c in q]
            index[n, : len(dims)] = dims
            weight[n, : len(dims)] = 1.0 / len(dims)
    mean, cov = _prior(loaded)
    concepts = tuple(model.concepts)
    return ServingBank(
        model=irf.model, kind=str(model.config().get("kind", "evidence-encoder")),
        trained=loaded.version != "untrained",
        concepts=concepts, dim_of=np.zeros(len(concepts), np.int64) if one_factor else np.arange(len(concepts)),
        prior_mean=mean, prior_cov=cov, item_ids=irf.item_ids, item_concepts=irf.concepts,
        alpha=np.asarray(irf.alpha, np.float64), intercept=np.asarray(irf.intercept, np.float64), index=index,
        weight=weight, basis=irf.basis, usable=usable,
    )

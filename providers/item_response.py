"""The serving model's item-response function, read out for item forecasts (issue 31, part 1).

A diagnosis says how well a student masters each concept; a platform choosing the next item wants the chance the
student answers *that item* correctly. The federated-trained model (``local-fed``) already holds what turns one into
the other: per item a discrimination ``α_i > 0`` and an intercept ``c_i``, with

    P(correct on i) = σ(α_i · mean_{k ∈ Q_i} θ_k + c_i),   mastery_k = σ(θ_k)

(``federated.hocdm``). :class:`ItemResponseFunction` carries those numbers as plain arrays — nothing of any student —
for the items asked about, with where each came from:

* ``trained``: parameters learned for this item id in training (its Q-row unchanged);
* ``q-row``: a trained model's parameters for an item it never saw, predicted from its Q-row (and text);
* ``untrained``: the untrained evidence model (α = 1, c = 0), when no trained model serves the Q-matrix or the item
  requires a concept the trained model does not know.

It also carries the model's prior over concept abilities, for concepts the diagnosis did not assess.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # torch is imported only when a forecast is made: the gateway starts without it
    from federated.registry import LoadedModel
    from qmatrix import QMatrix

__all__ = ["ItemBasis", "ItemResponder", "ItemResponseFunction", "ItemToForecast", "item_response_function",
           "items_to_forecast", "trained_row"]

ItemBasis = Literal["trained", "q-row", "untrained"]
_UNTRAINED = "untrained"


@dataclass(frozen=True)
class ItemToForecast:
    """An item of the request's Q-matrix: its id, its Q-row and its text (what the model's item features read)."""

    item_id: str
    concepts: tuple[str, ...]
    text: str | None = None


def items_to_forecast(q: QMatrix, only: Container[str] | None = None) -> list[ItemToForecast]:
    """``q``'s items in row order as the model reads them (those whose id is in ``only``, when given)."""
    return [ItemToForecast(i.id, tuple(i.concepts), i.text) for i in q.items if only is None or i.id in only]


@dataclass(frozen=True)
class ItemResponseFunction:
    """``P = σ(alpha · mean θ over the item's concepts + intercept)`` for each item, from the model named ``model``.

    ``prior_mean``/``prior_sd``: the model's prior N(mean, sd²) over each concept's ability θ (its marginal, one
    concept at a time), for the concepts it knows."""

    model: str
    item_ids: tuple[str, ...]
    concepts: tuple[tuple[str, ...], ...]
    alpha: np.ndarray  # (T,)
    intercept: np.ndarray  # (T,)
    basis: tuple[ItemBasis, ...]
    prior_mean: dict[str, float]
    prior_sd: dict[str, float]


@runtime_checkable
class ItemResponder(Protocol):
    """An entity that can say which model answers a tenant's Q-matrix and read out its item parameters
    (``local-fed``)."""

    def item_response(
        self, qmatrix_id: str | None, tenant: str | None, items: Sequence[ItemToForecast], concepts: Sequence[str]
    ) -> ItemResponseFunction: ...


def trained_row(loaded: LoadedModel, item_id: str) -> set[str] | None:
    """The Q-row the model was trained with for ``item_id`` (None: not in its training data). One lookup: the
    manifest's item table is never copied per request (a bank holds thousands of items)."""
    row = (loaded.manifest.get("items") or {}).get(item_id)
    return None if row is None else set(row)


def _prior(loaded: LoadedModel) -> tuple[dict[str, float], dict[str, float]]:
    import torch

    model = loaded.model
    prior = getattr(model, "prior", None)
    concepts = list(model.concepts)
    if prior is None:  # a kind without a concept prior: the standard normal every kind starts from
        return dict.fromkeys(concepts, 0.0), dict.fromkeys(concepts, 1.0)
    with torch.no_grad():
        mean, loading, unique = prior()
        sd = (loading.pow(2) + unique).sqrt()
    return ({c: float(m) for c, m in zip(concepts, mean.tolist(), strict=True)},
            {c: float(s) for c, s in zip(concepts, sd.tolist(), strict=True)})


def item_response_function(
    loaded: LoadedModel, items: Sequence[ItemToForecast], *, untrained: LoadedModel
) -> ItemResponseFunction:
    """The item-response parameters of ``items`` under ``loaded`` (the model serving the Q-matrix). Items it cannot
    read — a concept it was not trained on, or a kind without per-item parameters — take ``untrained``'s (the
    untrained evidence model over the Q-matrix's concepts), labelled ``untrained``."""
    import torch

    model = loaded.model
    known = set(model.concepts)
    readable = hasattr(model, "item_parameters")
    trained = loaded.version != _UNTRAINED
    rows: list[tuple[LoadedModel, ItemToForecast, ItemBasis]] = []
    for item in items:
        if not readable or not item.concepts or not set(item.concepts) <= known:
            rows.append((untrained, item, "untrained"))
        elif not trained:
            rows.append((loaded, item, "untrained"))
        elif item.item_id in model.seen_item_ids and trained_row(loaded, item.item_id) in (None, set(item.concepts)):
            rows.append((loaded, item, "trained"))
        else:
            rows.append((loaded, item, "q-row"))
    alpha, intercept = np.ones(len(rows)), np.zeros(len(rows))
    for source in {id(r[0]): r[0] for r in rows}.values():
        at = [n for n, r in enumerate(rows) if r[0] is source]
        # an item whose Q-row differs from the trained item of that id is read from its Q-row alone (as local-fed does)
        feats = np.stack([source.model.item_row(rows[n][1].item_id if rows[n][2] == "trained" else "",
                                                rows[n][1].concepts, rows[n][1].text) for n in at])
        with torch.no_grad():
            a, c = source.model.item_parameters(torch.from_numpy(feats).float())
        alpha[at], intercept[at] = a.numpy().reshape(-1), c.numpy().reshape(-1)
    mean, sd = _prior(loaded)
    fallback_mean, fallback_sd = _prior(untrained)
    return ItemResponseFunction(
        model=f"fedcd-cdm/{loaded.version}", item_ids=tuple(r[1].item_id for r in rows),
        concepts=tuple(r[1].concepts for r in rows), alpha=alpha, intercept=intercept,
        basis=tuple(r[2] for r in rows), prior_mean={**fallback_mean, **mean}, prior_sd={**fallback_sd, **sd},
    )

"""The ``local-fed`` entity: the federated-trained diagnosis models, answering directly (no prompt).

The registry (:class:`federated.ModelRegistry`) keeps one signed model per Q-matrix and owner. A
request is answered by the *active, signature-verified* model of **its** Q-matrix
(``PromptContext.qmatrix_id``): the requesting tenant's own model (trained from its upload,
``POST /v1/qmatrices/{id}/train``; the tenant is ``PromptContext.cache_scope``) if it has one, else an
operator's model of that Q-matrix id (``fedcd train``, ``fedcd federation``, the default model):

* **Hot reload.** Before every request the entity compares the Q-matrix's active pointer
  with the one it loaded (two ``stat`` calls); when a new version was published or rolled
  back to, it is verified and loaded in a worker thread. No restart is needed.
* **No model for the Q-matrix** (or a request naming none): the *untrained evidence model* answers — a
  ``higher-order-irt`` model at its starting parameters (every item discrimination 1, intercept 0, a
  one-factor prior over the request's concepts), i.e. a plain Bayesian fold-in of the responses. It needs
  no data, serves every Q-matrix from the first request, and is named ``fedcd-cdm/untrained`` so the
  diagnosis's ``basis`` says what it rests on (issue 21: a new Q-matrix used to get 1.0 everywhere from
  the embedded LLMs alone). A model that fails verification is an error (``EntityRejected``), never
  replaced silently.

A request is mapped onto the model's inputs:

* **Concepts.** The model has parameters only for the concepts it was trained on. A
  requested concept it does not know is listed in ``missing`` (status ``partial``) with a
  ``Repair(rule="unknown_concept")``; it is never given a made-up value. An item that
  requires such a concept is left out of the evidence (``item_skipped``): its score
  cannot be split between known and unknown concepts. A known concept left with no
  usable item is missing too (``no_evidence``).
* **Items.** A v2 model (``higher-order-irt``) uses the parameters it learned for an item id of
  its training bank, and its Q-row (+ hashed text) for any other item; a v1 model sees only the
  Q-row. An item not trained on is flagged with ``Repair(rule="unseen_item")``: its id was not
  trained on, or the training item with that id had another Q-row.

**Uncertainty.** A v2 answer carries the model's own uncertainty per concept (``EntityPrediction.uncertainty``):
the spread of logit mastery from the full curvature of the model that predicts, as a curve over mastery levels,
computed without the scores (:meth:`federated.hocdm.HigherOrderCDM.logit_sd_curve`), so it travels next to the
privatized mastery without spending privacy; ``measured`` is False for the untrained evidence model. The curve costs
one predictive variance per point (``SPREAD_SHIFTS``: 11 Cholesky solves per student, beside the fold-in), so it is computed and sent only when the request's aggregation reads it
(``PromptContext.own_uncertainty``: a posterior, or a selective federation's gauge); a mean or a stack gets the same
mastery without it.

Inference runs in a worker thread (``asyncio.to_thread``), never on the event loop.
Concurrent ``respond`` calls arriving within ``batch_window_s`` (5 ms) are answered by one
batched forward pass (:class:`providers.foldin_batcher.FoldInBatcher`); ``forward_passes`` counts the passes.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from federated.active import NO_POINTER
from federated.hocdm import HigherOrderCDM
from federated.itembank import ItemBank, inv_softplus
from federated.registry import TENANT_PREFIX, LoadedModel, ModelNotFound, ModelRegistry, RegistryError, model_key
from providers.errors import EntityRejected, EntitySkipped
from providers.foldin_batcher import SPREAD_SHIFTS, FoldInBatcher, FoldInRequest, uncertainty_curve
from providers.item_response import ItemResponseFunction, ItemToForecast, item_response_function, trained_row
from providers.types import EntityPrediction, MasteryUncertainty, PromptContext, Repair
from providers.wrappers import timed

__all__ = ["SPREAD_SHIFTS", "UNTRAINED_VERSION", "LocalFedEntity", "uncertainty_curve", "untrained_model"]

UNTRAINED_VERSION = "untrained"
_UNTRAINED_CACHE_MAX = 256
_UNTRAINED_LOADING = 1e-3  # λ of the untrained prior: (almost) no link between concepts
_UNTRAINED_VARIANCE = math.pi**2 / 3  # ψ of the untrained prior: the variance of logit(U), U uniform


def untrained_model(concepts: tuple[str, ...]) -> LoadedModel:
    """The untrained evidence model over ``concepts`` (module docstring); deterministic, needs no data.

    Nothing about the concepts is known, so its prior claims nothing (issue 33): no general ability links the
    concepts (a loading near 0: an answer on one concept says nothing about another, and a right answer is never
    outweighed by wrong ones elsewhere), and each ability's variance is the logistic's, π²/3, the logit of a uniform
    mastery: its intervals are then about as wide as the uniform prior's Beta-Bernoulli ones.
    """
    model = HigherOrderCDM(concepts)
    with torch.no_grad():
        model.loading.fill_(inv_softplus(_UNTRAINED_LOADING))
        floor = float(model.prior()[2][0] - F.softplus(model.unique_var)[0])  # ψ = softplus(·) + a floor
        model.unique_var.fill_(inv_softplus(_UNTRAINED_VARIANCE - floor))
    return LoadedModel(version=UNTRAINED_VERSION, model=model,
                       manifest={"untrained": True, "items": {}}, signature_verified=False)


def _encode(context: PromptContext, loaded: LoadedModel) -> FoldInRequest:
    model = loaded.model
    column = {c: k for k, c in enumerate(model.concepts)}
    repairs: list[Repair] = []
    unknown = [c for c in context.concepts if c not in column]
    repairs += [Repair(rule="unknown_concept", concept=c, detail="the local model was not trained on this concept")
                for c in unknown]
    rows, scores = [], []
    counts: Counter[str] = Counter()  # concept -> the answers used on it (its keys: the concepts covered)
    for item in context.items:
        outside = [c for c in item.concepts if c not in column]
        if outside or not item.concepts:
            repairs.append(Repair(rule="item_skipped", detail=f"item '{item.item_id}' requires concepts the local "
                                  f"model does not know: {', '.join(outside) or '(none listed)'}"))
            continue
        if loaded.version == UNTRAINED_VERSION:
            pass  # nothing was trained: every item is read from its Q-row alike, no repair to report
        elif item.item_id not in model.seen_item_ids:
            repairs.append(Repair(rule="unseen_item", detail=f"item '{item.item_id}' was not in the training data; "
                                  "its parameters come from its Q-row" + (" and text" if model.text_dim else "")))
        elif trained_row(loaded, item.item_id) not in (None, set(item.concepts)):
            repairs.append(Repair(rule="unseen_item", detail=f"item '{item.item_id}' has another Q-row than the "
                                  "training item with that id; predicted from its Q-row"))
            rows.append(model.item_row("", item.concepts, item.text))  # not the parameters learned for that id
            scores.append(item.score)
            counts.update(item.concepts)
            continue
        rows.append(model.item_row(item.item_id, item.concepts, item.text))
        scores.append(item.score)
        counts.update(item.concepts)
    no_evidence = [c for c in context.concepts if c in column and c not in counts]
    repairs += [Repair(rule="no_evidence", concept=c, detail="no usable item assesses this concept")
                for c in no_evidence]
    width = model.item_row("", ()).shape[0]
    return FoldInRequest(loaded=loaded, features=np.stack(rows) if rows else np.zeros((0, width), np.float32),
                    scores=np.asarray(scores, dtype=np.float32),
                    answer=[c for c in context.concepts if c in counts],
                    missing=[c for c in context.concepts if c not in counts], repairs=repairs,
                    counts=dict(counts), own_uncertainty=context.own_uncertainty)


class LocalFedEntity:
    """Entity serving the registry's active model for each request's Q-matrix; see the module docstring."""

    def __init__(
        self,
        registry_dir: str | Path | None = None,
        *,
        name: str = "local-fed",
        registry: ModelRegistry | None = None,
        public_key_path: str | Path | None = None,
        batch_window_s: float = 0.005,
        max_batch: int = 64,
    ) -> None:
        if registry is None:
            if registry_dir is None:
                raise ValueError("give registry_dir or registry")
            registry = ModelRegistry(registry_dir, public_key_path=public_key_path)
        self.name, self.registry = name, registry
        # Q-matrix id -> (pointer stamp when read, the verified model, or the error loading it raised)
        self._models: dict[str, tuple[object, LoadedModel | RegistryError]] = {}
        self._load_lock = threading.Lock()
        self._fold_in = FoldInBatcher(window_s=batch_window_s, max_batch=max_batch)
        self._untrained: dict[tuple[str, ...], LoadedModel] = {}  # by the request's concepts

    def _untrained_for(self, concepts: tuple[str, ...]) -> LoadedModel:
        loaded = self._untrained.get(concepts)
        if loaded is None:
            if len(self._untrained) >= _UNTRAINED_CACHE_MAX:
                self._untrained.clear()
            loaded = self._untrained[concepts] = untrained_model(concepts)
        return loaded

    @property
    def forward_passes(self) -> int:
        """The batched forward passes run so far (one per model per batch: module docstring)."""
        return self._fold_in.forward_passes

    @property
    def loaded(self) -> bool:
        """Whether at least one verified model is loaded."""
        return any(isinstance(m, LoadedModel) for _, m in self._models.values())

    def _fresh(self, qmatrix_id: str) -> tuple[object, LoadedModel | RegistryError] | None:
        stamp = self.registry.pointer_stamp(qmatrix_id)
        cached = self._models.get(qmatrix_id)
        return cached if cached is not None and cached[0] == stamp else None

    def model_for(self, qmatrix_id: str) -> LoadedModel:
        """The verified active model of ``qmatrix_id``, reloaded if its pointer changed (blocking).

        Raises ``ModelNotFound`` when the Q-matrix has no active model, another ``RegistryError``
        when its model fails verification.
        """
        with self._load_lock:
            cached = self._fresh(qmatrix_id)
            if cached is None:
                stamp = self.registry.pointer_stamp(qmatrix_id)  # read before loading: a later change reloads
                try:
                    found: LoadedModel | RegistryError = self.registry.load(qmatrix_id=qmatrix_id)
                except ModelNotFound:
                    # Never cached: any id can be asked for, so caching "none" would grow without bound (one entry
                    # per probe). The ids that are cached each have a pointer file: as many as the registry holds.
                    self._models.pop(qmatrix_id, None)
                    raise
                except RegistryError as exc:
                    found = exc
                cached = self._models[qmatrix_id] = (stamp, found)
        if isinstance(cached[1], RegistryError):
            raise cached[1]
        return cached[1]

    def load(self) -> list[LoadedModel]:
        """Load every Q-matrix's active model now (start-up); raises if one fails verification."""
        return [self.model_for(qmatrix_id) for qmatrix_id in self.registry.active_versions()]

    def reload(self) -> None:
        """Forget every loaded model: the next request reads the registry again."""
        with self._load_lock:
            self._models.clear()

    def _keys(self, qmatrix_id: str | None, tenant: str | None) -> list[str]:
        """The registry keys that may serve ``tenant``'s requests on ``qmatrix_id``, first match wins: its own model,
        then the operator's. Inline rows (no id) have none; a registry key is never a Q-matrix id."""
        if qmatrix_id is None or qmatrix_id.startswith(TENANT_PREFIX):
            return []
        return [*([model_key(qmatrix_id, tenant)] if tenant else []), qmatrix_id]

    def serving_model(self, qmatrix_id: str | None, tenant: str | None, concepts: Sequence[str]) -> LoadedModel:
        """The model answering ``tenant``'s requests on ``qmatrix_id`` — as :meth:`respond` picks it — or the
        untrained evidence model over ``concepts`` when there is none (blocking). Raises ``RegistryError`` when the
        active model fails verification."""
        for key in self._keys(qmatrix_id, tenant):
            if self.registry.pointer_stamp(key) == NO_POINTER:
                continue
            try:
                return self.model_for(key)
            except ModelNotFound:
                continue
        return self._untrained_for(tuple(concepts))

    def item_response(
        self, qmatrix_id: str | None, tenant: str | None, items: Sequence[ItemToForecast], concepts: Sequence[str]
    ) -> ItemResponseFunction:
        """The serving model's item-response function for ``items`` (item forecasts; blocking)."""
        loaded = self.serving_model(qmatrix_id, tenant, concepts)
        return item_response_function(loaded, items, untrained=self._untrained_for(tuple(concepts)))

    def visible_models(self, tenant: str) -> dict[str, str]:
        """The Q-matrix ids ``tenant`` may read a model of -> the registry key of the model serving it: the tenant's
        own models and the operator's shared ones (its own wins, as in :meth:`respond`). Another tenant's model is
        never listed, not even by its key (blocking)."""
        own_prefix = model_key("", tenant)
        visible: dict[str, str] = {}
        for key in self.registry.active_versions():
            if key.startswith(TENANT_PREFIX):
                if key.startswith(own_prefix):
                    visible[key[len(own_prefix):]] = key
            else:
                visible.setdefault(key, key)
        return visible

    def info_for(self, tenant: str, qmatrix_id: str | None = None) -> dict[str, Any]:
        """What ``tenant`` sees of the model serving its requests on ``qmatrix_id`` (default: the only one visible to
        it), with ``owner`` ``tenant`` or ``operator``. ``ModelNotFound`` for an id with no model visible to the tenant
        (another tenant's model included: it is not told apart from none), ``RegistryError`` when several are visible
        and none is named (the message lists only the tenant's ids) or the model fails verification (blocking)."""
        visible = self.visible_models(tenant)
        if qmatrix_id is None:
            if len(visible) > 1:
                raise RegistryError(f"models are active for several Q-matrices ({', '.join(sorted(visible))}); "
                                    "name one with qmatrix_id")
            if not visible:
                raise ModelNotFound("no local-fed model has been published for this tenant's Q-matrices")
            qmatrix_id = next(iter(visible))
        key = visible.get(qmatrix_id)
        if key is None:
            raise ModelNotFound(f"no local-fed model has been published for Q-matrix '{qmatrix_id}'")
        return {**self.info(key), "qmatrix_id": qmatrix_id,
                "owner": "operator" if key == qmatrix_id else "tenant"}

    def info(self, qmatrix_id: str | None = None) -> dict[str, Any]:
        """The operator's view of one registry key (default: the only key with an active model): the loaded version
        and its signed manifest's facts (blocking). Tenants see models through :meth:`info_for`."""
        if qmatrix_id is None:
            active = sorted(self.registry.active_versions())
            if len(active) > 1:
                raise RegistryError(f"models are active for several Q-matrices ({', '.join(active)}); name one")
            if not active:
                raise ModelNotFound(f"no local-fed model has been published in {self.registry.root}")
            qmatrix_id = active[0]
        loaded = self.model_for(qmatrix_id)
        m = loaded.manifest
        return {
            "version": loaded.version,
            "signature_verified": loaded.signature_verified,
            "qmatrix_id": m.get("qmatrix_id"),
            "rounds": m.get("rounds"),
            "epsilon": m.get("epsilon"),
            "delta": m.get("delta"),
            "dp_mode": m.get("dp_mode"),
            "nodes": (m.get("federation") or {}).get("nodes"),
            "federation": m.get("federation"),
            "gate": m.get("gate"),
            "heldout_metrics": m.get("heldout_metrics"),
            "trained_at": m.get("trained_at"),
            "config": m.get("config"),
            "concepts": m.get("concepts"),
            "data": m.get("data"),
            "forced": m.get("forced"),
            "key_id": m.get("key_id"),
            # whether its masteries are on the pinned scale (docs/mastery.md): comparable with another version's
            "scale_pinned": isinstance(loaded.model, ItemBank) and loaded.model.scale_pinned,
        }

    async def respond(self, context: PromptContext) -> EntityPrediction:
        elapsed = timed()
        if context.task != "diagnose":
            raise EntityRejected(f"the local federated model only diagnoses; it cannot '{context.task}'",
                                 entity=self.name)
        if not context.concepts:
            raise EntitySkipped("the request assesses no concept", entity=self.name)
        loaded: LoadedModel | None = None
        for key in self._keys(context.qmatrix_id, context.cache_scope):
            stamp = self.registry.pointer_stamp(key)
            if stamp == NO_POINTER:
                continue  # "no model of this Q-matrix" needs no thread
            cached = self._models.get(key)
            try:  # the common case needs no thread either: the pointer did not change since the model was loaded
                loaded = cached[1] if cached is not None and cached[0] == stamp and isinstance(cached[1], LoadedModel) \
                    else await asyncio.to_thread(self.model_for, key)
                break
            except ModelNotFound:
                continue
            except RegistryError as exc:
                raise EntityRejected(f"no usable local model: {exc}", entity=self.name) from exc
        if loaded is None:
            loaded = self._untrained_for(tuple(context.concepts))
        request = _encode(context, loaded)
        mastery: dict[str, float] = {}
        uncertainty: dict[str, MasteryUncertainty] = {}
        if request.answer:
            values, spread = await self._fold_in.submit(request)
            column = {c: k for k, c in enumerate(loaded.model.concepts)}
            mastery = {c: float(np.clip(values[column[c]], 0.0, 1.0)) for c in request.answer}
            if spread is not None:
                measured = loaded.version != UNTRAINED_VERSION
                uncertainty = {c: spread.for_concept(column[c], request.counts[c], measured) for c in request.answer}
        return EntityPrediction(
            entity=self.name,
            model=f"fedcd-cdm/{loaded.version}",
            status="partial" if request.missing else "ok",
            mastery=mastery,
            missing=request.missing,
            latency_ms=elapsed(),
            repairs=request.repairs,
            uncertainty=uncertainty,
        )

    async def aclose(self) -> None:
        self.reload()

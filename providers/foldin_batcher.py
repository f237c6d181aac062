"""Batched fold-ins for the ``local-fed`` entity: concurrent requests answered by one forward pass per model.

A request arrives here already mapped onto a model's inputs (:class:`FoldInRequest`: one feature row and one score
per usable answer; :mod:`providers.local_fed` does the mapping). Requests submitted within ``window_s`` (5 ms by
default, at most ``max_batch`` of them) are collected by a :class:`~providers.batching.MicroBatcher` and folded in
together in a worker thread:

* **One pass per model.** The batch is grouped by the model each request was answered with (a hot reload mid-batch
  leaves two: one pass each); each group's answers are padded to its longest and masked, so a request's mastery is
  the one it would get alone. ``forward_passes`` counts the passes.
* **The uncertainty curve where it is read.** A v2 model (``higher-order-irt``) also gives its own uncertainty: the
  spread of logit mastery at :data:`SPREAD_SHIFTS` around the mean, computed without the scores
  (:meth:`federated.hocdm.HigherOrderCDM.logit_sd_curve`), for the requests that ask for it
  (``FoldInRequest.own_uncertainty``) alone — one predictive variance per point, so a request whose aggregation
  never reads it costs none.
* **One at a time.** Batches flushed close together run in worker threads of their own; their passes take turns
  (a lock), so ``forward_passes`` is exact.

A failure fails every request of its batch (:class:`~providers.batching.MicroBatcher`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from federated.hocdm import HigherOrderCDM
from federated.registry import LoadedModel
from providers.batching import MicroBatcher
from providers.types import MasteryUncertainty, Repair

__all__ = ["SPREAD_SHIFTS", "FoldIn", "FoldInBatcher", "FoldInRequest", "Spread", "uncertainty_curve"]

# θ − μ at which an answer's uncertainty curve is evaluated (MasteryUncertainty: score-free); the aggregator
# interpolates between them in logit space, so they reach as far as a mastery of about 0.02 or 0.98 from the mean.
SPREAD_SHIFTS = (-4.0, -3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0)


@dataclass
class FoldInRequest:
    """One request on a model's inputs: its usable answers as feature rows and scores, and what to report."""

    loaded: LoadedModel
    features: np.ndarray  # (L, F)
    scores: np.ndarray  # (L,)
    answer: list[str]  # concepts to report
    missing: list[str]
    repairs: list[Repair] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # concept -> the answers used on it
    own_uncertainty: bool = True  # whether the answer carries the model's uncertainty curve (module docstring)


def uncertainty_curve(at: np.ndarray, logit_sd: np.ndarray, *, answers: int, measured: bool) -> MasteryUncertainty:
    """One concept's :class:`MasteryUncertainty` from a model's curve (points ``at``, sd ``logit_sd``)."""
    # float32 rounding can make two points equal near 0/1; keep strictly increasing ones (the first of a tie)
    points, sd = np.asarray(at, dtype=float), np.asarray(logit_sd, dtype=float)
    keep = np.concatenate([[True], np.diff(points) > 0]) & (points > 0) & (points < 1)
    return MasteryUncertainty(at=tuple(points[keep]), logit_sd=tuple(sd[keep]), answers=answers, measured=measured)


@dataclass(frozen=True)
class Spread:
    """One student's uncertainty curve from the model: mastery points and the sd of θ there, each (S, K)."""

    at: np.ndarray
    logit_sd: np.ndarray

    def for_concept(self, k: int, answers: int, measured: bool) -> MasteryUncertainty:
        return uncertainty_curve(self.at[:, k], self.logit_sd[:, k], answers=answers, measured=measured)


FoldIn = tuple[np.ndarray, Spread | None]  # mastery (K,) and the model's uncertainty curve, if it has one


class FoldInBatcher:
    """Fold requests in by batches (module docstring); ``await submit(request)`` gives its :data:`FoldIn`."""

    def __init__(self, *, window_s: float = 0.005, max_batch: int = 64) -> None:
        self._lock = threading.Lock()
        self._batcher: MicroBatcher[FoldInRequest, FoldIn] = MicroBatcher(
            self._forward, window_s=window_s, max_batch=max_batch)
        self.forward_passes = 0

    async def submit(self, request: FoldInRequest) -> FoldIn:
        return await self._batcher.submit(request)

    def _forward(self, batch: list[FoldInRequest]) -> list[FoldIn]:
        out: list[FoldIn | None] = [None] * len(batch)
        groups: dict[int, list[int]] = {}
        for i, request in enumerate(batch):  # a reload mid-batch leaves two models: one pass each
            groups.setdefault(id(request.loaded), []).append(i)
        for indices in groups.values():
            model = batch[indices[0]].loaded.model
            width = max(len(batch[i].scores) for i in indices)
            feats = torch.zeros((len(indices), width, batch[indices[0]].features.shape[1]))
            scores = torch.zeros((len(indices), width))
            observed = torch.zeros((len(indices), width), dtype=torch.bool)
            for row, i in enumerate(indices):
                n = len(batch[i].scores)
                feats[row, :n], scores[row, :n], observed[row, :n] = (
                    torch.from_numpy(batch[i].features), torch.from_numpy(batch[i].scores), True)
            with self._lock, torch.no_grad():
                self.forward_passes += 1
                mastery = model.mastery(feats, scores, observed).numpy()
                # the model's own uncertainty where it has one (v2), for the requests that want it; computed without
                # the scores (see Spread)
                wanted = [row for row, i in enumerate(indices) if batch[i].own_uncertainty] \
                    if isinstance(model, HigherOrderCDM) else []
                curve = model.logit_sd_curve(feats[wanted], observed[wanted], SPREAD_SHIFTS) if wanted else None
            spreads: dict[int, Spread] = {} if curve is None else {
                row: Spread(curve[0][:, n].numpy(), curve[1][:, n].numpy()) for n, row in enumerate(wanted)}
            for row, i in enumerate(indices):
                out[i] = (mastery[row], spreads.get(row))
        return out  # type: ignore[return-value]

"""Held-out evaluation: masked-response loss and AUC on students the model never trained on.

AUC is computed here (Mann-Whitney with tied ranks averaged) rather than imported, to keep
scikit-learn out of the dependencies for one formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from federated.data import ResponseTensors
from federated.model import CDModel, masked_bce

__all__ = ["Evaluation", "evaluate_masked", "roc_auc"]


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=float)
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], len(values)]
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2.0  # mean of 1-based ranks start+1..end
    return ranks


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve for binary ``labels`` (>= 0.5 counts as positive); NaN if one class."""
    y = np.asarray(labels, dtype=float) >= 0.5
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = _average_ranks(np.asarray(scores, dtype=float))
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@dataclass(frozen=True)
class Evaluation:
    loss: float  # mean per-student BCE on hidden responses
    auc: float  # over all hidden responses pooled
    n_students: int
    n_responses: int


def evaluate_masked(
    model: CDModel, data: ResponseTensors, hidden: torch.Tensor, *, batch_size: int = 256
) -> Evaluation:
    """Encode each student's non-hidden responses, predict the ``hidden`` ones (B, L mask)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    losses, probas, labels = [], [], []
    try:
        with torch.no_grad():
            for start in range(0, len(data), batch_size):
                idx = torch.arange(start, min(start + batch_size, len(data)))
                feats, scores, observed = data.batch(idx)
                target = hidden[idx, : observed.shape[1]]
                proba = model(feats.to(device), scores.to(device), (observed & ~target).to(device)).cpu()
                has_target = target.any(1)
                losses.append(masked_bce(proba, scores, target)[has_target])
                probas.append(proba[target])
                labels.append(scores[target])
    finally:
        model.train(was_training)
    loss = torch.cat(losses) if losses else torch.zeros(0)
    p, y = (torch.cat(probas).numpy(), torch.cat(labels).numpy()) if probas else (np.zeros(0), np.zeros(0))
    return Evaluation(
        loss=float(loss.mean()) if len(loss) else float("nan"),
        auc=roc_auc(y, p),
        n_students=int(len(loss)),
        n_responses=int(len(y)),
    )

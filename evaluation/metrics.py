"""Evaluation metrics as pure functions of arrays.

Mastery metrics follow the seed paper's formulas (7)–(10), as we read them:

    (7)  MAE  = 1/(N·K) Σ_s Σ_k |ŷ_sk − y_sk|
    (8)  RMSE = √( 1/(N·K) Σ_s Σ_k (ŷ_sk − y_sk)² )
    (9)  Improvement(method vs baseline) = (MAE_baseline − MAE_method) / MAE_baseline × 100 %
    (10) Privacy Cost(private vs non-private) = (MAE_private − MAE_non-private) / MAE_non-private × 100 %

where the sums run over the (student, concept) pairs that have both a prediction and a
truth. Response-prediction metrics (held-out protocol): AUC (Mann–Whitney, ties counted
half), ACC at 0.5, RMSE of probabilities, ECE with 15 equal-width bins.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

__all__ = ["accuracy", "auc", "ece", "improvement", "mae", "privacy_cost", "reliability_bins", "rmse"]


def _pair(pred: np.ndarray | list[float], truth: np.ndarray | list[float]) -> tuple[np.ndarray, np.ndarray]:
    p, t = np.asarray(pred, dtype=float).ravel(), np.asarray(truth, dtype=float).ravel()
    if p.shape != t.shape:
        raise ValueError(f"prediction and truth differ in size: {p.shape} vs {t.shape}")
    keep = ~(np.isnan(p) | np.isnan(t))
    return p[keep], t[keep]


def mae(pred: np.ndarray | list[float], truth: np.ndarray | list[float]) -> float:
    p, t = _pair(pred, truth)
    return float(np.mean(np.abs(p - t))) if p.size else float("nan")


def rmse(pred: np.ndarray | list[float], truth: np.ndarray | list[float]) -> float:
    p, t = _pair(pred, truth)
    return float(np.sqrt(np.mean((p - t) ** 2))) if p.size else float("nan")


def improvement(*, method_mae: float, baseline_mae: float) -> float:
    """Formula (9), in percent: positive when the method's MAE is lower than the baseline's."""
    if baseline_mae == 0:
        return float("nan")
    return (baseline_mae - method_mae) / baseline_mae * 100.0


def privacy_cost(*, private_mae: float, nonprivate_mae: float) -> float:
    """Formula (10), in percent: how much MAE the privacy noise adds relative to the noiseless run."""
    if nonprivate_mae == 0:
        return float("nan")
    return (private_mae - nonprivate_mae) / nonprivate_mae * 100.0


def auc(scores: np.ndarray | list[float], labels: np.ndarray | list[float]) -> float:
    """Area under the ROC curve; NaN when only one class is present."""
    s, y = _pair(scores, labels)
    y = y >= 0.5
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(s)  # average ranks: a tie between a positive and a negative counts one half
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def accuracy(probs: np.ndarray | list[float], labels: np.ndarray | list[float], *, threshold: float = 0.5) -> float:
    p, y = _pair(probs, labels)
    return float(np.mean((p >= threshold) == (y >= 0.5))) if p.size else float("nan")


def reliability_bins(
    probs: np.ndarray | list[float], labels: np.ndarray | list[float], *, n_bins: int = 15
) -> list[tuple[float, float, int]]:
    """(mean predicted, observed frequency, count) per equal-width bin; empty bins are omitted."""
    p, y = _pair(probs, labels)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    index = np.clip(np.digitize(p, edges[1:-1], right=True), 0, n_bins - 1)
    out = []
    for b in range(n_bins):
        sel = index == b
        if sel.any():
            out.append((float(p[sel].mean()), float(y[sel].mean()), int(sel.sum())))
    return out


def ece(probs: np.ndarray | list[float], labels: np.ndarray | list[float], *, n_bins: int = 15) -> float:
    """Expected calibration error: Σ_b (n_b/N)·|mean prob_b − observed freq_b| over equal-width bins."""
    bins = reliability_bins(probs, labels, n_bins=n_bins)
    total = sum(n for _, _, n in bins)
    if total == 0:
        return float("nan")
    return float(sum(n * abs(conf - freq) for conf, freq, n in bins) / total)

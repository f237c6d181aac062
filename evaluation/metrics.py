"""Evaluation metrics as pure functions of arrays.

Mastery metrics follow the seed paper's formulas (7)–(10), as we read them:

    (7)  MAE  = 1/(N·K) Σ_s Σ_k |ŷ_sk − y_sk|
    (8)  RMSE = √( 1/(N·K) Σ_s Σ_k (ŷ_sk − y_sk)² )
    (9)  Improvement(method vs baseline) = (MAE_baseline − MAE_method) / MAE_baseline × 100 %
    (10) Privacy Cost(private vs non-private) = (MAE_private − MAE_non-private) / MAE_non-private × 100 %

where the sums run over the (student, concept) pairs that have both a prediction and a
truth. Response-prediction metrics (held-out protocol): AUC (Mann–Whitney, ties counted
half), ACC at 0.5, RMSE of probabilities (the square root of the Brier score), ECE with 15
equal-width bins.

**Labels in [0, 1]: one rule.** Wherever a value serves as a label — a held-out response's
score, or a true mastery scored by attribute accuracy — a value y counts as y of a positive and
1 − y of a negative (a Bernoulli weight, as in the link's likelihood and the baselines'
``evaluation.baselines.common``). So for partial credit (0 < y < 1): AUC is the weighted
Mann–Whitney statistic over (positive, negative) pairs of *different* observations; accuracy is
y·[p ≥ ½] + (1 − y)·[p < ½]; ``response_rmse`` is √mean(y(1 − p)² + (1 − y)p²); ECE compares
the mean prediction with the mean label per bin. For 0/1 labels these are the usual metrics.
``mae`` and ``rmse`` compare mastery estimates with a continuous truth as numbers (no labels).
"""

from __future__ import annotations

import numpy as np

from calibration.reliability import reliability_bins  # re-exported: the evaluation reports them

__all__ = ["accuracy", "auc", "ece", "improvement", "mae", "privacy_cost", "reliability_bins", "response_rmse", "rmse"]


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
    """Area under the ROC curve with labels in [0, 1] (module docstring); NaN when one class has no weight.

    Pairs of different observations only: an observation is never compared with itself.
    """
    s, y = _pair(scores, labels)
    if np.any((y < 0) | (y > 1)):
        raise ValueError("labels must lie in [0, 1]")
    pos, neg = y, 1.0 - y
    self_pairs = float(np.sum(pos * neg))
    total = float(pos.sum() * neg.sum()) - self_pairs
    if total <= 1e-12:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    s, pos, neg = s[order], pos[order], neg[order]
    uniq, start = np.unique(s, return_index=True)
    neg_group = np.add.reduceat(neg, start)
    pos_group = np.add.reduceat(pos, start)
    neg_below = np.concatenate([[0.0], np.cumsum(neg_group)[:-1]])
    # each positive beats the negatives scored below it, ties count one half (including itself: removed below)
    wins = float(np.sum(pos_group * (neg_below + 0.5 * neg_group)))
    return (wins - 0.5 * self_pairs) / total


def accuracy(probs: np.ndarray | list[float], labels: np.ndarray | list[float], *, threshold: float = 0.5) -> float:
    """Expected accuracy at ``threshold``: a label y is right with weight y when p ≥ threshold, else 1 − y."""
    p, y = _pair(probs, labels)
    return float(np.mean(np.where(p >= threshold, y, 1.0 - y))) if p.size else float("nan")


def response_rmse(probs: np.ndarray | list[float], labels: np.ndarray | list[float]) -> float:
    """√Brier: √mean(y(1 − p)² + (1 − y)p²), the RMSE of P(correct) against labels in [0, 1]."""
    p, y = _pair(probs, labels)
    return float(np.sqrt(np.mean(y * (1 - p) ** 2 + (1 - y) * p**2))) if p.size else float("nan")


def ece(probs: np.ndarray | list[float], labels: np.ndarray | list[float], *, n_bins: int = 15) -> float:
    """Expected calibration error: Σ_b (n_b/N)·|mean prob_b − observed freq_b| over equal-width bins."""
    bins = reliability_bins(probs, labels, n_bins=n_bins)
    total = sum(n for _, _, n in bins)
    if total == 0:
        return float("nan")
    return float(sum(n * abs(conf - freq) for conf, freq, n in bins) / total)

"""The reliability diagram's bins: how often what was predicted with probability p happened. The evaluation reports
them (``evaluation.metrics``) and the operator console draws them for a calibration's validation students, so they
live here, below both (the gateway imports no evaluation module)."""

from __future__ import annotations

import numpy as np

__all__ = ["reliability_bins"]


def reliability_bins(
    probs: np.ndarray | list[float], labels: np.ndarray | list[float], *, n_bins: int = 15
) -> list[tuple[float, float, int]]:
    """(mean predicted, observed frequency, count) per equal-width bin; empty bins and NaN pairs are omitted."""
    p, y = np.asarray(probs, dtype=float).ravel(), np.asarray(labels, dtype=float).ravel()
    if p.shape != y.shape:
        raise ValueError(f"prediction and truth differ in size: {p.shape} vs {y.shape}")
    keep = ~(np.isnan(p) | np.isnan(y))
    p, y = p[keep], y[keep]
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    index = np.clip(np.digitize(p, edges[1:-1], right=True), 0, n_bins - 1)
    out = []
    for b in range(n_bins):
        sel = index == b
        if sel.any():
            out.append((float(p[sel].mean()), float(y[sel].mean()), int(sel.sum())))
    return out

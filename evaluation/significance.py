"""Is one row's held-out AUC really above another's? A paired bootstrap over test students.

Both rows predict the same held-out responses. Each resample draws the test students with
replacement (seeded) and takes *all* held-out responses of each drawn student for both rows, so
the comparison keeps the pairing and the dependence between one student's responses. The 95 %
interval is the 2.5th–97.5th percentile of AUC(a) − AUC(b) over the resamples; it "excludes 0"
when both ends have the same sign.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evaluation.metrics import auc

__all__ = ["BOOTSTRAP_RESAMPLES", "PairedDifference", "paired_bootstrap_auc"]

BOOTSTRAP_RESAMPLES = 1000


@dataclass(frozen=True)
class PairedDifference:
    row: str
    epsilon: float | None
    baseline: str
    diff: float  # AUC(row) − AUC(baseline) on all test students
    low: float
    high: float
    resamples: int

    @property
    def excludes_zero(self) -> bool:
        return bool(self.low > 0 or self.high < 0)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def paired_bootstrap_auc(
    a: np.ndarray,
    b: np.ndarray,
    labels: np.ndarray,
    owner: np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """(AUC(a) − AUC(b), lower, upper) over responses owned by students ``owner`` (see module docstring)."""
    a, b, labels, owner = (np.asarray(x) for x in (a, b, labels, owner))
    if not (a.shape == b.shape == labels.shape == owner.shape):
        raise ValueError("a, b, labels and owner must have the same shape")
    students = np.unique(owner)
    rows: Sequence[np.ndarray] = [np.flatnonzero(owner == s) for s in students]
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    for r in range(resamples):
        pick = np.concatenate([rows[i] for i in rng.integers(0, len(rows), size=len(rows))])
        diffs[r] = auc(a[pick], labels[pick]) - auc(b[pick], labels[pick])
    diffs = diffs[~np.isnan(diffs)]
    tail = (1 - level) / 2 * 100
    low, high = (np.percentile(diffs, [tail, 100 - tail]) if diffs.size else (np.nan, np.nan))
    return float(auc(a, labels) - auc(b, labels)), float(low), float(high)

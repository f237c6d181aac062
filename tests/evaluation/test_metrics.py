"""Metric functions against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaluation.metrics import (
    accuracy,
    auc,
    ece,
    improvement,
    mae,
    privacy_cost,
    reliability_bins,
    response_rmse,
    rmse,
)


def test_mae_and_rmse_by_hand() -> None:
    pred, truth = [0.2, 0.5, 0.9], [0.0, 0.5, 0.6]
    assert mae(pred, truth) == pytest.approx((0.2 + 0.0 + 0.3) / 3)
    assert rmse(pred, truth) == pytest.approx(math.sqrt((0.04 + 0.0 + 0.09) / 3))


def test_missing_pairs_are_skipped() -> None:
    assert mae([0.2, np.nan, 0.4], [0.0, 0.3, np.nan]) == pytest.approx(0.2)
    assert math.isnan(mae([np.nan], [0.1]))


def test_improvement_and_privacy_cost_formulas() -> None:
    assert improvement(method_mae=0.15, baseline_mae=0.20) == pytest.approx(25.0)
    assert privacy_cost(private_mae=0.30, nonprivate_mae=0.20) == pytest.approx(50.0)
    assert math.isnan(improvement(method_mae=0.1, baseline_mae=0.0))


def test_auc_by_hand_with_a_tie() -> None:
    # positives 0.8, 0.4; negatives 0.4, 0.1 → pairs: (0.8>0.4) 1, (0.8>0.1) 1, (0.4=0.4) ½, (0.4>0.1) 1 → 3.5/4
    assert auc([0.8, 0.4, 0.4, 0.1], [1, 1, 0, 0]) == pytest.approx(0.875)
    assert auc([0.1, 0.9], [1, 0]) == 0.0
    assert math.isnan(auc([0.3, 0.4], [1, 1]))


def test_accuracy_at_half() -> None:
    assert accuracy([0.6, 0.4, 0.5, 0.1], [1, 1, 1, 0]) == pytest.approx(0.75)


def test_ece_by_hand() -> None:
    # two bins used: [0.2, 0.2] with outcomes (0, 1) → |0.2 − 0.5| · 2/4; [0.9, 0.9] with (1, 1) → |0.9 − 1| · 2/4
    assert ece([0.2, 0.2, 0.9, 0.9], [0, 1, 1, 1]) == pytest.approx(0.5 * 0.3 + 0.5 * 0.1)
    assert ece([0.5] * 4, [1, 0, 1, 0]) == pytest.approx(0.0)


def test_reliability_bins_cover_all_points() -> None:
    rng = np.random.default_rng(0)
    p = rng.random(1000)
    bins = reliability_bins(p, rng.random(1000) < p, n_bins=15)
    assert sum(n for _, _, n in bins) == 1000 and len(bins) == 15


def test_size_mismatch_is_refused() -> None:
    with pytest.raises(ValueError):
        mae([0.1, 0.2], [0.1])


# --- partial credit: a label y counts as y of a positive and 1 − y of a negative ----------------
def _pairwise_auc(scores: list[float], labels: list[float]) -> float:
    num = den = 0.0
    for i, (si, yi) in enumerate(zip(scores, labels)):
        for j, (sj, yj) in enumerate(zip(scores, labels)):
            if i != j:
                w = yi * (1 - yj)
                den += w
                num += w * (1.0 if si > sj else 0.5 if si == sj else 0.0)
    return num / den


def test_auc_with_partial_credit_is_the_weighted_pair_count() -> None:
    scores, labels = [0.9, 0.7, 0.7, 0.2, 0.1], [1.0, 0.5, 0.25, 0.75, 0.0]
    assert auc(scores, labels) == pytest.approx(_pairwise_auc(scores, labels))
    # a half-credit response compared with itself is never a pair: all-½ labels carry no ranking information
    assert math.isnan(auc([0.3], [0.5]))


@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 0.25, 0.5, 1.0])), min_size=2, max_size=30))
def test_auc_matches_the_pairwise_definition_and_stays_in_unit_interval(cells: list[tuple[int, float]]) -> None:
    scores, labels = [float(s) for s, _ in cells], [y for _, y in cells]
    value = auc(scores, labels)
    if math.isnan(value):
        return
    assert 0.0 <= value <= 1.0 and value == pytest.approx(_pairwise_auc(scores, labels))


def test_accuracy_and_rmse_with_partial_credit_by_hand() -> None:
    # a ¾-credit answer predicted at 0.6: right with weight ¾; Brier ¾·0.4² + ¼·0.6²
    assert accuracy([0.6], [0.75]) == pytest.approx(0.75)
    assert accuracy([0.4], [0.75]) == pytest.approx(0.25)
    assert response_rmse([0.6], [0.75]) == pytest.approx(math.sqrt(0.75 * 0.16 + 0.25 * 0.36))
    assert response_rmse([0.6, 0.1], [1, 0]) == pytest.approx(rmse([0.6, 0.1], [1, 0]))  # 0/1 labels: the usual RMSE

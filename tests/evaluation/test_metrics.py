"""Metric functions against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.metrics import accuracy, auc, ece, improvement, mae, privacy_cost, reliability_bins, rmse


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

"""Whether a diagnosis's noise matches the noise its calibration was fitted at."""

from __future__ import annotations

import pytest

from diagnosis import NO_NOISE_LEVEL, NoiseLevel, calibration_mismatch


def test_the_same_noise_is_no_mismatch() -> None:
    level = NoiseLevel(mechanism="piecewise", epsilon=32.0, sensitivity="paper")
    assert calibration_mismatch(level, NoiseLevel(mechanism="piecewise", epsilon=32.0, sensitivity="paper")) is None
    assert calibration_mismatch(NO_NOISE_LEVEL, NoiseLevel(mechanism="laplace", epsilon=None)) is None  # no noise is no noise


def test_each_differing_field_is_named_with_both_values() -> None:
    calibrated = NoiseLevel(mechanism="laplace", epsilon=2.0, sensitivity="paper")
    served = NoiseLevel(mechanism="piecewise", epsilon=32.0, sensitivity="paper")
    assert calibration_mismatch(calibrated, served) == {
        "mechanism": {"calibrated": "laplace", "served": "piecewise"},
        "epsilon": {"calibrated": 2.0, "served": 32.0},
    }
    assert calibration_mismatch(NO_NOISE_LEVEL, served) == {
        "mechanism": {"calibrated": "none", "served": "piecewise"},
        "epsilon": {"calibrated": None, "served": 32.0},
        "sensitivity": {"calibrated": None, "served": "paper"},
    }


def test_a_noise_level_refuses_a_non_positive_epsilon() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        NoiseLevel(mechanism="laplace", epsilon=0.0)

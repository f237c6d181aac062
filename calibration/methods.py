"""Calibration methods by name (what a request names), each a :class:`Calibrator` type."""

from __future__ import annotations

from calibration.calibrators import BiasCalibrator, Calibrator, PaperCalibrator, PosteriorCalibrator
from calibration.stacking import StackingCalibrator

__all__ = ["CALIBRATORS", "make_calibrator"]

CALIBRATORS: dict[str, type[Calibrator]] = {
    c.method: c for c in (PaperCalibrator, BiasCalibrator, StackingCalibrator, PosteriorCalibrator)
}


def make_calibrator(method: str, **options: object) -> Calibrator:
    try:
        kind = CALIBRATORS[method]
    except KeyError:
        raise ValueError(f"unknown calibration method {method!r} (use {', '.join(CALIBRATORS)})") from None
    try:
        return kind(**options)  # type: ignore[arg-type]
    except TypeError as exc:  # an option another method takes (e.g. isotonic, which only stacking has)
        raise ValueError(f"calibration method {method!r} does not take {', '.join(sorted(options))}: {exc}") from None

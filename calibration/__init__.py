"""Calibration: fitting the aggregation on validation students (calibrators) and releasing what was
fitted (``calibration.release``). The record a calibration produces and the aggregator chosen from it
are importable from here too."""

from calibration.calibrators import CALIBRATORS, Calibrator, FittedCalibration, make_calibrator
from diagnosis.aggregation import CalibrationRecord, aggregator_for

__all__ = [
    "CALIBRATORS",
    "CalibrationRecord",
    "Calibrator",
    "FittedCalibration",
    "aggregator_for",
    "make_calibrator",
]

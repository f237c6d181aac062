"""Aggregation of entity predictions, calibrators, metrics, and the diagnosis pipeline."""

from calibration.aggregation import (
    DEFAULT_ALPHA,
    Aggregation,
    Aggregator,
    CalibrationRecord,
    ResidualAggregator,
    StackingAggregator,
    aggregator_for,
    paper_residuals,
    residual_aggregate,
    stacked_aggregate,
)
from calibration.calibrators import CALIBRATORS, Calibrator, FittedCalibration, make_calibrator
from calibration.pipeline import (
    AllEntitiesFailed,
    DiagnosisPipeline,
    DiagnosisRequest,
    DiagnosisResult,
    EntityOutcome,
    Privatized,
    UnknownEntities,
    build_context,
)

__all__ = [
    "CALIBRATORS",
    "DEFAULT_ALPHA",
    "Aggregation",
    "Aggregator",
    "AllEntitiesFailed",
    "CalibrationRecord",
    "Calibrator",
    "DiagnosisPipeline",
    "DiagnosisRequest",
    "DiagnosisResult",
    "EntityOutcome",
    "FittedCalibration",
    "Privatized",
    "ResidualAggregator",
    "StackingAggregator",
    "UnknownEntities",
    "aggregator_for",
    "build_context",
    "make_calibrator",
    "paper_residuals",
    "residual_aggregate",
    "stacked_aggregate",
]

"""Aggregation of entity predictions, calibration records, and the diagnosis pipeline."""

from calibration.aggregation import (
    DEFAULT_ALPHA,
    Aggregation,
    Aggregator,
    CalibrationRecord,
    ResidualAggregator,
    paper_residuals,
    residual_aggregate,
)
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
    "DEFAULT_ALPHA",
    "Aggregation",
    "Aggregator",
    "AllEntitiesFailed",
    "CalibrationRecord",
    "DiagnosisPipeline",
    "DiagnosisRequest",
    "DiagnosisResult",
    "EntityOutcome",
    "Privatized",
    "ResidualAggregator",
    "UnknownEntities",
    "build_context",
    "paper_residuals",
    "residual_aggregate",
]

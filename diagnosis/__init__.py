"""The diagnosis: the one pipeline (fan out → privatize → aggregate), aggregation of the entities'
answers, Bayes post-processing, and LLM tagging of Q-matrices."""

from diagnosis.aggregation import (
    DEFAULT_ALPHA,
    NO_NOISE,
    Aggregation,
    Aggregator,
    ResidualAggregator,
    StackingAggregator,
    paper_residuals,
    residual_aggregate,
    stacked_aggregate,
)
from diagnosis.calibrated import NO_NOISE_LEVEL, CalibrationTag, NoiseLevel, calibration_mismatch
from diagnosis.measured import MeasuredError, answer_counts, fit_measured_error
from diagnosis.pipeline import DiagnosisPipeline, NoiseSource, Privatized
from diagnosis.plan import DiagnosisPlan, DiagnosisRequest, UnknownEntities, build_context
from diagnosis.results import AllEntitiesFailed, DiagnosisResult, EntityOutcome, NoEntitySelected
from diagnosis.tiers import AskAll, AskCalibrated, FederationMode, FederationReport, Selective, Stage, StageReport, Verdict
from diagnosis.posterior import (
    DEFAULT_ENTITY_ERROR_SD,
    BetaPrior,
    DegeneratePosteriorError,
    PosteriorAggregation,
    PosteriorAggregator,
    ReportModel,
    fit_beta_prior,
    fit_concept_priors,
    fit_entity_error_sd,
    posterior_aggregate,
    posterior_summary,
)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_ENTITY_ERROR_SD",
    "NO_NOISE",
    "NO_NOISE_LEVEL",
    "Aggregation",
    "Aggregator",
    "AllEntitiesFailed",
    "AskAll",
    "AskCalibrated",
    "BetaPrior",
    "CalibrationTag",
    "DegeneratePosteriorError",
    "DiagnosisPipeline",
    "DiagnosisPlan",
    "DiagnosisRequest",
    "DiagnosisResult",
    "EntityOutcome",
    "FederationMode",
    "FederationReport",
    "MeasuredError",
    "NoEntitySelected",
    "NoiseLevel",
    "NoiseSource",
    "PosteriorAggregation",
    "PosteriorAggregator",
    "Privatized",
    "ReportModel",
    "ResidualAggregator",
    "Selective",
    "Stage",
    "StageReport",
    "StackingAggregator",
    "UnknownEntities",
    "Verdict",
    "answer_counts",
    "build_context",
    "calibration_mismatch",
    "fit_beta_prior",
    "fit_concept_priors",
    "fit_entity_error_sd",
    "fit_measured_error",
    "paper_residuals",
    "posterior_aggregate",
    "posterior_summary",
    "residual_aggregate",
    "stacked_aggregate",
]

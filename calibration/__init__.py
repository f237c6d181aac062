"""Calibration: fitting the aggregation on validation students (one :class:`Calibrator` type per
method, each producing its typed parameters, which build their own aggregator), the DP release of
what was fitted (``calibration.release``), and the record a diagnosis applies."""

from calibration.ability_truth import SERVING_SCALE, ability_truth, ability_truths, trained_scale
from calibration.calibrators import (
    DEFAULT_FOLDS,
    BiasCalibrator,
    Calibrator,
    FittedCalibration,
    PaperCalibrator,
    PosteriorCalibrator,
    validation_mae,
)
from calibration.exclusion import DEFAULT_MIN_ANSWERS, TooFewAnswers, entities_to_exclude
from calibration.held_out import ItemCheck, item_checks
from calibration.fitting import (
    ValidationAnswer,
    ValidationStudent,
    answer_validation_student,
    calibration_record,
    validation_set,
)
from calibration.methods import CALIBRATORS, make_calibrator
from calibration.params import (
    PARAMS_BY_METHOD,
    BiasParams,
    CalibrationParams,
    PaperParams,
    PosteriorParams,
    StackingParams,
    params_from_json,
)
from calibration.record import AggregationMode, CalibrationRecord, aggregator_for
from calibration.stacking import StackingCalibrator
from calibration.validation import ValidationSet

__all__ = [
    "CALIBRATORS",
    "DEFAULT_FOLDS",
    "DEFAULT_MIN_ANSWERS",
    "PARAMS_BY_METHOD",
    "SERVING_SCALE",
    "AggregationMode",
    "BiasCalibrator",
    "BiasParams",
    "CalibrationParams",
    "CalibrationRecord",
    "Calibrator",
    "FittedCalibration",
    "ItemCheck",
    "PaperCalibrator",
    "PaperParams",
    "PosteriorCalibrator",
    "PosteriorParams",
    "StackingCalibrator",
    "StackingParams",
    "TooFewAnswers",
    "ability_truth",
    "ability_truths",
    "ValidationAnswer",
    "ValidationSet",
    "aggregator_for",
    "ValidationStudent",
    "answer_validation_student",
    "calibration_record",
    "entities_to_exclude",
    "item_checks",
    "make_calibrator",
    "params_from_json",
    "validation_mae",
    "trained_scale",
    "validation_set",
]

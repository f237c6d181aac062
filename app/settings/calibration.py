"""How answers are combined and calibrated (``FEDCD_ALPHA``, ``FEDCD_DEFAULT_CALIBRATION*`` …)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["CalibrationSettings"]


class CalibrationSettings(BaseModel):
    """The uncalibrated residual correction, /v1/calibrate's defaults and the first-start calibration."""

    alpha: float = Field(default=0.3, ge=0.0, le=1.0)
    calibration_release_epsilon: float | None = Field(
        default=4.0, gt=0, description="ε for releasing calibration parameters; None: released without noise"
    )
    default_calibration: bool = Field(
        default=True,
        description="at first start, fit a calibration for the example Q-matrix on SIMULATED validation students",
    )
    default_calibration_students: int = Field(default=120, ge=10, description="simulated students; a fifth validate")
    default_calibration_method: Literal["paper", "bias", "stacking", "posterior"] = Field(
        default="stacking",
        description="method of /v1/calibrate when a request names none, and of the first-start calibration: stacking "
        "weights every entity per concept at the served noise, so a strong member is not dragged down by weak ones",
    )
    # 20 (calibration.DEFAULT_MIN_ANSWERS): a weight or residual fitted on fewer students is noise. Measured: the
    # first-start calibration weighted two embedded LLMs that had answered only 5 and 3 of its 24 students.
    calibration_min_answers: int = Field(
        default=20, ge=1,
        description="a calibration gives no weight to an entity with fewer successful validation answers (or, when "
        "fewer validation students were asked, to one that missed any); the record lists who was left out",
    )

"""What a diagnosis rests on (``DiagnoseResponse.basis``), read off the diagnosis itself.

A new Q-matrix is diagnosed at once — by the untrained evidence model and whatever entities answer, aggregated
uncalibrated — and the answer must say so, not look like the output of a trained, calibrated federation.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.schemas import DiagnosisBasis
from diagnosis import EntityOutcome
from diagnosis.calibrated import CalibrationTag

__all__ = ["LOCAL_MODEL_PREFIX", "diagnosis_basis"]

LOCAL_MODEL_PREFIX = "fedcd-cdm/"  # the model name local-fed answers with (providers.local_fed)
UNTRAINED = "untrained"


def diagnosis_basis(
    outcomes: Sequence[EntityOutcome], calibration: CalibrationTag | None, aggregation: str
) -> DiagnosisBasis:
    answered = [o for o in outcomes if o.mastery]
    local = next((o for o in answered if o.model.startswith(LOCAL_MODEL_PREFIX)), None)
    version = local.model.removeprefix(LOCAL_MODEL_PREFIX) if local is not None else None
    local_model = None if version is None else ("untrained" if version == UNTRAINED else "trained")
    if calibration is None:
        how = ("uncalibrated posterior (uniform priors, an assumed error for every entity)" if aggregation == "posterior"
               else "uncalibrated mean")
    else:
        truth = f", truth: {calibration.truth_source}" if calibration.truth_source else ""
        how = f"{aggregation} calibrated on {calibration.n_students} students ({calibration.id}{truth})"
    local_text = {None: "local-fed did not answer", "untrained": "local-fed: the untrained evidence model (no trained "
                  "model for this Q-matrix yet)", "trained": f"local-fed: trained model {version}"}[local_model]
    return DiagnosisBasis(
        calibration="uncalibrated" if calibration is None else "calibrated",
        calibration_id=None if calibration is None else calibration.id,
        calibration_students=0 if calibration is None else calibration.n_students,
        calibration_truth=None if calibration is None else (calibration.truth_source or None),
        local_model=local_model,  # type: ignore[arg-type]
        local_model_version=version if local_model == "trained" else None,
        summary=f"{len(answered)} entit{'y' if len(answered) == 1 else 'ies'} answered; {how}; {local_text}",
    )

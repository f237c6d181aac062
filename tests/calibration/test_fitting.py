"""The one calibration path (``calibration.fitting``): validation students answered at the noise
diagnoses will use, clean copies only for methods that fit on them, and cross-validated metrics."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import (
    PosteriorCalibrator,
    StackingCalibrator,
    ValidationSet,
    ValidationStudent,
    answer_validation_student,
    calibration_record,
    validation_set,
)
from diagnosis import DiagnosisPipeline, NoiseLevel
from providers.simulated import observed_proportions
from providers.wrappers import Cached
from qmatrix import Response, example_qmatrix, simulate_dina
from tests.factories import FakeEntity

SERVED = NoiseLevel(mechanism="piecewise", epsilon=8.0, sensitivity="assessed")


async def test_a_student_is_answered_once_released_at_the_served_noise_and_kept_clean_on_request() -> None:
    # Prepare: one entity that reports the observed proportion correct, cached beneath the privacy wrapper.
    q = example_qmatrix()
    fake = FakeEntity("exact", lambda ctx: observed_proportions(ctx))
    pipeline = DiagnosisPipeline({"exact": Cached(fake)}, seed=1)
    responses = [Response(item_id="q01", correct=True), Response(item_id="q10", correct=False)]
    truth = {c: 0.5 for c in q.concepts}
    # Execute
    answer = await answer_validation_student(
        pipeline, ValidationStudent("v", responses, truth), qmatrix=q, noise=SERVED, keep_clean=True
    )
    lean = await answer_validation_student(
        pipeline, ValidationStudent("v", responses, truth), qmatrix=q, noise=SERVED, keep_clean=False
    )
    # Assert: one real call; released through piecewise; the clean copy is the entity's own answer.
    assert len(fake.contexts) == 1
    assessed = set(q.concepts_for(["q01", "q10"]))
    assert set(answer.truth) == assessed and set(answer.answers["exact"]) == assessed
    released = answer.mechanism.describe()
    assert released["mechanism"] == "piecewise" and released["epsilon"] == 8.0
    assert answer.clean is not None and answer.clean["exact"] != answer.answers["exact"]
    assert lean.clean is None
    assert type(answer).from_json(answer.to_json()) == answer


async def test_a_posterior_calibration_fits_tau_on_clean_answers_and_scores_the_noisy_ones() -> None:
    # Prepare: 60 SIMULATED students; 'good' reports the proportion correct, 'off' adds 0.3.
    q = example_qmatrix()
    data = simulate_dina(q, n_students=60, seed=3)
    entities = {
        "good": FakeEntity("good", lambda ctx: observed_proportions(ctx)),
        "off": FakeEntity("off", lambda ctx: {c: min(1.0, p + 0.3) for c, p in observed_proportions(ctx).items()}),
    }
    pipeline = DiagnosisPipeline({n: Cached(e) for n, e in entities.items()}, seed=2)
    answers = [
        await answer_validation_student(
            pipeline, ValidationStudent(s.student_id, s.responses, data.true_mastery[s.student_id]), qmatrix=q,
            noise=SERVED, keep_clean=True,
        )
        for s in data.students
    ]
    # Execute
    fitted = PosteriorCalibrator().fit(validation_set(answers, keep_clean=True))
    record = calibration_record(fitted, record_id="cal-x", qmatrix_id=q.id, entities=list(entities), noise=SERVED,
                                truth_source="simulated-true-mastery", n_students=60, version=1)
    # Assert: τ from clean answers ranks the entities; the record keeps the served noise; metrics are finite.
    tau = fitted.params.entity_error_sd
    assert tau["good"] < tau["off"]
    assert record.noise == SERVED and record.method == "posterior"
    assert fitted.metrics["cv_folds"] == 5 and 0.0 < fitted.metrics["validation_mae"] < 1.0
    with pytest.raises(ValueError, match="clean"):
        PosteriorCalibrator().fit(validation_set(answers, keep_clean=False))


def test_the_reported_validation_mae_is_cross_validated_not_in_sample() -> None:
    # Prepare: 25 students, 12 useless entities: a per-concept stack memorises noise in sample.
    rng = np.random.default_rng(0)
    truths = [{"a": float(rng.random())} for _ in range(25)]
    answers = [{f"u{j}": {"a": float(rng.random())} for j in range(12)} for _ in truths]
    # Execute
    fitted = StackingCalibrator(min_students=5).fit(ValidationSet.noiseless(answers, truths))
    # Assert: the in-sample MAE is optimistic; the cross-validated one is not below it.
    assert fitted.metrics["validation_mae_in_sample"] < fitted.metrics["validation_mae"]

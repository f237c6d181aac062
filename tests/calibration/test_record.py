"""Calibration records: one typed set of parameters per method, stored and read back, and the aggregator a
diagnosis gets from a record (or from none)."""

from __future__ import annotations

import pytest

from calibration import (
    BiasParams,
    CalibrationRecord,
    PaperParams,
    PosteriorParams,
    StackingParams,
    aggregator_for,
)
from diagnosis import NO_NOISE, PosteriorAggregator, ResidualAggregator, StackingAggregator

PARAMS = [
    PaperParams(alpha=0.3, residuals={"e": {"c": 0.1}}),
    BiasParams(alpha=0.8, residuals={"e": {"c": -0.2}}),
    StackingParams(weights={"c": {"e": 0.7}}, intercepts={"c": 0.1}, pooled_weights={"e": 0.5}, pooled_intercept=0.2),
    PosteriorParams(priors={"c": [2.0, 3.0]}, entity_error_sd={"e": 0.2}),
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.method)
def test_a_record_round_trips_through_json_with_its_typed_params(params) -> None:  # type: ignore[no-untyped-def]
    record = CalibrationRecord(id="r", qmatrix_id="q", params=params, epsilon=32.0, mechanism="piecewise")
    again = CalibrationRecord.from_json(record.to_json())
    assert again == record and type(again.params) is type(params) and again.method == params.method


def test_a_record_stored_before_params_were_typed_is_still_read() -> None:
    flat = {"id": "old", "qmatrix_id": "q", "method": "stacking", "alpha": 0.3, "residuals": {},
            "weights": {"c": {"e": 1.0}}, "intercepts": {"c": 0.0}, "isotonic": {}, "priors": {}, "entity_error_sd": {},
            "entities": ["e"], "epsilon": 2.0, "sensitivity": "paper", "mechanism": "laplace", "truth_source": "provided",
            "n_students": 30, "version": 1, "metrics": {}, "notes": [], "created_at": "2025-01-01T00:00:00+00:00"}
    record = CalibrationRecord.from_json(flat)
    assert isinstance(record.params, StackingParams) and record.params.weights == {"c": {"e": 1.0}}
    assert record.noise.mechanism_name == "laplace" and record.noise.epsilon == 2.0


@pytest.mark.parametrize(
    ("params", "kind"),
    [(PARAMS[0], ResidualAggregator), (PARAMS[1], ResidualAggregator), (PARAMS[2], StackingAggregator),
     (PARAMS[3], PosteriorAggregator)],
    ids=["paper", "bias", "stacking", "posterior"],
)
def test_each_method_builds_its_own_aggregator_tagged_with_the_record(params, kind) -> None:  # type: ignore[no-untyped-def]
    record = CalibrationRecord(id="r", qmatrix_id="q", params=params, epsilon=4.0, mechanism="laplace")
    aggregator = aggregator_for(record, aggregation="auto")
    assert isinstance(aggregator, kind) and aggregator.calibration_id == "r"
    assert aggregator.calibration is not None and aggregator.calibration.noise == record.noise


def test_aggregation_modes_choose_between_the_record_and_the_uncalibrated_kind() -> None:
    stacking = CalibrationRecord(id="s", qmatrix_id="q", params=PARAMS[2])
    posterior = CalibrationRecord(id="p", qmatrix_id="q", params=PARAMS[3])
    assert isinstance(aggregator_for(None, aggregation="record"), ResidualAggregator)
    assert isinstance(aggregator_for(None, aggregation="auto"), PosteriorAggregator)
    uncalibrated = aggregator_for(stacking, aggregation="posterior")
    assert isinstance(uncalibrated, PosteriorAggregator) and uncalibrated.calibration_id is None
    plain = aggregator_for(posterior, aggregation="mean")
    assert isinstance(plain, ResidualAggregator) and plain.calibration_id is None
    assert aggregator_for(posterior, aggregation="posterior").calibration_id == "p"


def test_an_entity_the_calibration_did_not_measure_is_not_weighed() -> None:
    # Prepare: a calibration that measured 'careful' (τ 0.05) and 'sloppy' (τ 0.4), not 'newcomer'.
    params = PosteriorParams(priors={"x": [2.0, 2.0]}, entity_error_sd={"careful": 0.05, "sloppy": 0.4})
    aggregator = params.aggregator()
    # Execute: the newcomer alone, the sloppy one alone, and the newcomer agreeing with the sloppy one; no noise.
    alone = aggregator.aggregate({"newcomer": {"x": 0.9}}, ["x"], mechanism=NO_NOISE)
    as_sloppy = aggregator.aggregate({"sloppy": {"x": 0.9}}, ["x"], mechanism=NO_NOISE)
    agreeing = aggregator.aggregate({"sloppy": {"x": 0.9}, "newcomer": {"x": 0.9}}, ["x"], mechanism=NO_NOISE)
    # Assert: of unknown skill, the newcomer moves nothing: alone it leaves the prior (Beta(2, 2): mean 0.5), and its
    # agreement neither moves nor narrows the measured entity's answer (issue 33).
    assert alone.mastery["x"] == pytest.approx(0.5, abs=1e-6)
    assert agreeing.mastery["x"] == pytest.approx(as_sloppy.mastery["x"])
    assert agreeing.intervals["x"] == pytest.approx(as_sloppy.intervals["x"])
    assert as_sloppy.mastery["x"] > 0.6

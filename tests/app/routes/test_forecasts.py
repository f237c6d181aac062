"""Item forecasts on a diagnosis (issue 31, part 1): P(correct) per item from the released diagnosis through the
serving model's item parameters, with an interval and its basis; a bad item id is a 422 before any charge; no
extra ε; batch and repeats too. The default model is trained on SIMULATED students."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from diagnosis.forecast import concept_beliefs, forecast_items
from federated import default_model_if_missing
from providers.item_response import ItemResponseFunction
from tests.app.waiting import finished_job
from tests.conftest import auth_headers

SIM = {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident", "seed": 1}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("registry")
    assert default_model_if_missing(folder, threads=1) is not None
    return folder


def _client(tmp_path: Path, entities: list[dict[str, object]]) -> TestClient:
    settings = Settings(state_dir=tmp_path, entities=entities, preload_models=False,  # type: ignore[arg-type]
                        default_calibration=False, train_default_model=False, privacy_cap_epsilon=1e6,
                        allow_unnoised=True)
    app = create_app(settings)
    return TestClient(app, headers=auth_headers(app))


def _local_fed(registry: Path) -> dict[str, object]:
    return {"name": "local-fed", "kind": "local_fed", "model": "federated-cdm", "model_path": str(registry)}


def _body(student: str, correct: bool, **extra: object) -> dict[str, object]:
    return {"student_id": student, "qmatrix_id": "example-prealgebra", "epsilon": 32.0, "aggregation": "posterior",
            "responses": [{"item_id": i, "correct": correct} for i in ("q01", "q02", "q05", "q09")], **extra}


def test_forecasts_come_from_the_trained_model_with_intervals_and_cost_nothing(tmp_path: Path, registry: Path) -> None:
    with _client(tmp_path, [_local_fed(registry), SIM]) as client:
        plain = client.post("/v1/diagnose", json=_body("s-plain", True))
        r = client.post("/v1/diagnose", json=_body("s-good", True, forecast_items=["q01", "q10", "q06"]))
        assert r.status_code == 200, r.text
        body = r.json()
        assert plain.json()["forecasts"] is None
        assert body["budget"]["charged_epsilon"] == plain.json()["budget"]["charged_epsilon"]  # no extra ε
        assert body["forecast_basis"]["model"] == "fedcd-cdm/v0001" and body["forecast_basis"]["interval_level"] > 0
        forecasts = {f["item_id"]: f for f in body["forecasts"]}
        assert list(forecasts) == ["q01", "q10", "q06"]
        for f in forecasts.values():
            low, high = f["interval"]
            assert 0 <= low <= f["p_correct"] <= high <= 1 and f["basis"] == "trained"
        # q10 (two-step equations) was not among the answers: the model's prior stood in, and its interval is wider
        assert forecasts["q10"]["from_prior"] == ["Solve two-step linear equations"]
        assert forecasts["q01"]["from_prior"] == []
        # without noise (the noise at ε 32 may widen an assessed concept's interval to nearly [0, 1]): the prior is
        # wider than four answers
        exact = client.post("/v1/diagnose", json=_body("s-exact", True, epsilon="none", forecast_items=["q01", "q10"]))
        assert exact.status_code == 200, exact.text
        width = {f["item_id"]: f["interval"][1] - f["interval"][0] for f in exact.json()["forecasts"]}
        assert width["q10"] > width["q01"]

        # answers move the forecast: compared without noise (two noisy answers at ε 32 split over the assessed
        # concepts may both clip to the same bound, and then forecast alike)
        weak = client.post("/v1/diagnose", json=_body("s-weak", False, epsilon="none", forecast_items=["q01"])).json()
        exact_q01 = next(f for f in exact.json()["forecasts"] if f["item_id"] == "q01")
        assert weak["forecasts"][0]["p_correct"] < exact_q01["p_correct"]

        every = client.post("/v1/diagnose", json=_body("s-all", True, forecast_items="all")).json()
        assert [f["item_id"] for f in every["forecasts"]] == [f"q{n:02d}" for n in range(1, 13)]

        # a repeat: the stored answer, forecasts computed afresh, nothing charged
        again = client.post("/v1/diagnose", json=_body("s-good", True, forecast_items=["q01"])).json()
        assert again["budget"]["repeat"] and again["forecasts"][0]["p_correct"] == forecasts["q01"]["p_correct"]


def test_an_unknown_item_is_a_422_before_any_charge(tmp_path: Path, registry: Path) -> None:
    with _client(tmp_path, [_local_fed(registry), SIM]) as client:
        r = client.post("/v1/diagnose", json=_body("s-bad", True, forecast_items=["q01", "nope"]))
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "forecast_items"], r.text
        assert "nope" in r.text
        assert client.post("/v1/diagnose", json=_body("s-bad", True, forecast_items=[])).status_code == 422
        lookup = client.post("/v1/privacy/lookup", json={"student_id": "s-bad"}).json()
        assert lookup["queries"] == 0


def test_without_a_trained_model_the_untrained_evidence_model_forecasts_and_says_so(tmp_path: Path) -> None:
    with _client(tmp_path, [SIM]) as client:
        r = client.post("/v1/diagnose/batch", json={
            "qmatrix_id": "example-prealgebra", "epsilon": 2.0, "forecast_items": ["q03"],
            "students": [{"student_id": f"b{n}", "responses": [{"item_id": "q03", "correct": n == 0}]}
                         for n in range(2)]})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert all(x["forecasts"][0]["basis"] == "untrained" for x in results)
        assert results[0]["forecast_basis"]["model"] == "fedcd-cdm/untrained"
        assert "untrained" in results[0]["forecast_basis"]["summary"]


def _irf(alpha: float, concepts: tuple[str, ...]) -> ItemResponseFunction:
    return ItemResponseFunction(model="m", item_ids=("i",), concepts=(concepts,), alpha=np.array([alpha]),
                                intercept=np.array([0.0]), basis=("trained",), prior_mean={"b": 0.0},
                                prior_sd={"b": 1.5})


def test_the_forecast_follows_mastery_and_its_uncertainty() -> None:
    irf = _irf(1.5, ("a",))
    sure = forecast_items(irf, concept_beliefs({"a": 0.8}, {"a": (0.75, 0.85)}, 0.9, irf), level=0.9)[0]
    unsure = forecast_items(irf, concept_beliefs({"a": 0.8}, {"a": (0.3, 0.97)}, 0.9, irf), level=0.9)[0]
    point = forecast_items(irf, concept_beliefs({"a": 0.8}, None, None, irf), level=None)[0]
    assert point.interval is None and point.p_correct == pytest.approx(1 / (1 + (0.2 / 0.8) ** 1.5))
    assert sure.interval[0] < sure.p_correct < sure.interval[1]  # type: ignore[index]
    # more uncertainty: a wider interval and a forecast pulled toward 1/2
    assert (unsure.interval[1] - unsure.interval[0]) > (sure.interval[1] - sure.interval[0])  # type: ignore[index]
    assert 0.5 < unsure.p_correct < sure.p_correct
    prior = _irf(1.0, ("a", "b"))
    both = forecast_items(prior, concept_beliefs({"a": 0.9}, {"a": (0.85, 0.95)}, 0.9, prior), level=0.9)[0]
    assert both.from_prior == ("b",)


def _validation_records(n: int, *, truth_for: set[int] = frozenset()) -> list[dict[str, object]]:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    return [{"student_id": f"v{s}", "responses": [{"item_id": i, "correct": bool((s >> k) & 1)} for k, i in enumerate(items)],
             **({"truth": {"Add and subtract fractions": 0.5}} if s in truth_for else {})} for s in range(n)]


def test_a_calibration_reads_derived_truths_on_the_serving_models_scale(tmp_path: Path, registry: Path) -> None:
    """Issue 31, part 4: with a trained model serving the Q-matrix, a truth derived from a record's responses is the
    student's ability through that model's item parameters (the scale the forecasts read), said in the record;
    provided truths are kept (the record says mixed)."""
    with _client(tmp_path, [_local_fed(registry), SIM]) as client:
        derived = client.post("/v1/calibrate", json={"qmatrix_id": "example-prealgebra", "epsilon": "none",
                                                     "method": "stacking", "records": _validation_records(24)})
        assert derived.status_code == 202, derived.text
        job = finished_job(client, derived.json()["job_id"], path="/v1/calibrate/{job_id}")
        assert job["status"] == "succeeded", job
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        assert record["truth_source"] == "serving-model-ability"
        assert any("fedcd-cdm/v0001's item parameters" in n for n in record["notes"]), record["notes"]
        mixed = client.post("/v1/calibrate", json={"qmatrix_id": "example-prealgebra", "epsilon": "none",
                                                   "method": "stacking", "records": _validation_records(24, truth_for={0, 1})})
        job = finished_job(client, mixed.json()["job_id"], path="/v1/calibrate/{job_id}")
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        assert record["truth_source"] == "mixed"
        assert any("22 of 24 validation students" in n for n in record["notes"]), record["notes"]


def test_without_a_trained_model_the_truth_stays_the_papers_rule(tmp_path: Path) -> None:
    with _client(tmp_path, [SIM]) as client:
        r = client.post("/v1/calibrate", json={"qmatrix_id": "example-prealgebra", "epsilon": "none",
                                               "method": "stacking", "records": _validation_records(24)})
        job = finished_job(client, r.json()["job_id"], path="/v1/calibrate/{job_id}")
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        assert record["truth_source"] == "proportion-correct"

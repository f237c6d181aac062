"""The calibrate → diagnose loop through the API, and jobs that survive a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.db import Database, JobRow
from providers import EntityUnavailable, PromptContext
from providers.simulated import observed_proportions
from tests.app.conftest import make_client
from tests.app.waiting import finished_job, wait_until
from tests.factories import FakeEntity

Q_ID = "example-prealgebra"


def biased(offset: float):  # type: ignore[no-untyped-def]
    """A SIMULATED entity answer: the observed proportion correct, shifted by ``offset``."""

    def answer(context: PromptContext) -> dict[str, float]:
        return {c: min(1.0, max(0.0, p + offset)) for c, p in observed_proportions(context).items()}

    return answer


def _records(n: int) -> list[dict]:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    return [
        {
            "student_id": f"v{s}",
            # Every student answers a different pattern (s in binary), so no two prompts are equal.
            "responses": [{"item_id": i, "correct": bool((s >> k) & 1)} for k, i in enumerate(items)],
        }
        for s in range(n)
    ]


def _wait(client: TestClient, job_id: str) -> dict:
    return finished_job(client, job_id, path="/v1/calibrate/{job_id}")


def test_calibrate_then_diagnose_uses_the_calibration(tmp_path: Path) -> None:
    entities = {"over": FakeEntity("over", biased(0.2)), "under": FakeEntity("under", biased(-0.05))}
    with make_client(tmp_path, entities) as client:
        # Execute: fit truth-referenced bias residuals without noise, on 30 validation students.
        r = client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "bias"})
        assert r.status_code == 202, r.text
        job = _wait(client, r.json()["job_id"])
        assert job["status"] == "succeeded", job
        assert job["progress"] == {"done": 30, "total": 30, "failed_entities": {}}
        cal_id = job["calibration_id"]
        assert job["metrics"]["validation_mae"] < job["metrics"]["validation_mae_uncalibrated"]
        assert any("proportion correct" in n for n in job["notes"])  # truth absent: the paper's rule, said so
        record = client.get(f"/v1/calibrations/{cal_id}").json()
        assert record["method"] == "bias" and record["version"] == 1 and record["truth_source"] == "proportion-correct"
        assert record["params"]["residuals"]["over"]["Add and subtract fractions"] > 0.1
        # Assert: a diagnosis now uses the latest calibration, echoes its id, and is closer to the truth.
        body = {"student_id": "t", "qmatrix_id": Q_ID, "epsilon": "none",
                "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q02", "correct": False}]}
        diagnosis = client.post("/v1/diagnose", json=body).json()
        assert diagnosis["calibration_id"] == cal_id
        assert abs(diagnosis["mastery"]["Add and subtract fractions"] - 0.5) < abs(0.575 - 0.5)


def test_stacking_calibration_weights_entities(tmp_path: Path) -> None:
    entities = {"good": FakeEntity("good", biased(0.0)), "flat": FakeEntity("flat", 0.5)}
    with make_client(tmp_path, entities) as client:
        r = client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(25), "epsilon": "none", "method": "stacking"})
        job = _wait(client, r.json()["job_id"])
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
    weights = record["params"]["weights"]["Add and subtract fractions"]
    assert weights["good"] > 0.9 and weights["flat"] == 0.0


def test_named_calibration_and_versions(tmp_path: Path, fakes: dict[str, FakeEntity]) -> None:
    with make_client(tmp_path, fakes) as client:
        ids = []
        for _ in range(2):
            job = _wait(client, client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(6)}).json()["job_id"])
            ids.append(job["calibration_id"])
        listing = client.get(f"/v1/calibrations?qmatrix_id={Q_ID}").json()
        assert [c["version"] for c in listing["data"]] == [1, 2]
        body = {"student_id": "t", "qmatrix_id": Q_ID, "responses": [{"item_id": "q01", "correct": True}]}
        assert client.post("/v1/diagnose", json=body).json()["calibration_id"] == ids[1]
        assert client.post("/v1/diagnose", json={**body, "calibration_id": ids[0]}).json()["calibration_id"] == ids[0]


def test_calibrate_on_a_simulated_dataset_split(tmp_path: Path) -> None:
    entities = {"good": FakeEntity("good", biased(0.0))}
    with make_client(tmp_path, entities) as client:
        r = client.post("/v1/calibrate", json={"dataset": {"name": "synthetic", "max_students": 40, "seed": 1}, "method": "bias"})
        job = _wait(client, r.json()["job_id"])
        assert job["status"] == "succeeded", job
        assert job["progress"]["total"] == 8  # the validation fifth of 40 students
        assert client.get(f"/v1/calibrations/{job['calibration_id']}").json()["truth_source"] == "simulated-true-mastery"


@pytest.mark.parametrize(
    "body,field",
    [
        ({"records": _records(1)}, "qmatrix_id"),
        ({"qmatrix_id": Q_ID, "records": [{"student_id": "a", "responses": [{"item_id": "zz", "correct": True}]}]}, "responses"),
        ({"qmatrix_id": Q_ID, "records": _records(1), "entities": ["ghost"]}, "entities"),
        ({"qmatrix_id": Q_ID, "records": _records(1), "method": "magic"}, "method"),
        ({"dataset": {"name": "no-such-dataset"}}, "name"),
        ({"dataset": {"name": "/etc"}}, "name"),  # never a path from a request
        ({"dataset": {"name": "../shared/data/frcsub"}}, "name"),
        ({"qmatrix_id": Q_ID, "records": [{**_records(1)[0], "truth": {"Add and subtract fractions": 2}}]}, "truth"),
    ],
)
def test_bad_calibrate_input_is_422_naming_the_field(client: TestClient, body: dict, field: str) -> None:
    r = client.post("/v1/calibrate", json=body)
    assert r.status_code == 422, r.text
    assert field in r.text


def test_an_unknown_qmatrix_is_404(client: TestClient) -> None:
    r = client.post("/v1/calibrate", json={"qmatrix_id": "nope", "records": _records(1)})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["body", "qmatrix_id"]


def test_unknown_job_and_calibration_are_404(client: TestClient) -> None:
    assert client.get("/v1/calibrate/nope").status_code == 404
    assert client.get("/v1/calibrations/nope").status_code == 404


def test_a_job_cut_off_by_a_restart_resumes_where_it_stopped(tmp_path: Path) -> None:
    slow = FakeEntity("slow", biased(0.1), delay_s=0.05)
    # Prepare: start a 40-student job and shut the app down while it runs.
    with make_client(tmp_path, {"slow": slow}, batch_concurrency=2) as client:
        job_id = client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(40), "epsilon": "none"}).json()["job_id"]
        wait_until(lambda: client.get(f"/v1/calibrate/{job_id}").json()["progress"]["done"], lambda done: done >= 6,
                   what="six students answered", poll_s=0.01)
    sessions = Database(f"sqlite:///{tmp_path / 'fedcd.db'}").sessions
    with sessions() as session:
        row = session.get(JobRow, job_id)
        assert row is not None and row.status == "running" and 6 <= row.done < 40
        done_before = row.done
    calls_before = len(slow.contexts)
    # Execute: a new process (app) on the same state folder.
    fresh = FakeEntity("slow", biased(0.1))
    with make_client(tmp_path, {"slow": fresh}) as client:
        job = _wait(client, job_id)
    # Assert: finished, resumed once, and only the unfinished students were asked again.
    assert job["status"] == "succeeded" and job["resumed"] == 1
    assert job["progress"]["done"] == 40
    assert len(fresh.contexts) == 40 - done_before
    assert calls_before >= done_before


def test_a_job_that_cannot_resume_is_failed_with_a_reason(tmp_path: Path, fakes: dict[str, FakeEntity]) -> None:
    sessions = Database(f"sqlite:///{tmp_path / 'fedcd.db'}").sessions
    with sessions.begin() as session:
        session.add(JobRow(id="old", tenant="default", kind="retired-kind", status="running", request_json="{}"))
    with make_client(tmp_path, fakes) as client:
        row = wait_until(lambda: client.app.state.gateway.jobs.get("old", tenant="default"),  # type: ignore[attr-defined]
                         lambda job: job.status != "running", what="the retired job failed")
    assert row.status == "failed" and "restart" in row.error


def test_first_start_fits_a_default_calibration_and_later_starts_reuse_it(tmp_path: Path) -> None:
    entities = {"good": FakeEntity("good", biased(0.0)), "flat": FakeEntity("flat", 0.5)}
    with make_client(tmp_path, entities, default_calibration=True, default_calibration_students=40) as client:
        listing = wait_until(lambda: client.get(f"/v1/calibrations?qmatrix_id={Q_ID}").json(),
                             lambda page: page.get("count"), what="the default calibration")
        record = listing["data"][0]
        assert record["method"] == "stacking" and record["truth_source"] == "simulated-true-mastery"
        assert record["params"]["pooled_weights"]["good"] > record["params"]["pooled_weights"]["flat"]
        assert record["n_students"] == 8 and record["mechanism"] == "anchored_piecewise" and record["epsilon"] == 32.0
    with make_client(tmp_path, entities, default_calibration=True, default_calibration_students=40) as client:
        # The first-start job is submitted before the server answers: none queued or running means none started.
        assert not client.app.state.gateway.jobs.has_active("calibrate")  # type: ignore[attr-defined]
        assert client.get(f"/v1/calibrations?qmatrix_id={Q_ID}").json()["count"] == 1


def test_a_start_refits_a_stored_default_calibration_fitted_at_another_noise_level(tmp_path: Path) -> None:
    # An upgrade that changed the default mechanism: the stored first-start calibration describes other noise, and
    # every diagnosis would carry calibration_mismatch until someone recalibrated by hand.
    entities = {"good": FakeEntity("good", biased(0.0)), "flat": FakeEntity("flat", 0.5)}
    settings = {"default_calibration": True, "default_calibration_students": 40}
    listed = f"/v1/calibrations?qmatrix_id={Q_ID}"
    with make_client(tmp_path, entities, default_mechanism="piecewise", **settings) as client:
        wait_until(lambda: client.get(listed).json(), lambda page: page.get("count"), what="the first calibration")
    with make_client(tmp_path, entities, default_mechanism="anchored_piecewise", **settings) as client:
        page = wait_until(lambda: client.get(listed).json(), lambda page: page.get("count") == 2, what="the refit")
        assert sorted(r["mechanism"] for r in page["data"]) == ["anchored_piecewise", "piecewise"]
        answers = client.post("/v1/diagnose", json={"qmatrix_id": Q_ID, "student_id": "s1",
                                                     "responses": [{"item_id": "q01", "correct": True}]}).json()
        assert answers["calibration_mismatch"] is None, answers
    with make_client(tmp_path, entities, default_mechanism="anchored_piecewise", **settings) as client:
        # matched now: nothing is refitted again
        assert not client.app.state.gateway.jobs.has_active("calibrate")  # type: ignore[attr-defined]
        assert client.get(listed).json()["count"] == 2


def test_calibration_parameters_are_released_with_dp_and_charged(tmp_path: Path) -> None:
    entities = {"over": FakeEntity("over", biased(0.2))}
    with make_client(tmp_path, entities, privacy_cap_epsilon=10.0, tenant="school") as client:
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "bias", "release_epsilon": 4.0}
        job = _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])
        assert job["status"] == "succeeded", job
        assert any("differential privacy" in n for n in job["notes"])
        assert not any("Released without noise" in n for n in job["notes"])
        assert client.get("/v1/privacy/students/v3").json()["spent_epsilon"] == 4.0
        # the residual is noisy but still near the true bias (30 students, ε = 4 over 6 statistics)
        residual = client.get(f"/v1/calibrations/{job['calibration_id']}").json()["params"]["residuals"]["over"]["Add and subtract fractions"]
        assert -1.0 <= residual <= 1.0


def test_release_noise_is_refused_when_a_validation_student_has_no_budget(tmp_path: Path) -> None:
    entities = {"over": FakeEntity("over", biased(0.2))}
    with make_client(tmp_path, entities, privacy_cap_epsilon=3.0) as client:
        body = {"qmatrix_id": Q_ID, "records": _records(5), "epsilon": "none", "release_epsilon": 4.0}
        job = _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])
        assert job["status"] == "failed" and "budget" in job["error"]
        assert client.get("/v1/privacy/students/v0").json()["spent_epsilon"] == 0.0


def test_isotonic_stacking_through_the_api(tmp_path: Path) -> None:
    entities = {"good": FakeEntity("good", biased(0.1))}
    with make_client(tmp_path, entities) as client:
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "stacking", "isotonic": True}
        job = _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])
        assert job["status"] == "succeeded", job
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        assert record["params"]["isotonic"]["good"] and any("isotonic" in n for n in record["notes"])
        r = client.post("/v1/calibrate", json={**body, "method": "bias"})
        assert r.status_code == 422 and "isotonic" in r.text


ITEMS = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]  # the order _records encodes each student's number in


def fails_from(first_failing: int, answer):  # type: ignore[no-untyped-def]
    """A SIMULATED flaky entity: answers _records' students 0 .. first_failing − 1 with ``answer``, fails on the rest."""

    def respond(context: PromptContext) -> dict[str, float]:
        student = sum(int(item.score) << ITEMS.index(item.item_id) for item in context.items)
        if student >= first_failing:
            raise EntityUnavailable("timed out (SIMULATED)")
        return answer(context) if callable(answer) else {c: float(answer) for c in context.concepts}

    return respond


def test_an_entity_that_failed_on_most_students_gets_no_weight_and_the_job_says_so(tmp_path: Path) -> None:
    # Prepare: 'flaky' answers a useless 1.0 for 5 of the 30 validation students and fails on the rest.
    entities = {"good": FakeEntity("good", biased(0.0)), "flaky": FakeEntity("flaky", fails_from(5, 1.0))}
    with make_client(tmp_path, entities) as client:
        # Execute: the default minimum is 20 successful answers.
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "stacking"}
        job = _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])
        assert job["status"] == "succeeded", job
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        # Assert: weight 0 everywhere, listed with its count, named in the job's notes and the record's.
        assert job["progress"]["failed_entities"] == {"flaky": 25}
        assert record["params"]["excluded"] == {"flaky": {"answers": 5, "students": 30}}
        assert all(w["flaky"] == 0.0 for w in record["params"]["weights"].values())
        # Fitted on all 30 students (with flaky, 5 complete rows: too few for a concept's own weights).
        assert record["params"]["weights"]["Add and subtract fractions"]["good"] > 0.9
        for notes in (job["notes"], record["notes"]):
            assert any("flaky answered 5 of 30" in n for n in notes), notes
        assert job["metrics"]["entities_excluded"] == 1.0
        # Asked anyway (federation all), flaky's answer moves nothing: the same as without it.
        diagnose = {"student_id": "t", "qmatrix_id": Q_ID, "epsilon": "none",
                    "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q02", "correct": False}]}
        asked = len(entities["flaky"].contexts)
        both = client.post("/v1/diagnose", json={**diagnose, "federation": "all"}).json()
        assert len(entities["flaky"].contexts) == asked + 1 and both["failed_entities"] == []
        good_only = client.post("/v1/diagnose", json={**diagnose, "entities": ["good"]}).json()
        assert both["mastery"] == good_only["mastery"]
        # By default (federation calibrated) it is neither asked nor charged, and the response says why.
        default = client.post("/v1/diagnose", json={**diagnose, "student_id": "t2"}).json()
        assert len(entities["flaky"].contexts) == asked + 1 and default["mastery"] == good_only["mastery"]
        assert default["federation"]["mode"] == "calibrated" and default["usage"]["calls"] == 1
        assert [(e["name"], "answered 5 of 30" in e["reason"]) for e in default["left_out_entities"]] == [("flaky", True)]


@pytest.mark.parametrize("minimum,kept", [(10, True), (11, False)])
def test_an_entity_at_exactly_the_minimum_keeps_its_weight(tmp_path: Path, minimum: int, kept: bool) -> None:
    # 'flaky' is the accurate one here (it reports the truth) and answers exactly 10 of 30 students.
    entities = {"flaky": FakeEntity("flaky", fails_from(10, biased(0.0))), "flat": FakeEntity("flat", 0.5)}
    with make_client(tmp_path, entities, calibration_min_answers=minimum) as client:
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "stacking"}
        job = _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])
        assert job["status"] == "succeeded", job
        params = client.get(f"/v1/calibrations/{job['calibration_id']}").json()["params"]
    if kept:
        assert params["excluded"] == {} and params["pooled_weights"]["flaky"] > 0.5
        assert not any("left out" in n for n in job["notes"])
    else:
        assert params["excluded"] == {"flaky": {"answers": 10, "students": 30}}
        assert params["pooled_weights"]["flaky"] == 0.0


def test_a_calibration_where_no_entity_answered_enough_fails_naming_the_setting(tmp_path: Path) -> None:
    with make_client(tmp_path, {"flaky": FakeEntity("flaky", fails_from(3, 0.5))}) as client:
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "bias"}
        job = _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])
    assert job["status"] == "failed"
    assert "flaky answered 3 of 30" in job["error"] and "FEDCD_CALIBRATION_MIN_ANSWERS = 20" in job["error"]


def test_an_entity_left_out_by_the_calibration_is_not_charged(tmp_path: Path) -> None:
    entities = {"good": FakeEntity("good", biased(0.0)), "flaky": FakeEntity("flaky", fails_from(5, 1.0))}
    with make_client(tmp_path, entities) as client:
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "stacking"}
        assert _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])["status"] == "succeeded"
        diagnose = {"qmatrix_id": Q_ID, "epsilon": 2.0, "responses": [{"item_id": "q01", "correct": True}]}
        default = client.post("/v1/diagnose", json={**diagnose, "student_id": "a"}).json()
        everyone = client.post("/v1/diagnose", json={**diagnose, "student_id": "b", "federation": "all"}).json()
    assert default["budget"]["charged_epsilon"] == pytest.approx(2.0)  # good only
    assert everyone["budget"]["charged_epsilon"] == pytest.approx(4.0) and everyone["left_out_entities"] == []


def test_a_student_named_by_two_records_is_refused_before_any_job_or_charge(tmp_path: Path) -> None:
    # Prepare: the reviewer's case: "victim" written as 10 identical records among 10 other students. The release
    # charges each student once but its noise hides one record per student: victim would weigh ten times over.
    entities = {"over": FakeEntity("over", biased(0.2))}
    victim = {**_records(1)[0], "student_id": "victim"}
    body = {"qmatrix_id": Q_ID, "records": [victim] * 10 + _records(10), "epsilon": "none", "method": "bias",
            "release_epsilon": 1.0}
    with make_client(tmp_path, entities, privacy_cap_epsilon=10.0) as client:
        # Execute
        r = client.post("/v1/calibrate", json=body)

        # Assert: a 422 at the first repeat, no job, nobody charged
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]
        assert error["loc"] == ["body", "records", 1, "student_id"]
        assert "record 1 names the student of record 0 again: each student may appear once" in error["msg"]
        assert client.get("/v1/jobs").json()["count"] == 0
        assert client.get("/v1/privacy/students/victim").json()["spent_epsilon"] == 0.0
        # the same records, each student once, are a job as before
        assert client.post("/v1/calibrate", json={**body, "records": [victim, *_records(10)]}).status_code == 202

"""A DP-released stacking calibration keeps about a fifth of each validation student's responses back from the
entities and from the truth, and its guard compares candidates by their forecasts of those (calibration.held_out;
issue 31 part 4). The tenant's forecasts come from a trained model (the default model, trained on SIMULATED
students)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db import Database, JobItemRow
from app.jobs.calibration import KEPT_BACK_NOTE
from calibration.held_out import keep_back
from calibration.release_guard import HELD_OUT_FORECASTS
from federated import default_model_if_missing
from providers.item_response import ItemResponseFunction
from providers.local_fed import LocalFedEntity
from qmatrix import Response
from tests.app.conftest import make_client
from tests.app.jobs.test_calibrate import Q_ID, _records, _wait, biased
from tests.app.waiting import wait_until
from tests.factories import FakeEntity

STUDENTS = 40
NO_ITEMS = ItemResponseFunction(model="none", item_ids=(), concepts=(), alpha=np.zeros(0), intercept=np.zeros(0),
                                basis=(), prior_mean={}, prior_sd={})


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("registry")
    assert default_model_if_missing(folder, threads=1) is not None
    return folder


def _seen(records: list[dict], ids: list[str]) -> list[tuple[tuple[str, float], ...]]:
    """Per record, the (item, score) pairs a calibrate job lets the entities see: keep_back's split under the id the
    job holds (the record's keyed pseudonym; the split needs no item parameters)."""
    out = []
    for record, student_id in zip(records, ids, strict=True):
        responses = [Response(item_id=r["item_id"], correct=r["correct"]) for r in record["responses"]]
        out.append(tuple(sorted((r.item_id, r.score) for r in keep_back(student_id, responses, NO_ITEMS)[0])))
    return out


def _asked(entity: FakeEntity) -> list[tuple[tuple[str, float], ...]]:
    return [tuple(sorted((i.item_id, i.score) for i in c.items)) for c in entity.contexts]


def _keyed(client: TestClient, records: list[dict]) -> list[str]:
    pseudonyms = client.app.state.gateway.pseudonyms  # type: ignore[attr-defined]
    return [pseudonyms.key("school", r["student_id"]) for r in records]


def _calibrate(tmp_path: Path, registry: Path, release: float | str, method: str = "stacking"
               ) -> tuple[dict, dict, FakeEntity, list[str]]:
    over = FakeEntity("over", biased(0.2))
    entities = {"over": over, "local-fed": LocalFedEntity(str(registry))}
    body = {"qmatrix_id": Q_ID, "records": _records(STUDENTS), "epsilon": "none", "method": method,
            "release_epsilon": release}
    with make_client(tmp_path, entities, privacy_cap_epsilon=100.0, tenant="school") as client:  # type: ignore[arg-type]
        job = _wait(client, client.post("/v1/calibrate", json=body).json()["job_id"])
        assert job["status"] == "succeeded", job
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        ids = _keyed(client, body["records"])
    return job, record, over, ids


def test_a_dp_released_stack_keeps_responses_back_and_its_guard_scores_forecasts_of_them(
    tmp_path: Path, registry: Path
) -> None:
    # Execute: the default method (stacking) released with DP, as a real cohort is by default
    job, record, over, ids = _calibrate(tmp_path, registry, 4.0)

    # Assert: the entity saw exactly the responses keep_back leaves to each student (two of eight kept back), the
    # truth was read on the serving model's scale, the record says what the guard compared, the job that responses
    # were kept back
    asked = set(_asked(over))
    assert asked == set(_seen(_records(STUDENTS), ids))
    assert {len(items) for items in asked} == {6}
    assert record["truth_source"] == "serving-model-ability"
    assert record["params"]["release"]["guard"]["statistic"] == HELD_OUT_FORECASTS
    assert KEPT_BACK_NOTE in job["notes"]
    assert any("summed Brier score changes of held-out forecasts" in n for n in job["notes"])


@pytest.mark.parametrize(("release", "method"), [("none", "stacking"), (4.0, "bias")])
def test_without_a_guarded_dp_release_the_entities_see_every_response(
    tmp_path: Path, registry: Path, release: float | str, method: str
) -> None:
    # Execute: released without noise (a cross-validated choice, no guard), or a method without a guard
    job, record, over, _ = _calibrate(tmp_path, registry, release, method)

    # Assert
    assert {len(c.items) for c in over.contexts} == {8}
    assert "guard" not in (record["params"].get("release") or {}) and KEPT_BACK_NOTE not in job["notes"]


def test_a_resumed_job_answers_again_a_student_answered_before_responses_were_kept_back(
    tmp_path: Path, registry: Path
) -> None:
    # Prepare: a job cut off by a restart, one of whose finished students is then made to look as an earlier version
    # stored it (no "kept_back" flag: its answer may have seen every response)
    body = {"qmatrix_id": Q_ID, "records": _records(STUDENTS), "epsilon": "none", "method": "stacking",
            "release_epsilon": 4.0}
    slow = {"over": FakeEntity("over", biased(0.2), delay_s=0.05), "local-fed": LocalFedEntity(str(registry))}
    with make_client(tmp_path, slow, batch_concurrency=2, privacy_cap_epsilon=100.0,  # type: ignore[arg-type]
                     tenant="school") as client:
        job_id = client.post("/v1/calibrate", json=body).json()["job_id"]
        wait_until(lambda: client.get(f"/v1/calibrate/{job_id}").json()["progress"]["done"], lambda done: done >= 6,
                   what="six students answered", poll_s=0.01)
        ids = _keyed(client, body["records"])
    sessions = Database(f"sqlite:///{tmp_path / 'fedcd.db'}").sessions
    with sessions.begin() as session:
        row = session.scalars(select(JobItemRow).where(JobItemRow.job_id == job_id)).first()
        assert row is not None
        stored = json.loads(row.result_json)
        assert stored.pop("kept_back") is True
        row.result_json, stale = json.dumps(stored), row.idx

    # Execute: a new process on the same state folder
    over = FakeEntity("over", biased(0.2))
    with make_client(tmp_path, {"over": over, "local-fed": LocalFedEntity(str(registry))},  # type: ignore[dict-item]
                     privacy_cap_epsilon=100.0, tenant="school") as client:
        job = _wait(client, job_id)

    # Assert: that student was asked again, on the responses keep_back leaves it; the others kept were not
    assert job["status"] == "succeeded" and job["resumed"] == 1, job
    asked = _asked(over)
    assert _seen(_records(STUDENTS), ids)[stale] in asked
    assert len(asked) < STUDENTS

"""``/v1/next-items`` (issue 34): ranked next items with their why, the options a platform needs (targets, exclusions,
count, a width to stop at), batch for a class, 404/422 naming the field, and privacy kept: no entity is asked and the
ledger is untouched. The model is the default one, trained on SIMULATED students; the other entity is a
fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app import Settings, create_app
from app.services.next_items import NextItemsService
from federated import default_model_if_missing
from federated.registry import LoadedModel, ModelRegistry
from providers.local_fed import LocalFedEntity
from qmatrix import example_qmatrix
from providers.types import EntityPrediction, PromptContext
from tests.conftest import auth_headers
from tests.factories import FakeEntity

QID = "example-prealgebra"
ANSWERED = [{"item_id": "q01", "correct": True}, {"item_id": "q03", "correct": False}, {"item_id": "q05", "correct": True}]


class CountingLocalFed(LocalFedEntity):
    """``local-fed`` counting how often it is asked to diagnose."""

    calls = 0

    async def respond(self, context: PromptContext) -> EntityPrediction:
        type(self).calls += 1
        return await super().respond(context)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("registry")
    assert default_model_if_missing(folder, threads=1) is not None
    return folder


@pytest.fixture
def setup(tmp_path: Path, registry: Path) -> Any:
    settings = Settings(state_dir=tmp_path, preload_models=False, default_calibration=False,  # type: ignore[call-arg]
                        train_default_model=False)
    fake = FakeEntity("fake", 0.5)
    CountingLocalFed.calls = 0
    app = create_app(settings, entities={"local-fed": CountingLocalFed(registry_dir=registry), "fake": fake})
    with TestClient(app, headers=auth_headers(app)) as client:
        yield client, fake


def _ask(client: TestClient, **extra: Any) -> Any:
    body = {"student_id": "s1", "qmatrix_id": QID, "responses": ANSWERED, **extra}
    return client.post("/v1/next-items", json=body)


def test_ranked_items_with_their_why_and_no_entity_asked_and_nothing_charged(setup: Any) -> None:
    client, fake = setup
    diagnosed = client.post("/v1/diagnose", json={"student_id": "s1", "qmatrix_id": QID, "responses": ANSWERED})
    assert diagnosed.status_code == 200, diagnosed.text
    asked_before, fake_before = CountingLocalFed.calls, len(fake.contexts)
    budget_before = client.post("/v1/privacy/lookup", json={"student_id": "s1"}).json()
    assert budget_before["lifetime_epsilon"] > 0  # the diagnosis was charged: the ledger is on

    r = _ask(client, count=3)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["basis"] == "trained" and body["model"] == "fedcd-cdm/v0001" and body["epsilon_charged"] == 0
    items = body["items"]
    assert [i["rank"] for i in items] == [1, 2, 3]
    assert not {i["item_id"] for i in items} & {a["item_id"] for a in ANSWERED}  # never an answered item
    for item in items:
        assert item["expected_gain"] > 0 and item["expected_narrowing"] > 0 and 0 < item["p_correct"] < 1
        assert item["informs"]
        for why in item["informs"]:
            assert why["width_after"] < why["width_now"] and why["entropy_reduction"] > 0
    assert body["stop"] is False and body["stop_reason"] is None
    assert {c["concept"] for c in body["concepts"]} == set(client.get(f"/v1/qmatrices/{QID}").json()["concepts"])

    # privacy: neither entity was asked, the ledger did not move
    assert CountingLocalFed.calls == asked_before and len(fake.contexts) == fake_before
    assert client.post("/v1/privacy/lookup", json={"student_id": "s1"}).json() == budget_before

    assert _ask(client, count=3).json()["items"] == items  # a repeat draws the same list


def test_targets_exclusions_and_the_stopping_signal(setup: Any) -> None:
    client, _ = setup
    concept = "Solve two-step linear equations"
    targeted = _ask(client, target_concepts=[concept], count=2, randomesque=1).json()
    assert all(concept in i["concepts"] or concept in [w["concept"] for w in i["informs"]] for i in targeted["items"])
    assert [c["concept"] for c in targeted["concepts"] if c["targeted"]] == [concept]
    first = targeted["items"][0]["item_id"]
    excluded = _ask(client, target_concepts=[concept], count=2, randomesque=1, exclude_items=[first]).json()
    assert first not in [i["item_id"] for i in excluded["items"]]

    done = _ask(client, target_width=0.999).json()
    assert done["stop"] and done["stop_reason"] == "target_width_reached" and done["items"] == []
    nothing = _ask(client, min_gain=9.0).json()
    assert nothing["stop"] and nothing["stop_reason"] == "nothing_worth_asking"
    fresh = client.post("/v1/next-items", json={"student_id": "new", "qmatrix_id": QID}).json()
    assert fresh["items"] and not fresh["stop"]  # no responses yet: the first items to ask


def test_batch_for_a_class(setup: Any) -> None:
    client, fake = setup
    r = client.post("/v1/next-items/batch", json={"qmatrix_id": QID, "count": 1, "students": [
        {"student_id": "a", "responses": ANSWERED}, {"student_id": "b", "responses": []}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 2 and [s["student_id"] for s in body["results"]] == ["a", "b"]
    assert all(len(s["items"]) == 1 for s in body["results"]) and not fake.contexts


@pytest.mark.parametrize(("extra", "loc"), [
    ({"responses": [{"item_id": "nope", "correct": True}]}, ["body", "responses"]),
    ({"target_concepts": ["Quantum"]}, ["body", "target_concepts"]),
    ({"exclude_items": ["zz"]}, ["body", "exclude_items"]),
    ({"count": 0}, ["body", "count"]),
    ({"target_width": 1.5}, ["body", "target_width"]),
])
def test_bad_input_is_a_422_naming_the_field(setup: Any, extra: dict[str, Any], loc: list[str]) -> None:
    client, _ = setup
    r = _ask(client, **extra)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][: len(loc)] == loc, r.text


def test_unknown_qmatrix_is_404_and_a_key_is_needed(setup: Any) -> None:
    client, _ = setup
    r = client.post("/v1/next-items", json={"student_id": "s1", "qmatrix_id": "nope", "responses": ANSWERED})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["body", "qmatrix_id"], r.text
    anonymous = client.post("/v1/next-items", json={"student_id": "s1", "qmatrix_id": QID},
                            headers={"Authorization": ""})
    assert anonymous.status_code == 401


def test_the_student_report_and_its_chart_suggest_items_for_thin_concepts(setup: Any) -> None:
    client, fake = setup
    diagnosed = client.post("/v1/diagnose", json={"student_id": "s1", "qmatrix_id": QID, "responses": ANSWERED})
    assert diagnosed.status_code == 200
    calls = len(fake.contexts)
    page = client.get("/v1/students/s1/report", params={"qmatrix_id": QID})
    assert page.status_code == 200, page.text
    assert "thin evidence" in page.text and "Ask next" in page.text
    chart = client.get("/v1/students/s1/report", params={"qmatrix_id": QID}, headers={"Accept": "image/svg+xml"})
    assert "ask next: q" in chart.text  # the console's student page shows this chart
    assert len(fake.contexts) == calls  # suggestions ask no entity


class ServingOne:
    """Stands in for ``local-fed``: serves whichever model the test sets."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded

    def serving_model(self, qmatrix_id: str | None, tenant: str | None, concepts: Any) -> LoadedModel:
        return self.loaded


def test_a_new_model_gets_a_fresh_bank_and_the_same_model_reread_keeps_its_own(registry: Path, tmp_path: Path) -> None:
    # Prepare: the default model republished in a registry of the test's own (so it can publish more versions)
    q, key = example_qmatrix(), "tenant:example-prealgebra:v1"
    default = ModelRegistry(registry).load(qmatrix_id=QID)
    own = ModelRegistry(tmp_path / "own")
    own.publish(default.model, manifest={"qmatrix_id": QID, "items": default.manifest["items"]})
    first = own.load(qmatrix_id=QID)
    serving = ServingOne(first)
    service = NextItemsService(planner=None, local_fed=serving, settings=None)  # type: ignore[arg-type]
    bank = service.bank(q, key, "t")

    # Execute / Assert: the same version read again (a reload: another object) is the same model, the same bank
    serving.loaded = own.load(qmatrix_id=QID)
    assert serving.loaded.model is not first.model and service.bank(q, key, "t") is bank
    # a new version is a fresh bank
    with torch.no_grad():
        first.model.prior_mean.add_(1.0)  # other weights
    own.publish(first.model, manifest={"qmatrix_id": QID, "items": default.manifest["items"]})
    serving.loaded = own.load(qmatrix_id=QID)
    newer = service.bank(q, key, "t")
    assert newer is not bank and newer.model == "fedcd-cdm/v0002"
    assert np.allclose(newer.prior_mean, bank.prior_mean + 1.0)
    # a registry rebuilt in place numbers from v0001 again; the new model may even take the collected one's id
    # (here: literally the same object): its signed weights tell it apart
    rebuilt = ModelRegistry(tmp_path / "rebuilt")
    rebuilt.publish(first.model, manifest={"qmatrix_id": QID, "items": default.manifest["items"]})
    again = rebuilt.load(qmatrix_id=QID)
    serving.loaded = LoadedModel(version=again.version, model=first.model, manifest=again.manifest)
    assert again.version == first.version
    fresh = service.bank(q, key, "t")
    assert fresh is not bank and np.allclose(fresh.prior_mean, newer.prior_mean)

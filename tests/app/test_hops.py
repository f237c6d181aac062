"""Worker-thread hops per diagnosis (issue 36): the API key and the tenant's configuration generations are read in
one hop, and a configuration already in memory is planned on the event loop. What the cut must not lose: a key
revoked, or a configuration changed, in another worker applies to the very next request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_client
from tests.factories import FakeEntity

BODY = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "epsilon": 1.0,
        "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": False}]}


@contextmanager
def _hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The qualified names of the functions run through ``asyncio.to_thread`` meanwhile."""
    seen: list[str] = []
    real = asyncio.to_thread

    async def counted(func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(getattr(func, "__qualname__", type(func).__qualname__))
        return await real(func, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(asyncio, "to_thread", counted)
        yield seen


@contextmanager
def _two_workers(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """Two gateways on one database, as two workers of one deployment (each with its own caches)."""
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.2), "beta": FakeEntity("beta", 0.6)}) as one, \
            make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.2), "beta": FakeEntity("beta", 0.6)}) as two:
        yield one, two


def _key_id(client: TestClient) -> str:
    return client.headers["Authorization"].removeprefix("Bearer fcd_").split("_", 1)[0]


def test_a_warm_diagnosis_plans_without_a_hop_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.2)}) as client:
        with _hops(monkeypatch) as cold:
            assert client.post("/v1/diagnose", json=BODY).status_code == 200
        with _hops(monkeypatch) as warm:
            assert client.post("/v1/diagnose", json={**BODY, "student_id": "s2"}).status_code == 200
    planned = [name for name in cold if name.startswith("Planner.")]
    assert planned, cold  # the counter sees the planner's hop when the configuration is not in memory yet
    assert not [name for name in warm if name.startswith("Planner.")], warm
    assert warm.count("KeyStore.authenticate") == 1, warm  # the key and the generations: one hop


def test_a_key_revoked_in_another_worker_fails_on_the_next_diagnosis(tmp_path: Path) -> None:
    with _two_workers(tmp_path) as (one, two):
        for student in ("s1", "s2"):  # the second one is planned from memory
            assert one.post("/v1/diagnose", json={**BODY, "student_id": student}).status_code == 200
        assert two.app.state.gateway.keys.revoke(_key_id(one))  # type: ignore[attr-defined]
        refused = one.post("/v1/diagnose", json={**BODY, "student_id": "s3"})
        assert refused.status_code == 401, refused.text
        assert two.post("/v1/diagnose", json={**BODY, "student_id": "s3"}).status_code == 200  # its own key


def test_a_policy_changed_in_another_worker_applies_to_the_next_diagnosis(tmp_path: Path) -> None:
    unnoised = {**BODY, "epsilon": "none"}
    with _two_workers(tmp_path) as (one, two):
        for student in ("s1", "s2"):
            assert one.post("/v1/diagnose", json={**unnoised, "student_id": student}).status_code == 200
        policy = two.get("/v1/admin/privacy-policy").json()
        changed = {k: v for k, v in policy.items() if k not in ("tenant", "version", "created_at", "created_by")}
        changed["allow_unnoised"] = False
        assert two.put("/v1/admin/privacy-policy", json=changed).status_code == 200, changed
        refused = one.post("/v1/diagnose", json={**unnoised, "student_id": "s3"})
        assert refused.status_code == 422, refused.text
        assert "allow_unnoised" in refused.text


@pytest.mark.parametrize(("path", "body", "planned_by"), [
    ("/v1/next-items", {k: BODY[k] for k in ("student_id", "qmatrix_id", "responses")}, "Planner."),
    ("/v1/privacy/lookup", {"student_id": "s1"}, "BudgetService."),
])
def test_other_routes_read_the_configuration_as_of_the_key_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, object], planned_by: str
) -> None:
    """Next items and budget lookups read the tenant's configuration as of the generations the key lookup read: no
    second read of them, and no hop of their own once it is in memory."""
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.2)}) as client:
        with _hops(monkeypatch) as cold:
            assert client.post(path, json=body).status_code == 200
        with _hops(monkeypatch) as warm:
            assert client.post(path, json=body).status_code == 200
    assert [name for name in cold if name.startswith(planned_by)], cold  # the counter sees the configuration's hop
    assert not [name for name in warm if name.startswith(planned_by)], warm
    assert warm.count("KeyStore.authenticate") == 1, warm


def test_a_policy_changed_in_another_worker_applies_to_the_next_budget_lookup(tmp_path: Path) -> None:
    lookup = {"student_id": "s1"}
    with _two_workers(tmp_path) as (one, two):
        for _ in range(2):  # the second one reads the policy from memory
            cap = one.post("/v1/privacy/lookup", json=lookup).json()["cap_epsilon"]
        policy = two.get("/v1/admin/privacy-policy").json()
        changed = {k: v for k, v in policy.items() if k not in ("tenant", "version", "created_at", "created_by")}
        changed["cap_epsilon"] = cap / 2
        assert two.put("/v1/admin/privacy-policy", json=changed).status_code == 200, changed
        assert one.post("/v1/privacy/lookup", json=lookup).json()["cap_epsilon"] == cap / 2

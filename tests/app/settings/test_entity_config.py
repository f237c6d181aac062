"""Configuration that says what it does (issue 21, part 5): declared entities keep local-fed unless it is disabled
explicitly; a declared entity whose API key is missing is dropped with one warning and counts nowhere."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import app.settings.federation as settings_module  # the once-per-process warning lives there
from app import Settings, create_app
from app.cli import cli
from tests.conftest import auth_headers

KEY_ENV = "TUTOR_HOSTED_KEY"  # the hosted entity's key variable; unset unless a test sets it
SIM = {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"}
HOSTED = {"name": "gpt", "kind": "openai", "model": "gpt-4o-mini", "api_key_env": KEY_ENV,
          "base_url": "http://127.0.0.1:9/v1"}  # never called: the tests below stop before any call reaches it


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (KEY_ENV, "FEDCD_ENTITIES", "FEDCD_CONFIG", "FEDCD_LOCAL_FED"):
        monkeypatch.delenv(key, raising=False)
    # Each test sees the once-per-process warning afresh.
    monkeypatch.setattr(settings_module, "_WARNED_MISSING_KEYS", set())


def _names(settings: Settings) -> list[str]:
    return [s.name for s in settings.entity_specs]


def _missing_key_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "'gpt'" in r.getMessage()]


# --- local-fed with declared entities -------------------------------------------------------------------------


def test_declared_entities_keep_local_fed(tmp_path: Path) -> None:
    specs = Settings(state_dir=tmp_path, entities=[SIM]).entity_specs  # type: ignore[list-item]
    assert [s.name for s in specs] == ["sim:confident", "local-fed"]
    local = specs[-1]
    assert local.kind == "local_fed" and local.model_path == str(tmp_path / "models") and local.tier == 0


def test_local_fed_false_drops_local_fed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _names(Settings(state_dir=tmp_path, entities=[SIM], local_fed=False)) == ["sim:confident"]  # type: ignore[list-item]
    monkeypatch.setenv("FEDCD_LOCAL_FED", "false")
    monkeypatch.setenv("FEDCD_ENTITIES", json.dumps([SIM]))
    assert _names(Settings(state_dir=tmp_path)) == ["sim:confident"]


def test_a_declared_disabled_local_fed_drops_it(tmp_path: Path) -> None:
    local = {"name": "local-fed", "kind": "local_fed", "model_path": str(tmp_path / "models"), "enabled": False}
    settings = Settings(state_dir=tmp_path, entities=[SIM, local])  # type: ignore[list-item]
    assert _names(settings) == ["sim:confident"]
    assert [(d.name, d.reason) for d in settings.dropped_entities] == [
        ("local-fed", "disabled in its declaration (enabled: false)")
    ]


def test_a_declared_local_fed_is_used_and_not_doubled(tmp_path: Path) -> None:
    mine = {"name": "trained", "kind": "local_fed", "model_path": str(tmp_path / "elsewhere"), "concurrency": 2}
    specs = Settings(state_dir=tmp_path, entities=[mine, SIM]).entity_specs  # type: ignore[list-item]
    assert [(s.name, s.kind) for s in specs] == [("trained", "local_fed"), ("sim:confident", "simulated")]
    assert specs[0].model_path == str(tmp_path / "elsewhere") and specs[0].concurrency == 2


def test_another_kind_may_not_take_the_name_local_fed(tmp_path: Path) -> None:
    taken = {"name": "local-fed", "kind": "openai_compatible", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
    with pytest.raises(ValueError, match="local-fed"):
        Settings(state_dir=tmp_path, entities=[taken])  # type: ignore[list-item]
    assert _names(Settings(state_dir=tmp_path, entities=[taken], local_fed=False)) == ["local-fed"]  # type: ignore[list-item]


def test_the_default_federation_still_has_local_fed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    settings = Settings(state_dir=tmp_path)
    assert _names(settings) == ["smollm2", "gemma3", "local-fed"] and settings.dropped_entities == []


# --- a hosted entity declared without its key -----------------------------------------------------------------


def _app_settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(
        state_dir=tmp_path, entities=[SIM, HOSTED], local_fed=False, preload_models=False,  # type: ignore[list-item]
        default_calibration=False, train_default_model=False, **values,  # type: ignore[arg-type]
    )


def test_a_hosted_entity_without_its_key_is_dropped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    settings = _app_settings(tmp_path)
    assert _names(settings) == ["sim:confident"]
    assert [(d.name, d.kind, d.missing_env) for d in settings.dropped_entities] == [("gpt", "openai", KEY_ENV)]
    # Read again, by another Settings object, by a whole gateway start and its routes: still one warning.
    assert _names(_app_settings(tmp_path)) == ["sim:confident"]
    app = create_app(settings)
    with TestClient(app) as client:
        admin = client.get("/v1/entities", headers=auth_headers(app, role="admin")).json()
        plain = client.get("/v1/entities", headers=auth_headers(app, role="client")).json()
        assert app.state.gateway.federation.names == ["sim:confident"]
    warnings = _missing_key_warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert KEY_ENV in warnings[0].getMessage()
    # /v1/entities lists the federation; admins also see what was left out, and why
    assert [e["name"] for e in admin["data"]] == ["sim:confident"] and admin["count"] == 1
    assert admin["dropped"] == [{"name": "gpt", "kind": "openai", "reason": f"its API key variable {KEY_ENV} is not set"}]
    assert [e["name"] for e in plain["data"]] == ["sim:confident"] and plain["dropped"] is None


def test_the_epsilon_reservation_counts_only_usable_entities(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cap of exactly one answer's ε: a diagnosis fits only if the dropped entity is not reserved for.
    body = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "epsilon": 2.0, "federation": "all",
            "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q03", "correct": False}]}
    without_key = _app_settings(tmp_path / "a", privacy_cap_epsilon=2.0, privacy_period="lifetime")
    app = create_app(without_key)
    with TestClient(app, headers=auth_headers(app)) as client:
        r = client.post("/v1/diagnose", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["budget"]["charged_epsilon"] == 2.0 and r.json()["failed_entities"] == []
    # With the key set the entity is a member: two answers must be reserved, which the cap refuses.
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with_key = _app_settings(tmp_path / "b", privacy_cap_epsilon=2.0, privacy_period="lifetime")
    assert _names(with_key) == ["sim:confident", "gpt"] and with_key.dropped_entities == []
    app = create_app(with_key)
    with TestClient(app, headers=auth_headers(app)) as client:
        assert [e["name"] for e in client.get("/v1/entities").json()["data"]] == ["sim:confident", "gpt"]
        assert client.get("/v1/entities").json()["dropped"] == []
        assert client.post("/v1/diagnose", json=body).status_code == 429


def test_privacy_budget_counts_the_configured_federation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("FEDCD_ENTITIES", json.dumps([SIM, HOSTED]))

    def budget() -> dict[str, object]:
        result = CliRunner().invoke(cli, ["privacy", "budget", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    # No key: gpt is not counted; local-fed is (kept with declared entities).
    numbers = budget()
    assert numbers["entities"] == 2 and numbers["entity_names"] == ["sim:confident", "local-fed"]
    assert numbers["epsilon_per_diagnosis"] == 64.0
    assert numbers["dropped_entities"] == [{"name": "gpt", "reason": f"its API key variable {KEY_ENV} is not set"}]
    assert len(_missing_key_warnings(caplog)) == 1
    monkeypatch.setenv("FEDCD_LOCAL_FED", "false")
    assert budget()["entity_names"] == ["sim:confident"]
    # With the key: counted.
    monkeypatch.setenv(KEY_ENV, "sk-test")
    numbers = budget()
    assert numbers["entities"] == 2 and numbers["entity_names"] == ["sim:confident", "gpt"]
    assert numbers["dropped_entities"] == []
    assert len(_missing_key_warnings(caplog)) == 1

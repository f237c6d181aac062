"""API keys as an attacker would try them: none, wrong, revoked, expired, a client key on admin routes."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app import Settings, create_app
from app.auth import KeyStore
from app.cli import cli
from app.db import Database
from tests.conftest import auth_headers, bearer, make_client
from tests.factories import FakeEntity

DIAGNOSE = {
    "student_id": "s1", "qmatrix_id": "example-prealgebra", "epsilon": 1.0,
    "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": False}],
}
Q = {"id": "mine", "concepts": ["A"], "items": [{"id": "i1", "concepts": ["A"]}]}

# (method, path, json body) of every route that needs an admin key.
ADMIN_ROUTES = [
    ("POST", "/v1/qmatrices", Q),
    ("PUT", "/v1/qmatrices/mine", Q),
    ("DELETE", "/v1/qmatrices/mine", None),
    ("POST", "/v1/qmatrix-extractions", {"id": "x", "items": [{"id": "i", "text": "add fractions"}]}),
    ("POST", "/v1/calibrate", {"dataset": {"name": "synthetic", "max_students": 20}}),
    ("GET", "/v1/calibrate/some-job", None),
    ("GET", "/v1/admin/keys", None),
    ("POST", "/v1/admin/keys", {"role": "client"}),
    ("DELETE", "/v1/admin/keys/abcdefabcdef", None),
]
CLIENT_ROUTES = [
    ("POST", "/v1/diagnose", DIAGNOSE),
    ("POST", "/v1/diagnose/batch", {"qmatrix_id": "example-prealgebra", "epsilon": 1.0,
                                    "students": [{"student_id": "s", "responses": DIAGNOSE["responses"]}]}),
    ("GET", "/v1/qmatrices", None),
    ("GET", "/v1/qmatrices/example-prealgebra", None),
    ("GET", "/v1/calibrations", None),
    ("GET", "/v1/privacy/students/s1", None),
    ("POST", "/v1/privacy/lookup", {"student_id": "s1"}),
    ("GET", "/v1/entities", None),
]


@pytest.fixture
def app_client(tmp_path: Path, fakes: dict[str, FakeEntity]) -> TestClient:
    with make_client(tmp_path, fakes) as client:
        client.headers.pop("Authorization")  # no default key: each test says which key it sends
        yield client


def _call(client: TestClient, method: str, path: str, body: object, headers: dict[str, str]) -> int:
    return client.request(method, path, json=body, headers=headers).status_code


@pytest.mark.parametrize("method,path,body", ADMIN_ROUTES + CLIENT_ROUTES + [("POST", "/v1/cohort-report", {})])
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer ", "Bearer nonsense", "Basic dXNlcjpwYXNz", "Bearer fcd_000000000000_" + "A" * 43, "fcd_x"],
)
def test_no_or_bad_key_is_401_with_a_bearer_challenge(
    app_client: TestClient, method: str, path: str, body: object, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    r = app_client.request(method, path, json=body, headers=headers)
    assert r.status_code == 401, (method, path, r.text)
    assert r.headers["www-authenticate"] == "Bearer"


def test_health_needs_no_key(app_client: TestClient) -> None:
    assert app_client.get("/healthz").status_code == 200


def test_a_key_for_another_key_id_with_a_valid_shape_fails(app_client: TestClient) -> None:
    real = bearer(app_client, tenant="a")["Authorization"]
    forged = real[:-1] + ("A" if real[-1] != "A" else "B")  # same key id, one character of the secret changed
    assert _call(app_client, "GET", "/v1/qmatrices", None, {"Authorization": forged}) == 401
    assert _call(app_client, "GET", "/v1/qmatrices", None, {"Authorization": real}) == 200


@pytest.mark.parametrize("method,path,body", ADMIN_ROUTES)
def test_a_client_key_on_an_admin_route_is_403(app_client: TestClient, method: str, path: str, body: object) -> None:
    assert _call(app_client, method, path, body, bearer(app_client, tenant="a", role="client")) == 403


@pytest.mark.parametrize("method,path,body", CLIENT_ROUTES)
def test_a_client_key_reaches_every_client_route(app_client: TestClient, method: str, path: str, body: object) -> None:
    assert _call(app_client, method, path, body, bearer(app_client, tenant="a", role="client")) == 200


def test_entity_endpoints_are_shown_to_admins_only(tmp_path: Path) -> None:
    entity = {"name": "remote", "kind": "openai_compatible", "base_url": "http://10.1.2.3:9000/v1", "model": "m"}
    settings = Settings(state_dir=tmp_path, entities=[entity], preload_models=False, default_calibration=False)  # type: ignore[list-item]
    app = create_app(settings)
    with TestClient(app) as client:
        as_client = client.get("/v1/entities", headers=auth_headers(app, tenant="a", role="client")).json()
        as_admin = client.get("/v1/entities", headers=auth_headers(app, tenant="a", role="admin")).json()
    assert as_client["data"][0]["base_url"] is None
    assert as_admin["data"][0]["base_url"] == "http://10.1.2.3:9000/v1"


def test_revocation_takes_effect_on_the_next_request(app_client: TestClient) -> None:
    admin = bearer(app_client, tenant="a", role="admin")
    created = app_client.post("/v1/admin/keys", json={"role": "client"}, headers=admin)
    assert created.status_code == 201
    new = created.json()
    assert new["tenant"] == "a" and new["api_key"].startswith("fcd_")
    key = {"Authorization": f"Bearer {new['api_key']}"}
    assert _call(app_client, "GET", "/v1/qmatrices", None, key) == 200
    listed = app_client.get("/v1/admin/keys", headers=admin).json()
    assert new["key_id"] in {k["key_id"] for k in listed["data"]}
    assert "api_key" not in json.dumps(listed) and new["api_key"] not in json.dumps(listed)
    assert app_client.delete(f"/v1/admin/keys/{new['key_id']}", headers=admin).status_code == 204
    assert _call(app_client, "GET", "/v1/qmatrices", None, key) == 401


def test_an_admin_manages_only_its_own_tenants_keys(app_client: TestClient) -> None:
    admin_a = bearer(app_client, tenant="a", role="admin")
    b_key = app_client.app.state.gateway.keys.create(tenant="b", role="client")  # type: ignore[attr-defined]
    assert app_client.post("/v1/admin/keys", json={"tenant": "b"}, headers=admin_a).status_code == 403
    assert app_client.delete(f"/v1/admin/keys/{b_key.key_id}", headers=admin_a).status_code == 404
    assert b_key.key_id not in {k["key_id"] for k in app_client.get("/v1/admin/keys", headers=admin_a).json()["data"]}
    assert _call(app_client, "GET", "/v1/qmatrices", None, {"Authorization": f"Bearer {b_key.api_key}"}) == 200


def test_an_expired_key_is_401(tmp_path: Path) -> None:
    now = [1_000_000.0]
    store = KeyStore(Database(f"sqlite:///{tmp_path / 'k.db'}").sessions, clock=lambda: now[0])
    key = store.create(tenant="a", role="client", expires_days=1)
    assert store.authenticate(key.api_key) is not None
    now[0] += 86400 + 1
    assert store.authenticate(key.api_key) is None


def test_keys_are_stored_only_as_hashes(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    key = KeyStore(db.sessions).create(tenant="a", role="admin")
    secret = key.api_key.split("_", 2)[2]
    assert len(secret) >= 43  # 32 bytes, URL-safe base64
    raw = (tmp_path / "k.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("k.db-*"))
    assert key.api_key.encode() not in raw and secret.encode() not in raw


def test_first_start_creates_the_dev_admin_key_once(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, entities=[], preload_models=False, default_calibration=False)
    with TestClient(create_app(settings, entities={"a": FakeEntity("a")})) as client:
        path = tmp_path / "dev-api-key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        key = path.read_text().strip()
        assert client.post("/v1/qmatrices", json=Q, headers={"Authorization": f"Bearer {key}"}).status_code == 201
    with TestClient(create_app(settings, entities={"a": FakeEntity("a")})):
        assert path.read_text().strip() == key  # not replaced at the next start
    assert [k.tenant for k in KeyStore(Database(settings.db_url).sessions).list()] == ["dev"]


def test_auth_can_be_disabled_only_on_loopback(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="loopback"):
        Settings(state_dir=tmp_path, auth="disabled", host="0.0.0.0")
    settings = Settings(state_dir=tmp_path, auth="disabled", host="::1", entities=[], preload_models=False,
                        default_calibration=False)
    with caplog.at_level(logging.WARNING), TestClient(create_app(settings, entities={"a": FakeEntity("a")})) as client:
        assert client.get("/v1/qmatrices").status_code == 200
    assert "AUTHENTICATION IS DISABLED" in caplog.text
    assert not (tmp_path / "dev-api-key").exists()


def test_serve_refuses_disabled_auth_on_a_public_bind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCD_AUTH", "disabled")
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "loopback" in result.output


def test_keys_cli_create_list_revoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    created = runner.invoke(cli, ["keys", "create", "--tenant", "school-a", "--role", "admin", "--json"])
    assert created.exit_code == 0, created.output
    new = json.loads(created.output)
    assert set(new) == {"tenant", "role", "key_id", "api_key"} and new["role"] == "admin"
    listed = runner.invoke(cli, ["keys", "list"])
    assert new["key_id"] in listed.output and new["api_key"] not in listed.output
    store = KeyStore(Database(f"sqlite:///{tmp_path / 'fedcd.db'}").sessions)
    assert store.authenticate(new["api_key"]) is not None
    assert runner.invoke(cli, ["keys", "revoke", new["key_id"]]).exit_code == 0
    assert store.authenticate(new["api_key"]) is None
    assert runner.invoke(cli, ["keys", "revoke", "nope"]).exit_code == 1
    assert runner.invoke(cli, ["keys", "create", "--tenant", "_shared"]).exit_code == 2  # reserved name


def test_bodies_over_the_limit_are_413(tmp_path: Path, fakes: dict[str, FakeEntity]) -> None:
    with make_client(tmp_path, fakes, max_body_bytes=2048, max_qmatrix_body_bytes=4096) as client:
        big = {**DIAGNOSE, "student_id": "x" * 200, "responses": DIAGNOSE["responses"] * 40}
        r = client.post("/v1/diagnose", json=big)
        assert r.status_code == 413 and "2048" in r.json()["detail"]
        # streamed without a Content-Length
        r = client.post("/v1/diagnose", content=iter([b"{" + b" " * 3000, b"}"]), headers={"content-type": "application/json"})
        assert r.status_code == 413
        csv = "item_id,text,A\n" + "".join(f"i{n},,1\n" for n in range(300))
        assert client.post("/v1/qmatrices?id=q", content=csv, headers={"content-type": "text/csv"}).status_code == 201
        assert client.post("/v1/qmatrices?id=r", content=csv * 2, headers={"content-type": "text/csv"}).status_code == 413

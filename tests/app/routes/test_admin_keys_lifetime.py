"""A new API key never outlives the key that creates it (app.routes.admin_keys.lifetime_within), through the API and
the console: asked for a later expiry it is refused (422 naming expires_days); asked for none, it expires with its
creator. A creator without expiry caps nothing."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.app.console.test_console import csrf, sign_in
from tests.conftest import make_client
from tests.factories import FakeEntity

ENTITIES = {"alpha": FakeEntity("alpha", 0.4)}


def _short_admin(client: TestClient, days: float = 0.01) -> tuple[dict[str, str], float]:
    short = client.app.state.gateway.keys.create(tenant="t", role="admin", expires_days=days)  # type: ignore[attr-defined]
    assert short.expires_at is not None
    return {"Authorization": f"Bearer {short.api_key}"}, short.expires_at


def test_a_short_lived_admin_key_cannot_mint_a_longer_lived_one(tmp_path: Path) -> None:
    with make_client(tmp_path, ENTITIES) as client:
        headers, until = _short_admin(client)
        refused = client.post("/v1/admin/keys", headers=headers, json={"role": "admin", "expires_days": 30})
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "expires_days"]
        assert "may not outlive" in refused.json()["detail"][0]["msg"]
        # No expiry asked: the new key expires with its creator (the same instant, give or take the request)
        minted = client.post("/v1/admin/keys", headers=headers, json={"role": "admin"})
        assert minted.status_code == 201 and minted.json()["expires_at"] is not None
        assert abs(minted.json()["expires_at"] - until) < 60
        shorter = client.post("/v1/admin/keys", headers=headers, json={"role": "client", "expires_days": 0.001})
        assert shorter.status_code == 201 and shorter.json()["expires_at"] < until


def test_a_key_without_expiry_may_create_any(tmp_path: Path) -> None:
    with make_client(tmp_path, ENTITIES) as client:
        forever = client.post("/v1/admin/keys", json={"role": "admin"})
        assert forever.status_code == 201 and forever.json()["expires_at"] is None
        assert client.post("/v1/admin/keys", json={"role": "admin", "expires_days": 36500}).status_code == 201


def test_the_console_applies_the_same_cap(tmp_path: Path) -> None:
    with make_client(tmp_path, ENTITIES) as client:
        client.headers.pop("Authorization")
        short = client.app.state.gateway.keys.create(tenant="t", role="admin", expires_days=0.01)  # type: ignore[attr-defined]
        sign_in(client, key=short.api_key)
        r = client.post("/console/keys", data={"csrf": csrf(client), "role": "admin", "expires_days": "30"})
        assert r.status_code == 422 and "may not outlive" in r.text
        made = client.post("/console/keys", data={"csrf": csrf(client), "role": "admin", "expires_days": ""})
        assert made.status_code == 201
        keys = client.app.state.gateway.keys.list("t")  # type: ignore[attr-defined]
        assert len(keys) == 2 and all(k.expires_at is not None for k in keys)

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app import Settings, create_app
from providers import EntityRejected, EntitySpec
from tests.factories import FakeEntity


# Property tests draw the same examples on every run (a failure on CI reproduces here); a new
# counterexample comes from widening a strategy, not from luck.
hypothesis_settings.register_profile("fedcd", derandomize=True, deadline=None)
hypothesis_settings.load_profile("fedcd")


def make_client(
    tmp_path: Path, entities: dict[str, FakeEntity], *, tenant: str = "default", role: str = "admin",
    specs: list[EntitySpec] | None = None, **settings: object,
) -> TestClient:
    """A test client authenticated with a fresh key of ``tenant`` (admin unless ``role``). ``specs``: declarations
    of (some of) the fakes, for what the federation reads from them (tiers, deadlines); the fakes answer. The fakes
    are the whole federation, so ``local-fed`` (kept with declared entities) is off unless ``local_fed`` is passed."""
    # Most API tests exercise diagnosis, not the budget: unnoised answers allowed, a generous cap.
    values: dict[str, object] = {
        "default_calibration": False, "allow_unnoised": True, "privacy_cap_epsilon": 1e6,
        "calibration_release_epsilon": None, "local_fed": False, **settings,
    }
    config = Settings(state_dir=tmp_path, entities=specs or [], preload_models=False, noise_seed=1, **values)  # type: ignore[arg-type]
    app = create_app(config, entities=entities)
    return TestClient(app, headers=auth_headers(app, tenant=tenant, role=role) if config.auth == "enabled" else {})


def auth_headers(app: FastAPI, *, tenant: str = "default", role: str = "admin") -> dict[str, str]:
    """Headers carrying a new key of ``tenant`` on ``app``'s server."""
    key = app.state.gateway.keys.create(tenant=tenant, role=role)
    return {"Authorization": f"Bearer {key.api_key}"}


def bearer(client: TestClient, *, tenant: str, role: str = "client") -> dict[str, str]:
    """Headers with a new key of ``tenant`` on the client's server."""
    return auth_headers(client.app, tenant=tenant, role=role)  # type: ignore[arg-type]


@pytest.fixture
def fakes() -> dict[str, FakeEntity]:
    return {"alpha": FakeEntity("alpha", 0.2), "beta": FakeEntity("beta", 0.6)}


@pytest.fixture
def client(tmp_path: Path, fakes: dict[str, FakeEntity]) -> Iterator[TestClient]:
    with make_client(tmp_path, fakes) as c:
        yield c


@pytest.fixture
def failing_client(tmp_path: Path) -> Iterator[TestClient]:
    entities = {
        "alpha": FakeEntity("alpha", error=EntityRejected("HTTP 401: invalid key")),
        "beta": FakeEntity("beta", error=EntityRejected("HTTP 404: model not found")),
    }
    with make_client(tmp_path, entities) as c:
        yield c


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test (tests/postgres.py)."""
    from tests.postgres import fresh_postgres

    with fresh_postgres() as url:
        yield url


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A Redis key prefix for this test alone, its keys deleted after (tests/shared_redis.py)."""
    from tests.shared_redis import fresh_prefix

    with fresh_prefix() as prefix:
        yield prefix


@pytest.fixture(params=["sqlite", "postgresql"])
def both_engines(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test once on SQLite (the state dir's file) and once on a fresh PostgreSQL database.

    Settings read FEDCD_DATABASE_URL from the environment, so every app the test creates uses it.
    """
    if request.param == "sqlite":
        yield "sqlite"
        return
    from tests.postgres import fresh_postgres

    with fresh_postgres() as url:
        monkeypatch.setenv("FEDCD_DATABASE_URL", url)
        yield url

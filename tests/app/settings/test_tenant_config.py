"""The per-worker cache of a tenant's configuration: one statement per request while nothing changes, and a
write in another worker (another cache on the same database) applies to the very next request — on SQLite
and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import event

from app.db import SHARED_TENANT, Database
from app.schemas import PrivacyPolicy
from app.settings import Settings
from app.storage import CalibrationStore, PolicyStore, QMatrixStore, TenantConfigCache
from app.storage.generations import read_generations
from app.storage.tenant_config import NotInMemory
from calibration import BiasParams, CalibrationRecord
from qmatrix import QMatrix


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'fedcd.db'}")
        yield db
        db.close()
        return
    from tests.postgres import fresh_postgres

    with fresh_postgres() as url:
        db = Database(url)
        yield db
        db.close()


def _worker(db: Database, tmp_path: Path) -> tuple[TenantConfigCache, QMatrixStore, CalibrationStore, PolicyStore]:
    """What one gateway worker holds: its own stores and cache over the shared database."""
    settings = Settings(state_dir=tmp_path)
    qmatrices, calibrations = QMatrixStore(db.sessions), CalibrationStore(db.sessions)
    policies = PolicyStore(db.sessions, settings)
    return TenantConfigCache(qmatrices=qmatrices, calibrations=calibrations, policies=policies), qmatrices, calibrations, policies


def _q(n_items: int) -> QMatrix:
    return QMatrix.from_matrix(id="algebra", concepts=["a", "b"], item_ids=[f"i{k}" for k in range(n_items)],
                               matrix=[[1, k % 2] for k in range(n_items)])


def _record(rid: str, version: int) -> CalibrationRecord:
    return CalibrationRecord(id=rid, qmatrix_id="algebra", params=BiasParams(alpha=0.5), version=version)


@contextmanager
def _statements(db: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


def _read(cache: TenantConfigCache, tenant: str) -> tuple[int | None, str | None, float]:
    """What a diagnosis reads: the current Q-matrix version, its newest calibration, the policy's cap."""
    config = cache.current(tenant)
    stored = config.qmatrix("algebra")
    calibration = config.latest_calibration("algebra", stored.version) if stored is not None else None
    return (stored.version if stored else None, calibration.record.id if calibration else None,
            config.policy().cap_epsilon)


def test_an_unchanged_configuration_costs_one_statement(database: Database, tmp_path: Path) -> None:
    cache, qmatrices, calibrations, _ = _worker(database, tmp_path)
    qmatrices.create("t1", _q(4))
    calibrations.save(_record("c1", 1), tenant="t1", qmatrix_version=1)
    assert _read(cache, "t1")[:2] == (1, "c1")  # fills the memo
    with _statements(database) as seen:
        assert _read(cache, "t1")[:2] == (1, "c1")
    assert len(seen) == 1 and "config_generations" in seen[0], seen


def test_a_write_in_another_worker_applies_to_the_next_request(database: Database, tmp_path: Path) -> None:
    reader, *_ = _worker(database, tmp_path)
    _, qmatrices, calibrations, policies = _worker(database, tmp_path)  # the other worker writes
    qmatrices.create("t1", _q(4))
    default_cap = _read(reader, "t1")[2]
    assert _read(reader, "t1")[:2] == (1, None)

    calibrations.save(_record("c1", 1), tenant="t1", qmatrix_version=1)
    assert _read(reader, "t1")[:2] == (1, "c1")

    qmatrices.replace("t1", _q(6))  # a new version: the old calibration no longer applies
    assert _read(reader, "t1")[:2] == (2, None)

    policy = policies.current("t1")
    changed = PrivacyPolicy(**{**policy.model_dump(include=set(PrivacyPolicy.model_fields)),
                               "cap_epsilon": default_cap / 2})
    policies.put("t1", changed, created_by="test")
    assert _read(reader, "t1")[2] == default_cap / 2

    qmatrices.delete("t1", "algebra")
    assert _read(reader, "t1")[0] is None


def test_shared_rows_invalidate_every_tenant_and_tenants_stay_apart(database: Database, tmp_path: Path) -> None:
    reader, *_ = _worker(database, tmp_path)
    _, qmatrices, calibrations, _ = _worker(database, tmp_path)
    for tenant in ("t1", "t2"):
        qmatrices.create(tenant, _q(4))
    calibrations.save(_record("mine", 1), tenant="t1", qmatrix_version=1)
    assert _read(reader, "t1")[1] == "mine" and _read(reader, "t2")[1] is None

    calibrations.save(_record("shared", 1), tenant=SHARED_TENANT, qmatrix_version=1)
    assert _read(reader, "t1")[1] == "mine"  # the tenant's own record comes first
    assert _read(reader, "t2")[1] == "shared"  # seen at once although t2 itself never changed


def test_the_cache_holds_at_most_max_tenants(database: Database, tmp_path: Path) -> None:
    _, qmatrices, calibrations, policies = _worker(database, tmp_path)
    cache = TenantConfigCache(qmatrices=qmatrices, calibrations=calibrations, policies=policies, max_tenants=2)
    for tenant in ("t1", "t2", "t3"):
        cache.current(tenant).policy()
    with _statements(database) as seen:
        cache.current("t1").policy()  # evicted: its policy is read again
    assert len(seen) == 2, seen


def test_a_memory_only_configuration_queries_nothing(database: Database, tmp_path: Path) -> None:
    """What the event loop may read (``TenantConfig.from_memory``): a miss is ``NotInMemory``, never a statement."""
    cache, qmatrices, calibrations, _ = _worker(database, tmp_path)
    qmatrices.create("t1", _q(4))
    calibrations.save(_record("c1", 1), tenant="t1", qmatrix_version=1)
    with database.engine.connect() as conn:
        generations = read_generations(conn, "t1")  # as the request's key lookup reads them
    with _statements(database) as seen:
        remembered = cache.current("t1", generations).from_memory()
        for read in (lambda: remembered.qmatrix("algebra"), remembered.policy, lambda: remembered.calibration("c1")):
            with pytest.raises(NotInMemory):
                read()
    assert seen == []
    assert _read(cache, "t1")[:2] == (1, "c1")  # fills the memo
    with _statements(database) as seen:
        stored = remembered.qmatrix("algebra")
        assert stored is not None and stored.version == 1
        latest = remembered.latest_calibration("algebra", stored.version)
        assert latest is not None and latest.record.id == "c1"
        remembered.policy()
    assert seen == []

"""Schema migrations: a fresh database reaches head on both engines, the models and the migrations agree,
old and foreign schemas are refused with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from app.cli import cli
from app.db import Base, Database
from app.migrate import SchemaOutdated, head_revision, schema_revision
from privacy.ledger import LEDGER_METADATA


def _assert_models_match_migrations(url: str) -> None:
    db = Database(url)
    try:
        assert schema_revision(db.engine) == head_revision()
        with db.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), [Base.metadata, LEDGER_METADATA])
        assert diff == [], f"the models changed without a migration: {diff}"
    finally:
        db.close()


def test_sqlite_reaches_head_and_matches_the_models(tmp_path: Path) -> None:
    _assert_models_match_migrations(f"sqlite:///{tmp_path / 'fedcd.db'}")


def test_postgres_reaches_head_and_matches_the_models(postgres_url: str) -> None:
    _assert_models_match_migrations(postgres_url)


def test_upgrading_twice_is_harmless_and_the_cli_says_where_it_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    first = runner.invoke(cli, ["db", "upgrade"])
    assert first.exit_code == 0 and f"(empty) -> {head_revision()}" in first.output
    again = runner.invoke(cli, ["db", "upgrade"])
    assert again.exit_code == 0 and f"{head_revision()} -> {head_revision()}" in again.output
    assert f"database: {head_revision()}" in runner.invoke(cli, ["db", "current"]).output


def test_a_server_that_must_not_migrate_refuses_an_old_schema(tmp_path: Path) -> None:
    with pytest.raises(SchemaOutdated, match="fedcd db upgrade"):
        Database(f"sqlite:///{tmp_path / 'fedcd.db'}", upgrade=False)


def test_a_pre_migration_database_is_refused_not_damaged(tmp_path: Path) -> None:
    path = tmp_path / "fedcd.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # fedcd 0.1's jobs table, no migration history
        conn.execute(text("CREATE TABLE jobs (id VARCHAR(64) PRIMARY KEY, kind VARCHAR(32), status VARCHAR(16))"))
        conn.execute(text("INSERT INTO jobs VALUES ('j1', 'calibrate', 'succeeded')"))
    with pytest.raises(SchemaOutdated, match="before migrations"):
        Database(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar() == 1
    engine.dispose()

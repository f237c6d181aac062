"""Schema migrations: a fresh database reaches head on both engines, the models and the migrations agree,
old and foreign schemas are refused with a clear message, and migration 0004 leaves no raw student id behind in
the database's files (issue 30: it rewrites ids in place; the old bytes survive in free pages until VACUUM)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import Pool
from typer.testing import CliRunner

from app.cli import cli
from app.db import Base, Database
from app.migrate import SchemaOutdated, head_revision, schema_revision, upgrade
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


RAW_ID = "kid-Vq9Rt-7730"  # distinctive: a byte scan cannot find it by accident
SECRET = b"s" * 32


def _store_raw_ids(url: str, students: int = 50) -> None:
    """A database as fedcd 0.x left it: at revision 0003, students' raw ids in the ledger, diagnoses and jobs."""
    engine = create_engine(url)
    try:
        if engine.dialect.name == "sqlite":
            with engine.connect() as conn:  # the server's journal mode (app.db), kept in the file
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        upgrade(engine, "0003_usage")
        ids = [RAW_ID] + [f"{RAW_ID}-{n:03d}" for n in range(students - 1)]
        with engine.begin() as conn:
            for n, student in enumerate(ids):
                conn.execute(text("INSERT INTO privacy_students VALUES ('t', :s, '{}', 2, 0)"), {"s": student})
                conn.execute(text(
                    "INSERT INTO privacy_charges (id, tenant, student_id, fingerprint, epsilon, delta, mechanism, "
                    "releases, status, answer_json, created_at) VALUES (:id, 't', :s, 'f', 1, 0, 'piecewise', 1, "
                    "'released', :a, 0)"), {"id": f"c{n}", "s": student, "a": json.dumps({"student_id": student})})
            request = json.dumps({"qmatrix_id": "q", "records": [{"student_id": s, "responses": []} for s in ids]})
            conn.execute(text("INSERT INTO jobs (id, tenant, kind, status, request_json, total, done, "
                              "failed_entities_json, metrics_json, notes_json, resumed, created_at, updated_at) VALUES "
                              "('j', 't', 'calibrate', 'succeeded', :r, 1, 1, '{}', '{}', '[]', 0, '', '')"),
                         {"r": request})
    finally:
        engine.dispose()


@pytest.fixture
def no_secure_delete() -> Iterator[None]:
    """SQLite as built upstream (and by most platforms): deleted content is left in place, not zeroed. Debian's
    build zeroes it (SQLITE_SECURE_DELETE), which would hide the old bytes from the test."""

    def off(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute("PRAGMA secure_delete=OFF")

    event.listen(Pool, "connect", off)
    try:
        yield
    finally:
        event.remove(Pool, "connect", off)


@pytest.mark.usefixtures("no_secure_delete")
def test_migration_0004_leaves_no_raw_id_in_the_sqlite_files(tmp_path: Path) -> None:
    """Free pages, the WAL, old index cells: after the upgrade not one byte of a raw id is left in any file."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    _store_raw_ids(url)
    assert any(RAW_ID.encode() in p.read_bytes() for p in tmp_path.iterdir() if p.is_file())  # the scan can fail
    engine = create_engine(url)
    try:
        upgrade(engine, server_secret=SECRET)
        assert schema_revision(engine) == head_revision()
        with engine.connect() as conn:  # converted, not dropped
            assert conn.execute(text("SELECT count(*) FROM privacy_students")).scalar() == 50
        # Scanned while a connection is still open, as a running server's: its WAL file is not removed on close.
        holding = [p.name for p in tmp_path.iterdir() if p.is_file() and RAW_ID.encode() in p.read_bytes()]
        assert holding == [], f"raw student ids left in {holding}"
    finally:
        engine.dispose()


def test_migration_0004_rewrites_the_converted_postgres_tables(postgres_url: str) -> None:
    """PostgreSQL keeps the old row versions (dead tuples, old index entries) until a VACUUM; VACUUM FULL writes
    each converted table anew, into a new file (a new relfilenode), leaving none of them behind."""
    _store_raw_ids(postgres_url, students=5)
    engine = create_engine(postgres_url)
    tables = ("privacy_students", "privacy_charges", "jobs")

    def files() -> dict[str, int]:
        with engine.connect() as conn:
            return {t: conn.execute(text("SELECT pg_relation_filenode(:t)"), {"t": t}).scalar() for t in tables}

    try:
        before = files()
        upgrade(engine, server_secret=SECRET)
        after = files()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM privacy_students")).scalar() == 5
    finally:
        engine.dispose()
    assert all(after[t] != before[t] for t in tables), (before, after)


def test_the_cli_never_invents_a_secret_to_convert_stored_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fedcd db upgrade` pointed at a database whose server secret is elsewhere (another state folder, no
    FEDCD_SECRET_KEY) refuses: hashing the ids under a new secret would re-key every student, resetting budgets."""
    _store_raw_ids(f"sqlite:///{tmp_path / 'fedcd.db'}", students=3)
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("FEDCD_SECRET_KEY", raising=False)
    result = CliRunner().invoke(cli, ["db", "upgrade"])
    assert result.exit_code != 0
    assert result.exit_code == 2 and "needs the server's secret" in " ".join(result.output.split())
    assert not (tmp_path / "server-secret").exists()
    engine = create_engine(f"sqlite:///{tmp_path / 'fedcd.db'}")
    try:
        assert schema_revision(engine) == "0003_usage"
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM privacy_students WHERE student_id = :s"),
                                {"s": RAW_ID}).scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.usefixtures("no_secure_delete")
def test_migration_0005_drops_failed_jobs_error_text_that_may_quote_the_input(tmp_path: Path) -> None:
    # Prepare: a database at 0004 with failed jobs as the runner stored them before (type: message)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    engine = create_engine(url)
    try:
        upgrade(engine, "0004_student_data", server_secret=SECRET)
        errors = {
            "raw": f"ValidationError: 1 validation error for CalibrateRequest input_value='{RAW_ID}'",
            "budget": "BudgetExceeded: the privacy budget of 1 student is spent",
            "own": "JobFailed: no validation student got an answer from any entity (failures: {'a': 3})",
        }
        with engine.begin() as conn:
            for job_id, error in errors.items():
                conn.execute(text("INSERT INTO jobs (id, tenant, kind, status, request_json, total, done, "
                                  "failed_entities_json, metrics_json, notes_json, error, resumed, created_at, "
                                  "updated_at) VALUES (:id, 't', 'train', 'failed', '{}', 1, 0, '{}', '{}', '[]', :e, "
                                  "0, '', '')"), {"id": job_id, "e": error})

        # Execute
        upgrade(engine, server_secret=SECRET)

        # Assert: the quoting one keeps its type only; the code's own texts are kept; no byte of the id is left
        with engine.connect() as conn:
            stored = dict(conn.execute(text("SELECT id, error FROM jobs")).all())
        assert stored["raw"].startswith("ValidationError (its message is not kept") and RAW_ID not in stored["raw"]
        assert stored["budget"] == errors["budget"] and stored["own"] == errors["own"]
        holding = [p.name for p in tmp_path.iterdir() if p.is_file() and RAW_ID.encode() in p.read_bytes()]
        assert holding == [], f"the raw id is left in {holding}"
    finally:
        engine.dispose()


def test_migration_0005_keeps_what_it_or_the_runner_wrote_since() -> None:
    import importlib

    revision = importlib.import_module("app.migrations.versions.0005_job_errors")
    once = revision.kept("ValueError: student kid-1 has no responses")
    assert revision.kept(once) == once and once.startswith("ValueError (")
    modern = "ValidationError: invalid CalibrateRequest: records.0.student_id (string_too_long)"
    assert revision.kept(modern) == modern

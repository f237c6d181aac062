"""Schema migrations (Alembic): ``fedcd db upgrade``, and at server start when ``FEDCD_DB_UPGRADE_ON_START``.

Migrations run under the database-wide start-up lock (``app.locks``), so several workers starting
at once upgrade the schema exactly once. The revisions live in ``app/migrations/versions``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect

from app.locks import database_lock

__all__ = ["SchemaOutdated", "alembic_config", "head_revision", "schema_revision", "upgrade"]

log = logging.getLogger("fedcd.migrate")
_SCRIPTS = Path(__file__).with_name("migrations")


class SchemaOutdated(RuntimeError):
    """The database's schema is not the one this version of fedcd needs."""


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def schema_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head", *, server_secret: bytes | None = None) -> tuple[str | None, str]:
    """Bring the schema to ``revision``; returns (revision before, revision after).

    ``server_secret``: the one student ids are hashed under (``app.pseudonyms``), for revision 0004, which turns
    stored ids into keyed hashes; without it that revision reads ``FEDCD_SECRET_KEY`` or an existing
    ``<state_dir>/server-secret`` (and refuses, rather than invent a secret, when it has ids to convert and neither).
    When it converted ids, the tables it rewrote are vacuumed after the commit (:func:`_vacuum`).
    """
    url = engine.url.render_as_string(hide_password=False)
    with database_lock(engine, "migrate"):
        before = schema_revision(engine)
        if before is None and _has_tables(engine):
            raise SchemaOutdated(
                "this database has fedcd tables but no migration history: it was made by fedcd 0.1, before "
                "migrations. Move it aside (or point FEDCD_DATABASE_URL / FEDCD_STATE_DIR elsewhere) and start again"
            )
        migrator = create_engine(url)
        try:
            with migrator.begin() as conn:
                config = alembic_config(url)
                config.attributes["connection"] = conn
                config.attributes["server_secret"] = server_secret
                command.upgrade(config, revision)
            # After the commit (VACUUM refuses a transaction); still under the lock, before any worker serves.
            if tables := config.attributes.get("vacuum_tables"):
                _vacuum(migrator, tables)
        finally:
            migrator.dispose()
        return before, schema_revision(engine) or ""


def _vacuum(engine: Engine, tables: Sequence[str]) -> None:
    """Rewrite ``tables`` so no old row version survives in the database's files: revision 0004 rewrote student ids
    in place, and the raw ids stay in SQLite's free pages and PostgreSQL's dead tuples until a VACUUM.

    SQLite: ``VACUUM`` rebuilds the whole file (it has no per-table form), then a ``TRUNCATE`` checkpoint empties the
    WAL, which would otherwise keep the pages as they were before. PostgreSQL: ``VACUUM FULL`` writes each table and
    its indexes into new files — a plain VACUUM only marks dead tuples reusable and can leave their bytes in the
    pages. A failure does not undo the committed upgrade; it is logged with the command to run by hand."""
    sqlite = engine.dialect.name == "sqlite"
    statement = "VACUUM" if sqlite else "VACUUM FULL " + ", ".join(engine.dialect.identifier_preparer.quote(t)
                                                                  for t in tables)
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(statement)
            if sqlite:
                busy = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()[0]
                if busy:  # another connection reads: the WAL is emptied at its next checkpoint instead
                    log.warning("migration 0004: the WAL could not be emptied now (a reader holds it); old page "
                                "versions stay in it until the next checkpoint")
    except Exception as exc:  # noqa: BLE001 — the schema is migrated: say what is left to do, never fail start-up
        log.error("migration 0004 converted student ids but %r failed (%s): the raw ids may survive in the "
                  "database's free space until it is run by hand", statement, exc)
        return
    log.info("migration 0004: %s done (no raw student id left in free space)", statement)


def _has_tables(engine: Engine) -> bool:
    return any(t in inspect(engine).get_table_names() for t in ("jobs", "calibrations", "privacy_charges"))

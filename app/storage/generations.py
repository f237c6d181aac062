"""Raise and read a tenant's configuration generation (``app.db.ConfigGenerationRow``).

Writers call :func:`bump` inside the transaction that changes the configuration, so the new rows and the new
generation commit together: a reader that sees the new generation also sees the new rows.
"""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.db import SHARED_TENANT, ConfigGenerationRow

__all__ = ["bump", "read_generations"]

# Both engines fedcd runs on have the same upsert (INSERT … ON CONFLICT DO UPDATE); only the construct's module differs.
_INSERT = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def bump(session: Session, tenant: str) -> None:
    """Raise ``tenant``'s generation by one (creating it at 1) in the caller's transaction."""
    insert = _INSERT[session.get_bind().dialect.name]
    table = ConfigGenerationRow.__table__
    statement = insert(table).values(tenant=tenant, generation=1)
    session.execute(statement.on_conflict_do_update(
        index_elements=[table.c.tenant], set_={"generation": table.c.generation + 1}
    ))


_GENERATIONS = ConfigGenerationRow.__table__.c
# Built once: every request runs it (building a statement costs more than running it on SQLite).
_READ = select(_GENERATIONS.tenant, _GENERATIONS.generation).where(
    _GENERATIONS.tenant.in_([bindparam("tenant"), bindparam("shared")])
)


def read_generations(conn: Connection, tenant: str) -> tuple[int, int]:
    """(the tenant's generation, the shared rows' generation); 0 for one never written."""
    rows = dict(conn.execute(_READ, {"tenant": tenant, "shared": SHARED_TENANT}).all())
    return rows.get(tenant, 0), rows.get(SHARED_TENANT, 0)

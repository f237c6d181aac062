"""The ledger's hot-path statements, built once with bound parameters.

SQLAlchemy caches the compiled SQL of a statement, but building the statement object and deriving its cache key
can cost more than executing it on SQLite (the `sqlalchemy` share of `docs/results/gateway/profile.txt`): the
statements a charge runs on every request are therefore built here once and executed with parameters. Same SQL,
same engines.

:class:`Prepared` goes one step further for the statements every diagnosis runs (charge, release): compiled once
per dialect, executed on the DBAPI cursor of the ledger's own connection, inside the same transaction. The SQL is
what SQLAlchemy itself sends; what is skipped is its per-execution work (cache key, parameter and result
processing, none of which these column types need), about a third of a diagnosis's ledger CPU
(docs/results/gateway-issue36).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.sql.expression import Executable

from privacy.ledger.tables import CHARGED, REFUNDED, RELEASED, charges, students

__all__ = ["CHARGE_COLUMNS", "INSERT_CHARGE", "RELEASE", "REPEAT", "STUDENT", "WINDOW", "Prepared", "charge_path"]


class Prepared:
    """A statement compiled once per dialect and run on the connection's DBAPI cursor.

    ``column_keys``: for an INSERT, the columns given (the others take their defaults, as with SQLAlchemy).
    Parameters are those of the statement's ``bindparam``\\ s; literal values compiled into it keep theirs.
    """

    def __init__(self, statement: Executable, *, column_keys: Sequence[str] | None = None) -> None:
        self.statement, self.column_keys = statement, list(column_keys) if column_keys else None
        # dialect name -> (SQL, positional parameter order or None for named styles, the literal values)
        self._compiled: dict[str, tuple[str, list[str] | None, dict[str, Any]]] = {}

    def _for(self, conn: Connection) -> tuple[str, list[str] | None, dict[str, Any]]:
        dialect = conn.dialect
        key = f"{dialect.name}+{dialect.driver}"
        compiled = self._compiled.get(key)
        if compiled is None:
            c = self.statement.compile(dialect=dialect, column_keys=self.column_keys)
            given = {name: None for name, bind in c.binds.items() if bind.required}
            literals = {k: v for k, v in c.construct_params(given, _check=False).items() if k not in given}
            compiled = self._compiled[key] = (c.string, list(c.positiontup) if c.positiontup else None, literals)
        return compiled

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        """Run it with ``params``; returns the DBAPI cursor (the caller reads and closes it)."""
        sql, order, literals = self._for(conn)
        values = {**literals, **params}
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(sql, [values[name] for name in order] if order is not None else values)
        return cursor

    def first(self, conn: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The first row as a dict by column name (as ``.mappings().first()``), or None."""
        cursor = self.execute(conn, params)
        try:
            row = cursor.fetchone()
            return None if row is None else dict(zip([d[0] for d in cursor.description], row, strict=True))
        finally:
            cursor.close()

    def rowcount(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Run a write; the number of rows it changed."""
        cursor = self.execute(conn, params)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()

_same_student = (charges.c.tenant == bindparam("tenant"), charges.c.student_id == bindparam("student_id"))

# The newest unrefunded charge of this request's content inside the repeat window.
REPEAT = (
    select(charges)
    .where(*_same_student, charges.c.fingerprint == bindparam("fingerprint"), charges.c.status != REFUNDED,
           charges.c.created_at >= bindparam("since"))
    .order_by(charges.c.seq.desc())
    .limit(1)
)

STUDENT = select(students).where(students.c.tenant == bindparam("tenant"), students.c.student_id == bindparam("student_id"))

# The charges that count against a period's cap, oldest first.
WINDOW = (
    select(charges.c.epsilon, charges.c.delta, charges.c.mechanism, charges.c.sigma_over_sensitivity,
           charges.c.releases, charges.c.created_at)
    .where(*_same_student, charges.c.status != REFUNDED, charges.c.created_at >= bindparam("since"))
    .order_by(charges.c.created_at, charges.c.seq)
)

INSERT_CHARGE = insert(charges)

# Guarded: only a pending charge is released (a refunded or released one is left as it is; rowcount says which).
RELEASE = (
    update(charges)
    .where(charges.c.id == bindparam("charge_id"), charges.c.status == CHARGED)
    .values(status=RELEASED, answer_json=bindparam("answer"), settled_at=bindparam("now"))
)


# Every charge row's columns (privacy.ledger.core.PrivacyLedger.charge gives them all; seq is the database's).
CHARGE_COLUMNS = ("id", "tenant", "student_id", "fingerprint", "epsilon", "delta", "mechanism", "releases", "status",
                  "answer_json", "created_at", "settled_at", "owner", "source", "sigma_over_sensitivity")


class _ChargePath:
    """The statements every diagnosis's charge and release run, prepared (see :class:`Prepared`)."""

    repeat = Prepared(REPEAT)
    student = Prepared(STUDENT)
    insert_charge = Prepared(INSERT_CHARGE, column_keys=CHARGE_COLUMNS)
    release = Prepared(RELEASE)


charge_path = _ChargePath()

"""Where the ledger's transactions run, on SQLite or PostgreSQL.

Check-and-spend must be atomic per student, in one process or many:

* **SQLite**: every write transaction is ``BEGIN IMMEDIATE`` (the database's single write lock),
  WAL with ``synchronous=FULL`` (a committed charge survives ``kill -9`` and power loss). A lock
  per database file keeps one process's threads from spinning on SQLite's busy handler.
* **PostgreSQL**: ordinary transactions; the student's row is created if missing and then locked
  with ``SELECT … FOR UPDATE``, so concurrent charges of one student queue on that row (from any
  number of processes) while other students' charges run in parallel.

On SQLite the async face's write calls are group-committed (:mod:`privacy.ledger.writer`): :meth:`LedgerEngines.batch`
opens one write transaction for several calls, and each call's :meth:`LedgerEngines.write` is then a savepoint of it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.orm import sessionmaker

from privacy.ledger.statements import Prepared
from privacy.ledger.tables import LEDGER_METADATA, students
from privacy.ledger.writer import GroupCommitter

__all__ = ["LedgerEngines", "ledger_url"]

_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_CREATE_TABLES_LOCK = 0x6665646364_6c6564  # "fedcd" "led": an advisory lock key of its own
_PROCESS_LOCKS_GUARD = threading.Lock()


def ledger_url(source: Any) -> str:
    """A database URL from a URL, an SQLite file or folder (``<folder>/fedcd.db``), or an engine/sessionmaker."""
    if isinstance(source, str) and "://" in source:
        return source
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_dir():
            path = path / "fedcd.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path.resolve()}"
    bind = source.kw.get("bind") if isinstance(source, sessionmaker) else source
    if isinstance(bind, Engine):
        return bind.url.render_as_string(hide_password=False)
    raise ValueError(f"the privacy ledger needs a database URL, an SQLite path or an engine, got {source!r}")


def _sqlite_engine(url: str, *, immediate: bool, busy_timeout_s: float) -> Engine:
    engine = create_engine(url, connect_args={"timeout": busy_timeout_s})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # the driver opens no transactions; "begin" below does
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")  # a committed charge survives a crash
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:  # type: ignore[no-untyped-def]
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class LedgerEngines:
    """The engines of one ledger and the dialect-specific pieces of its transactions."""

    def __init__(self, url: str, *, busy_timeout_s: float = 30.0, create_tables: bool = True) -> None:
        self.url = url
        self.sqlite = make_url(url).get_backend_name() == "sqlite"
        if self.sqlite:
            database = make_url(url).database or ""
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            self.writer = _sqlite_engine(url, immediate=True, busy_timeout_s=busy_timeout_s)
            self.reader = _sqlite_engine(url, immediate=False, busy_timeout_s=busy_timeout_s)
            with _PROCESS_LOCKS_GUARD:
                self._lock: contextlib.AbstractContextManager[Any] = _PROCESS_LOCKS.setdefault(
                    str(Path(database).resolve()) if database else url, threading.Lock()
                )
        else:
            self.writer = self.reader = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
            self._lock = contextlib.nullcontext()
        # Built once (see privacy.ledger.statements): the saved state of a student, inserted or replaced.
        upsert = (sqlite_insert if self.sqlite else pg_insert)(students)
        self._upsert_student = Prepared(upsert.on_conflict_do_update(
            index_elements=[students.c.tenant, students.c.student_id],
            set_={name: upsert.excluded[name] for name in ("accountant_json", "queries", "updated_at")},
        ), column_keys=("tenant", "student_id", "accountant_json", "queries", "updated_at"))
        # SQLite's writes are serialised anyway: the async face queues them to one thread that commits them in
        # batches (group commit). PostgreSQL keeps a transaction per call (see privacy.ledger.writer).
        self.committer = GroupCommitter(self) if self.sqlite else None
        self._batch = threading.local()  # the writer thread's open batch (a Connection), if any
        if create_tables:
            with self._lock, self.writer.begin() as conn:
                if not self.sqlite:  # processes starting together must not race on CREATE TABLE
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _CREATE_TABLES_LOCK})
                LEDGER_METADATA.create_all(conn)

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction; inside this thread's :meth:`batch`, a savepoint of the batch's transaction instead
        (a call that raises rolls back only its own writes)."""
        batch: Connection | None = getattr(self._batch, "conn", None)
        if batch is not None:
            with _savepoint(batch):
                yield batch
            return
        with self._lock, self.writer.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def batch(self, conn: Connection) -> Iterator[None]:
        """One write transaction on ``conn`` (``BEGIN IMMEDIATE``, under the process lock) for several calls run on
        this thread: each call's :meth:`write` is a savepoint of it. The caller commits; whatever is not committed
        when the block is left is rolled back (a failing rollback invalidates ``conn``: the caller's error goes on)."""
        with self._lock:
            conn.begin()
            self._batch.conn = conn
            try:
                yield
            finally:
                self._batch.conn = None
                if conn.in_transaction():
                    try:
                        conn.rollback()
                    except Exception:
                        conn.invalidate()

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        with self.reader.begin() as conn:
            yield conn

    def lock_student(self, conn: Connection, tenant: str, student_id: str, now: float, empty_state: str) -> None:
        """Serialise this student's check-and-spend (SQLite: the write transaction already does)."""
        if self.sqlite:
            return
        conn.execute(
            pg_insert(students)
            .values(tenant=tenant, student_id=student_id, accountant_json=empty_state, queries=0, updated_at=now)
            .on_conflict_do_nothing(index_elements=[students.c.tenant, students.c.student_id])
        )
        conn.execute(
            select(students.c.tenant).where(students.c.tenant == tenant, students.c.student_id == student_id).with_for_update()
        )

    def upsert_student(self, conn: Connection, tenant: str, student_id: str, values: dict[str, Any]) -> None:
        """``values``: the student's ``accountant_json``, ``queries`` and ``updated_at``."""
        self._upsert_student.rowcount(conn, {"tenant": tenant, "student_id": student_id, **values})

    def dispose(self) -> None:
        if self.committer is not None:
            self.committer.close()  # runs what is queued, commits it, stops the thread
        self.writer.dispose()
        self.reader.dispose()


@contextlib.contextmanager
def _savepoint(conn: Connection) -> Iterator[None]:
    """A savepoint on the driver's connection, where the hot path's prepared statements run too
    (``privacy.ledger.statements``): no SQLAlchemy bookkeeping per call. When the block raises, its writes are
    rolled back and the error goes on; if the rollback itself fails, that database error goes on instead, so the
    writer rolls back the whole batch (nothing half-applied)."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute("SAVEPOINT ledger_call")
        try:
            yield
        except BaseException:
            cursor.execute("ROLLBACK TO ledger_call")
            cursor.execute("RELEASE ledger_call")
            raise
        cursor.execute("RELEASE ledger_call")
    finally:
        cursor.close()

"""The gateway's database: every piece of state that must survive a restart.

One SQLAlchemy engine on ``Settings.database_url`` (default: an SQLite file in the state
dir). Tables: tenants and their API keys, Q-matrices (versioned, per tenant), calibration
records, jobs and their per-student results. The privacy ledger keeps its own tables in the
same database (``privacy.ledger``).

Every tenant-owned row carries ``tenant``. Rows shared read-only by every tenant (the
built-in example Q-matrix's first-start calibration) belong to :data:`SHARED_TENANT`, a name
no API key can have.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import (
    Boolean,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    event,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

__all__ = [
    "SHARED_TENANT",
    "ApiKeyRow",
    "Base",
    "CalibrationRow",
    "Database",
    "JobItemRow",
    "JobRow",
    "QMatrixRow",
    "TenantRow",
    "utcnow",
]

SHARED_TENANT = "_shared"  # read-only rows every tenant sees; tenant names cannot start with "_"


def utcnow() -> str:
    return datetime.now(UTC).isoformat()


class Base(DeclarativeBase):
    pass


class TenantRow(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)


class ApiKeyRow(Base):
    """An API key, stored only as the SHA-256 of the whole key (the key itself is shown once)."""

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # client | admin
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_by: Mapped[str] = mapped_column(String(64), default="cli")  # key id of the creating admin, or "cli"


class QMatrixRow(Base):
    """One version of a tenant's Q-matrix. ``PUT`` adds a version; calibrations name the version they used."""

    __tablename__ = "qmatrices"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    body_json: Mapped[str] = mapped_column(Text)
    n_items: Mapped[int] = mapped_column(Integer)
    n_concepts: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)
    deleted_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), index=True)  # queued | running | succeeded | failed
    request_json: Mapped[str] = mapped_column(Text)
    total: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    failed_entities_json: Mapped[str] = mapped_column(Text, default="{}")
    calibration_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    metrics_json: Mapped[str] = mapped_column(Text, default="{}")
    notes_json: Mapped[str] = mapped_column(Text, default="[]")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    resumed: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[str] = mapped_column(String(40), default=utcnow)
    updated_at: Mapped[str] = mapped_column(String(40), default=utcnow, onupdate=utcnow)


class JobItemRow(Base):
    """One finished unit of a job (a student), so a resumed job skips it."""

    __tablename__ = "job_items"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_json: Mapped[str] = mapped_column(Text)


class CalibrationRow(Base):
    __tablename__ = "calibrations"
    __table_args__ = (Index("ix_calibrations_owner", "tenant", "qmatrix_id", "qmatrix_version"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    qmatrix_id: Mapped[str] = mapped_column(String(128))
    qmatrix_version: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)
    record_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(String(40), default=utcnow)


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the job writer
    cursor.execute("PRAGMA synchronous=FULL")  # a committed row survives a crash
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class Database:
    """The engine and session factory; tables are created on open."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_engine(url)
        if self.engine.url.get_backend_name() == "sqlite":
            database = self.engine.url.database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            event.listen(self.engine, "connect", _sqlite_pragmas)
        Base.metadata.create_all(self.engine)
        self.sessions: sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

"""The gateway's database: every piece of state that must survive a restart.

One SQLAlchemy engine on ``Settings.database_url`` (default: an SQLite file in the state
dir). Tables: tenants and their API keys, Q-matrices (versioned, per tenant), calibration
records, jobs and their per-student results, entity usage (tokens, cost, cache) per diagnosis. The privacy ledger keeps its own tables in the
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
    "ConfigGenerationRow",
    "Database",
    "JobEventRow",
    "JobItemRow",
    "JobRow",
    "PolicyRow",
    "QMatrixRow",
    "RetentionRow",
    "TenantRow",
    "UsageRow",
    "WorkerRow",
    "engine_of",
    "utcnow",
]

SHARED_TENANT = "_shared"  # read-only rows every tenant sees; tenant names cannot start with "_"


def engine_of(sessions: sessionmaker) -> Engine:
    """The engine a session factory is bound to, for hot-path reads on a plain connection (no ORM session)."""
    return sessions.kw["bind"]


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


class PolicyRow(Base):
    """One version of a tenant's privacy policy; the newest is in force. Every change is kept, with who and when."""

    __tablename__ = "privacy_policies"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    policy_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(String(40), default=utcnow)
    created_by: Mapped[str] = mapped_column(String(64))


class RetentionRow(Base):
    """A tenant's retention policy (README "Student data"); a tenant without one keeps the server's defaults."""

    __tablename__ = "retention_policies"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    policy_json: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[str] = mapped_column(String(40), default=utcnow)
    updated_by: Mapped[str] = mapped_column(String(64))


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
    # Which worker runs it, and when it last showed it is alive; a job whose worker stopped
    # heartbeating is claimed again by another worker (app.jobs.runner).
    claimed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[str] = mapped_column(String(40), default=utcnow)
    updated_at: Mapped[str] = mapped_column(String(40), default=utcnow, onupdate=utcnow)


class JobEventRow(Base):
    """A job's status history: queued, claimed by a worker, reclaimed after a dead worker, finished."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job", "job_id", "seq"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"))
    at: Mapped[str] = mapped_column(String(40), default=utcnow)
    status: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str | None] = mapped_column(String(64), nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")


class WorkerRow(Base):
    """A gateway worker process; alive while its heartbeat is fresh (jobs and pending charges of a dead one
    are taken over)."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float, index=True)


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


class ConfigGenerationRow(Base):
    """A counter per tenant, raised in the same transaction as every write to what a diagnosis reads of the
    tenant's configuration (Q-matrices, calibrations, privacy policy). A worker caches that configuration
    and re-reads it only when the counter moved — one indexed read per request instead of one per kind,
    and a write in any worker invalidates every worker's cache (``app.storage.tenant_config``)."""

    __tablename__ = "config_generations"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    generation: Mapped[int] = mapped_column(Integer)


class UsageRow(Base):
    """One entity's part in one diagnosis (single, batch, cohort or calibration student): what ``GET /v1/usage``
    sums. Written once per diagnosis, all entities in one statement; never updated."""

    __tablename__ = "usage"
    __table_args__ = (Index("ix_usage_tenant_at", "tenant", "at"), Index("ix_usage_job", "job_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(64))
    at: Mapped[float] = mapped_column(Float)  # epoch seconds
    source: Mapped[str] = mapped_column(String(16))  # diagnosis | cohort | calibration | extraction
    entity: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(16))  # ok | partial | failed (skipped entities are not recorded)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float] = mapped_column(Float)
    cache: Mapped[str | None] = mapped_column(String(8), nullable=True)  # hit | miss | null: no cache
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the calibration job, if any


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the job writer
    cursor.execute("PRAGMA synchronous=FULL")  # a committed row survives a crash
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class Database:
    """The engine and session factory of the state database.

    On open the schema is migrated to this version's head (``upgrade=True``, the default and what
    ``FEDCD_DB_UPGRADE_ON_START`` controls) or, when not, checked to be at it — a server never runs
    on a schema it does not know.
    """

    def __init__(self, url: str, *, upgrade: bool = True, server_secret: bytes | None = None) -> None:
        from app.migrate import SchemaOutdated, head_revision, schema_revision
        from app.migrate import upgrade as migrate

        self.url = url
        sqlite = url.startswith("sqlite")
        self.engine: Engine = create_engine(url) if sqlite else create_engine(url, pool_pre_ping=True)
        if sqlite:
            database = self.engine.url.database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            event.listen(self.engine, "connect", _sqlite_pragmas)
        if upgrade:  # the secret: for a migration that turns stored student ids into keyed hashes (0004)
            migrate(self.engine, server_secret=server_secret)
        elif schema_revision(self.engine) != head_revision():
            raise SchemaOutdated(
                f"the database schema is at {schema_revision(self.engine)!r}, this fedcd needs {head_revision()!r}: "
                "run `fedcd db upgrade`"
            )
        self.sessions: sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        # Liveness (worker and job heartbeats, job claims) on connections of its own: a pool busy with
        # requests must not make a live worker look dead. (An in-memory SQLite database is one connection.)
        in_memory = sqlite and self.engine.url.database in (None, "", ":memory:")
        self.control_engine: Engine = self.engine if in_memory else create_engine(
            url, pool_size=1, max_overflow=1, **({} if sqlite else {"pool_pre_ping": True})
        )
        if sqlite and not in_memory:
            event.listen(self.control_engine, "connect", _sqlite_pragmas)
        self.control_sessions: sessionmaker = sessionmaker(self.control_engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()
        if self.control_engine is not self.engine:
            self.control_engine.dispose()

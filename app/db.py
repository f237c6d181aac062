"""SQLite (via SQLAlchemy) for what must survive a restart: jobs, their per-student results,
and calibration records. The database lives at ``<state_dir>/fedcd.db``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, ForeignKey, Integer, String, Text, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

__all__ = ["Base", "CalibrationRow", "JobItemRow", "JobRow", "make_sessionmaker", "utcnow"]


def utcnow() -> str:
    return datetime.now(UTC).isoformat()


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
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

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    qmatrix_id: Mapped[str] = mapped_column(String(128), index=True)
    version: Mapped[int] = mapped_column(Integer)
    record_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(String(40), default=utcnow)


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the job writer
    cursor.execute("PRAGMA synchronous=FULL")  # a committed row survives a crash
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def make_sessionmaker(state_dir: Path) -> sessionmaker:
    state_dir.mkdir(parents=True, exist_ok=True)
    engine: Engine = create_engine(f"sqlite:///{state_dir / 'fedcd.db'}")
    event.listen(engine, "connect", _sqlite_pragmas)
    Base.metadata.create_all(engine)
    return sessionmaker(engine, expire_on_commit=False)

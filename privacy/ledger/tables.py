"""The ledger's two tables, in its own metadata (the app's migrations include it)."""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = ["CHARGED", "LEDGER_METADATA", "RELEASED", "REFUNDED", "ChargeRow", "StudentBudgetRow", "charges", "students"]

CHARGED, RELEASED, REFUNDED = "charged", "released", "refunded"
LEDGER_METADATA = MetaData()


class _Base(DeclarativeBase):
    metadata = LEDGER_METADATA


class StudentBudgetRow(_Base):
    """One (tenant, student): the lifetime accountant's state (a cache of its charges, checked on load)."""

    __tablename__ = "privacy_students"

    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    student_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    accountant_json: Mapped[str] = mapped_column(Text)  # Accountant.state_dict()
    queries: Mapped[int] = mapped_column(Integer)  # unrefunded charges
    updated_at: Mapped[float] = mapped_column(Float)


class ChargeRow(_Base):
    """Every charge ever made, refunded ones included: the ledger's record of truth.

    ``student_id`` is whatever the caller passes; the gateway passes a keyed hash, never the id (``app.pseudonyms``).
    ``answer_json`` and ``fingerprint`` may be erased (set null) without touching the spend (``privacy.ledger.records``).
    """

    __tablename__ = "privacy_charges"
    __table_args__ = (
        Index("ix_privacy_charges_student", "tenant", "student_id", "fingerprint"),
        Index("ix_privacy_charges_window", "tenant", "student_id", "created_at"),
        Index("ix_privacy_charges_pending", "status", "owner"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    tenant: Mapped[str] = mapped_column(String(128))
    student_id: Mapped[str] = mapped_column(String(256))
    fingerprint: Mapped[str | None] = mapped_column(String(256), nullable=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    mechanism: Mapped[str] = mapped_column(String(32))
    sigma_over_sensitivity: Mapped[float | None] = mapped_column(Float, nullable=True)
    releases: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    answer_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    settled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the ledger (process) that made it
    # What spent it (diagnosis | cohort | calibration): the audit trail of a student's export names it even after
    # the released answer is erased or expired.
    source: Mapped[str | None] = mapped_column(String(16), nullable=True)


students, charges = StudentBudgetRow.__table__, ChargeRow.__table__

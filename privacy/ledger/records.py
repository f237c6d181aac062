"""What the ledger keeps about a student, for an export, an erasure or a retention purge.

A charge is two things: the *spend* (ε, δ, mechanism, releases, status, when, what spent it) and what was
*released* (``answer_json``, kept for the repeat rule, and the request ``fingerprint``, a hash of the responses).
The spend is the cap's evidence: dropping it would let erasure — or retention — hand a student a fresh budget, so
it is never removed here. The released part is personal data with no role once the repeat window has passed:
erasure and retention set it null. A repeat of an erased diagnosis then finds nothing and is charged as a new
query (fresh noise, paid for) — never free, never averaged.

A group release (a cohort report, a calibration) stores no answer of the student's, only a label naming the release
(``"cohort-report"``, ``"calibration cal-…"``); callers name the ``source`` values whose answers are such labels
(``labels``): those are kept — they are the audit trail of what spent the ε — while the fingerprint goes anyway.

Each function takes a connection: the caller runs it in the ledger's write transaction (``PrivacyLedger.engines``)
so it is serialised with the student's charges (SQLite's write lock, PostgreSQL's row lock).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, and_, func, select, update

from privacy.ledger.tables import CHARGED, charges, students

__all__ = ["erase_released", "pending_charges", "purge_released", "student_charges", "student_row"]


def _student(tenant: str, student_id: str) -> Any:
    return and_(charges.c.tenant == tenant, charges.c.student_id == student_id)


def student_charges(conn: Connection, tenant: str, student_id: str) -> list[dict[str, Any]]:
    """Every charge of the student, refunded ones included, oldest first."""
    rows = conn.execute(select(charges).where(_student(tenant, student_id)).order_by(charges.c.seq)).mappings()
    return [dict(r) for r in rows]


def student_row(conn: Connection, tenant: str, student_id: str) -> dict[str, Any] | None:
    """The student's budget row (the lifetime accountant's saved state), if any charge was ever made."""
    row = conn.execute(
        select(students).where(students.c.tenant == tenant, students.c.student_id == student_id)
    ).mappings().first()
    return dict(row) if row is not None else None


def pending_charges(conn: Connection, tenant: str, student_id: str, *, since: float) -> int:
    """Charges made at or after ``since`` whose answer is still being computed (a diagnosis in flight)."""
    return conn.execute(
        select(func.count()).where(_student(tenant, student_id), charges.c.status == CHARGED,
                                   charges.c.created_at >= since)
    ).scalar_one()


def erase_released(conn: Connection, tenant: str, student_id: str, *, labels: Collection[str] = ()) -> int:
    """Drop every released answer (but ``labels``) and request fingerprint of the student, keeping the spend; the
    number of answers removed."""
    return _drop(conn, [_student(tenant, student_id)], labels)


def purge_released(
    conn: Connection, *, before: float, tenant: str | None = None, exclude: Collection[str] = (),
    labels: Collection[str] = (),
) -> int:
    """Drop the released answers (but ``labels``) and fingerprints of charges made before ``before`` — of ``tenant``,
    or of every tenant but ``exclude`` — keeping the spend; the number of answers removed. Pending charges are left
    alone (their answer is still to be stored; a stale one is refunded by ``settle_orphans``)."""
    where = [charges.c.created_at < before, charges.c.status != CHARGED]
    if tenant is not None:
        where.append(charges.c.tenant == tenant)
    if exclude:
        where.append(charges.c.tenant.not_in(sorted(exclude)))
    return _drop(conn, where, labels)


def _drop(conn: Connection, where: list[Any], labels: Collection[str]) -> int:
    data = charges.c.answer_json.is_not(None)
    if labels:  # a NULL source (a charge made without one) is not a label: its answer is dropped
        data = data & (charges.c.source.is_(None) | charges.c.source.not_in(sorted(labels)))
    removed = conn.execute(select(func.count()).where(*where, data)).scalar_one()
    conn.execute(update(charges).where(*where, data).values(answer_json=None))
    conn.execute(update(charges).where(*where, charges.c.fingerprint.is_not(None)).values(fingerprint=None))
    return int(removed)

"""The ledger's hot-path statements, built once with bound parameters.

SQLAlchemy caches the compiled SQL of a statement, but building the statement object and deriving its cache key
can cost more than executing it on SQLite (the `sqlalchemy` share of `docs/results/gateway/profile.txt`): the
statements a charge runs on every request are therefore built here once and executed with parameters. Same SQL,
same engines.
"""

from __future__ import annotations

from sqlalchemy import bindparam, insert, select, update

from privacy.ledger.tables import CHARGED, REFUNDED, RELEASED, charges, students

__all__ = ["INSERT_CHARGE", "RELEASE", "REPEAT", "STUDENT", "WINDOW"]

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

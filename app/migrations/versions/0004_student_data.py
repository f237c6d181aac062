"""Student data: stored student ids become keyed hashes; charges name their source; per-tenant retention.

* ``privacy_students.student_id``, ``privacy_charges.student_id``, the ``student_id`` inside each stored diagnosis
  (``privacy_charges.answer_json``) and in calibration jobs' inputs (``jobs.request_json`` records) are replaced,
  in place, by ``HMAC-SHA-256(HMAC-SHA-256(server secret, "student-id:" + tenant), student id)`` — the derivation
  of ``app.pseudonyms``, so the running server finds every budget where it left it.
* ``privacy_charges.source`` (diagnosis | cohort | calibration), filled from what each charge stored.
* ``retention_policies``: a tenant's retention policy (absent: the server's defaults).

The secret: the one ``fedcd db upgrade`` / the server passes (``FEDCD_SECRET_KEY``, else ``<state_dir>/server-
secret``); run the upgrade with the server's own settings. A database with ids to convert and no secret found is
refused (nothing is changed) rather than hashed under a secret the server would not use. Downgrading keeps the
hashes: an id cannot be recovered from its hash.

Rewritten in place, the old raw ids would survive in the database's files (SQLite's free pages and WAL, PostgreSQL's
dead tuples and index entries) until a VACUUM. This revision cannot run one (VACUUM refuses a transaction), so it
names the tables it converted in ``config.attributes["vacuum_tables"]`` and ``app.migrate.upgrade`` vacuums them
once the upgrade has committed.

Revision ID: 0004_student_data
Revises: 0003_usage
Create Date: 2027-01-10 09:00:00
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0004_student_data"
down_revision: str | None = "0003_usage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_students = sa.table("privacy_students", sa.column("tenant", sa.String), sa.column("student_id", sa.String))
_charges = sa.table(
    "privacy_charges", sa.column("seq", sa.Integer), sa.column("tenant", sa.String), sa.column("student_id", sa.String),
    sa.column("mechanism", sa.String), sa.column("answer_json", sa.Text), sa.column("source", sa.String),
)
_jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("tenant", sa.String), sa.column("kind", sa.String),
                 sa.column("request_json", sa.Text))


def upgrade() -> None:
    conn = op.get_bind()
    # The secret first, before any DDL: SQLite's DDL is not transactional here, so a refusal must change nothing.
    keys = _keys() if _has_ids(conn) else None  # a fresh database (or one that never stored a student): no secret
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=16), nullable=True))
    op.create_table(
        "retention_policies",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("policy_json", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.String(length=40), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("tenant"),
    )
    if keys is None:
        return
    # Read by app.migrate.upgrade after the commit: the raw ids rewritten below must not linger in free space.
    context.config.attributes["vacuum_tables"] = ("privacy_students", "privacy_charges", "jobs")
    for tenant, student_id in conn.execute(sa.select(_students.c.tenant, _students.c.student_id)).all():
        conn.execute(sa.update(_students).where(_students.c.tenant == tenant, _students.c.student_id == student_id)
                     .values(student_id=keys.key(tenant, student_id)))
    rows = conn.execute(sa.select(_charges.c.seq, _charges.c.tenant, _charges.c.student_id, _charges.c.mechanism,
                                  _charges.c.answer_json)).all()
    for seq, tenant, student_id, mechanism, answer in rows:
        key = keys.key(tenant, student_id)
        conn.execute(sa.update(_charges).where(_charges.c.seq == seq).values(
            student_id=key, answer_json=_rekeyed_answer(answer, key), source=_source(answer, mechanism),
        ))
    for job_id, tenant, request in conn.execute(
        sa.select(_jobs.c.id, _jobs.c.tenant, _jobs.c.request_json).where(_jobs.c.kind == "calibrate")
    ).all():
        rekeyed = _rekeyed_request(request, lambda sid, t=tenant: keys.key(t, sid))
        if rekeyed is not None:
            conn.execute(sa.update(_jobs).where(_jobs.c.id == job_id).values(request_json=rekeyed))


def downgrade() -> None:
    op.drop_table("retention_policies")
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.drop_column("source")


def _has_ids(conn: sa.Connection) -> bool:
    return any(conn.execute(sa.select(sa.literal(1)).select_from(table).limit(1)).first() is not None
               for table in (_students, _charges)) or conn.execute(
        sa.select(sa.literal(1)).where(_jobs.c.kind == "calibrate", _jobs.c.request_json.like('%"records": [%'))
        .limit(1)).first() is not None


def _keys():  # type: ignore[no-untyped-def]
    from app.pseudonyms import Pseudonyms

    secret = context.config.attributes.get("server_secret")
    if secret is None:
        from app.pseudonyms import existing_server_secret
        from app.settings import Settings

        secret = existing_server_secret(Settings())
    if secret is None:
        raise RuntimeError(
            "migration 0004 turns the stored student ids into keyed hashes and needs the server's secret: run "
            "`fedcd db upgrade` with the server's FEDCD_SECRET_KEY, or its FEDCD_STATE_DIR (which holds server-secret)"
        )
    return Pseudonyms(secret)


def _source(answer: str | None, mechanism: str) -> str | None:
    if answer is not None and answer.startswith("calibration "):
        return "calibration"
    if answer == "cohort-report" or mechanism == "central_laplace":
        return "cohort"
    if answer is not None and answer.startswith("{"):
        return "diagnosis"
    return None  # pending or refunded before anything was stored: unknown


def _rekeyed_answer(answer: str | None, key: str) -> str | None:
    if answer is None or not answer.startswith("{"):
        return answer
    data = json.loads(answer)
    if isinstance(data, dict) and "student_id" in data:
        data["student_id"] = key
    return json.dumps(data)


def _rekeyed_request(request: str, key_of) -> str | None:  # type: ignore[no-untyped-def]
    data = json.loads(request)
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        return None
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("student_id"), str):
            record["student_id"] = key_of(record["student_id"])
    return json.dumps(data)

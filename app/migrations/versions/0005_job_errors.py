"""Failed jobs' stored errors lose any text that may quote their input.

Before this revision a failed job stored ``"<exception type>: <its message>"``; a pydantic ``ValidationError``'s
message quotes the offending input, and once that was an upload's raw student ids (``app.jobs.failures`` says what
is kept since). No erasure or retention sweep rewrites ``jobs.error``, so this revision does, once: an error whose
type is one of those whose text the code writes from safe facts keeps it; any other keeps its type alone, with the
sentence ``app.jobs.failures.stored_error`` uses. Only ``failed`` jobs carry an error.

As revision 0004, it names the rewritten table in ``config.attributes["vacuum_tables"]``, so ``app.migrate.upgrade``
vacuums it after the commit (the old bytes would otherwise survive in free pages). Downgrading keeps the rewritten
text: the old one cannot be recovered.

Revision ID: 0005_job_errors
Revises: 0004_student_data
Create Date: 2027-02-01 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0005_job_errors"
down_revision: str | None = "0004_student_data"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The exception types whose text the code writes from safe facts (app.jobs.failures._SAFE_TEXT and JobFailed, by
# name: a migration must not import the application, which changes after it).
SAFE_TYPES = frozenset({"InvalidInput", "NotFound", "Conflict", "Unavailable", "GroupBudgetSpent", "DomainError",
                        "JobFailed", "LedgerError", "BudgetExceeded", "AnswerPending", "UnknownCharge",
                        "ChargeStateError", "TooFewAnswers"})
NOT_KEPT = "(its message is not kept: it may quote the job's input; the server log has where it failed)"

_jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("error", sa.Text))


def kept(error: str) -> str:
    """What of a stored error this revision keeps (idempotent: what it or the runner wrote since is kept)."""
    if error.endswith(NOT_KEPT) or error.startswith("ValidationError: invalid "):  # app.jobs.failures' own forms
        return error
    name, sep, _ = error.partition(":")
    name = name.strip()
    if sep and name in SAFE_TYPES:
        return error
    return f"{name if name.isidentifier() else 'Exception'} {NOT_KEPT}"


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_jobs.c.id, _jobs.c.error).where(_jobs.c.error.is_not(None))).all()
    changed = [(job_id, kept(error)) for job_id, error in rows if kept(error) != error]
    for job_id, error in changed:
        conn.execute(sa.update(_jobs).where(_jobs.c.id == job_id).values(error=error))
    if changed:  # beside what an earlier revision of the same upgrade asked to vacuum
        earlier = tuple(context.config.attributes.get("vacuum_tables", ()))
        context.config.attributes["vacuum_tables"] = earlier + (() if "jobs" in earlier else ("jobs",))


def downgrade() -> None:
    pass  # the rewritten text stays (module docstring)

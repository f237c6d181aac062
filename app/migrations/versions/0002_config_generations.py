"""Configuration generations: a counter per tenant raised by every write to its Q-matrices, calibrations and
privacy policy, so that workers cache the configuration and re-read it only after a change.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 06:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "config_generations",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant"),
    )


def downgrade() -> None:
    op.drop_table("config_generations")

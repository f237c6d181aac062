"""Initial schema: tenants and API keys, versioned Q-matrices, privacy policies, calibrations, jobs (claims,
events), workers, and the privacy ledger's students and charges.

Revision ID: 0001
Revises: 
Create Date: 2026-12-01 03:50:54.844773
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('calibrations',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('qmatrix_id', sa.String(length=128), nullable=False),
    sa.Column('qmatrix_version', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('record_json', sa.Text(), nullable=False),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.create_index('ix_calibrations_owner', ['tenant', 'qmatrix_id', 'qmatrix_version'], unique=False)

    op.create_table('jobs',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('request_json', sa.Text(), nullable=False),
    sa.Column('total', sa.Integer(), nullable=False),
    sa.Column('done', sa.Integer(), nullable=False),
    sa.Column('failed_entities_json', sa.Text(), nullable=False),
    sa.Column('calibration_id', sa.String(length=64), nullable=True),
    sa.Column('metrics_json', sa.Text(), nullable=False),
    sa.Column('notes_json', sa.Text(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('resumed', sa.Integer(), nullable=False),
    sa.Column('claimed_by', sa.String(length=64), nullable=True),
    sa.Column('heartbeat_at', sa.Float(), nullable=True),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.Column('updated_at', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_tenant'), ['tenant'], unique=False)

    op.create_table('privacy_policies',
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('policy_json', sa.Text(), nullable=False),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('tenant', 'version')
    )
    op.create_table('qmatrices',
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('body_json', sa.Text(), nullable=False),
    sa.Column('n_items', sa.Integer(), nullable=False),
    sa.Column('n_concepts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('deleted_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('tenant', 'id', 'version')
    )
    op.create_table('tenants',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('workers',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('heartbeat_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_workers_heartbeat_at'), ['heartbeat_at'], unique=False)

    op.create_table('api_keys',
    sa.Column('key_id', sa.String(length=32), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=True),
    sa.Column('revoked', sa.Boolean(), nullable=False),
    sa.Column('revoked_at', sa.Float(), nullable=True),
    sa.Column('last_used_at', sa.Float(), nullable=True),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.ForeignKeyConstraint(['tenant'], ['tenants.name'], ),
    sa.PrimaryKeyConstraint('key_id')
    )
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_keys_tenant'), ['tenant'], unique=False)

    op.create_table('job_events',
    sa.Column('seq', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('at', sa.String(length=40), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('worker', sa.String(length=64), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('seq')
    )
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.create_index('ix_job_events_job', ['job_id', 'seq'], unique=False)

    op.create_table('job_items',
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('idx', sa.Integer(), nullable=False),
    sa.Column('result_json', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('job_id', 'idx')
    )
    op.create_table('privacy_charges',
    sa.Column('seq', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('tenant', sa.String(length=128), nullable=False),
    sa.Column('student_id', sa.String(length=256), nullable=False),
    sa.Column('fingerprint', sa.String(length=256), nullable=True),
    sa.Column('epsilon', sa.Float(), nullable=False),
    sa.Column('delta', sa.Float(), nullable=False),
    sa.Column('mechanism', sa.String(length=32), nullable=False),
    sa.Column('sigma_over_sensitivity', sa.Float(), nullable=True),
    sa.Column('releases', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('answer_json', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('settled_at', sa.Float(), nullable=True),
    sa.Column('owner', sa.String(length=64), nullable=True),
    sa.PrimaryKeyConstraint('seq'),
    sa.UniqueConstraint('id')
    )
    with op.batch_alter_table('privacy_charges', schema=None) as batch_op:
        batch_op.create_index('ix_privacy_charges_pending', ['status', 'owner'], unique=False)
        batch_op.create_index('ix_privacy_charges_student', ['tenant', 'student_id', 'fingerprint'], unique=False)
        batch_op.create_index('ix_privacy_charges_window', ['tenant', 'student_id', 'created_at'], unique=False)

    op.create_table('privacy_students',
    sa.Column('tenant', sa.String(length=128), nullable=False),
    sa.Column('student_id', sa.String(length=256), nullable=False),
    sa.Column('accountant_json', sa.Text(), nullable=False),
    sa.Column('queries', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('tenant', 'student_id')
    )


def downgrade() -> None:
    op.drop_table('privacy_students')
    with op.batch_alter_table('privacy_charges', schema=None) as batch_op:
        batch_op.drop_index('ix_privacy_charges_window')
        batch_op.drop_index('ix_privacy_charges_student')
        batch_op.drop_index('ix_privacy_charges_pending')

    op.drop_table('privacy_charges')
    op.drop_table('job_items')
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.drop_index('ix_job_events_job')

    op.drop_table('job_events')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_keys_tenant'))

    op.drop_table('api_keys')
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_workers_heartbeat_at'))

    op.drop_table('workers')
    op.drop_table('tenants')
    op.drop_table('qmatrices')
    op.drop_table('privacy_policies')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_tenant'))
        batch_op.drop_index(batch_op.f('ix_jobs_status'))

    op.drop_table('jobs')
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.drop_index('ix_calibrations_owner')

    op.drop_table('calibrations')

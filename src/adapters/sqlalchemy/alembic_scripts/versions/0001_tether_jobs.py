"""tether_jobs with its constraints and partial indexes (the schema of the old runner's version 1).

Frozen: later changes are later revisions.  Times are ``timestamptz`` on PostgreSQL and integer
microseconds since the Unix epoch on SQLite (see :mod:`tether.adapters.sqlalchemy.schema`).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

LEASABLE = "status IN ('queued', 'retrying')"


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    schema = op.get_context().version_table_schema  # the repository's schema (None on SQLite)
    op.create_table(
        "tether_jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("scheduled_at", _utc(), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("leased_by", sa.String(200), nullable=True),
        sa.Column("leased_at", _utc(), nullable=True),
        sa.Column("lease_expires_at", _utc(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("finished_at", _utc(), nullable=True),
        sa.UniqueConstraint("idempotency_key", name="uq_tether_jobs_idempotency_key"),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'retrying', 'completed', 'dead')", name="ck_tether_jobs_status"
        ),
        sa.CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="ck_tether_jobs_attempts"),
        sa.CheckConstraint("(status = 'running') = (lease_token IS NOT NULL)", name="ck_tether_jobs_lease_token"),
        schema=schema,
        sqlite_autoincrement=True,
    )
    leasable = sa.text(LEASABLE)
    op.create_index(
        "ix_tether_jobs_leasable_queue",
        "tether_jobs",
        ["queue", sa.text("priority DESC"), "scheduled_at", "id"],
        schema=schema,
        postgresql_where=leasable,
        sqlite_where=leasable,
    )
    op.create_index(
        "ix_tether_jobs_leasable",
        "tether_jobs",
        [sa.text("priority DESC"), "scheduled_at", "id"],
        schema=schema,
        postgresql_where=leasable,
        sqlite_where=leasable,
    )
    running = sa.text("status = 'running'")
    op.create_index(
        "ix_tether_jobs_running_expiry", "tether_jobs", ["lease_expires_at"], schema=schema,
        postgresql_where=running, sqlite_where=running,
    )
    finished = sa.text("finished_at IS NOT NULL")
    op.create_index(
        "ix_tether_jobs_finished", "tether_jobs", ["finished_at"], schema=schema,
        postgresql_where=finished, sqlite_where=finished,
    )


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

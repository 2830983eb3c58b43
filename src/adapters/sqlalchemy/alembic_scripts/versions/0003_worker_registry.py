"""tether_workers: the worker registry, one row per running worker pool.

Each pool records itself at start (worker id, host, pid, queues, job types, threads, Tether
version, dispatcher, heartbeat interval, start time), refreshes ``last_seen_at`` once per
heartbeat interval and deletes its row at a clean stop.  Information only: no job write and no
reaper pass reads it.  A new table, so the upgrade neither locks nor rewrites ``tether_jobs``.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    schema = op.get_context().version_table_schema  # the repository's schema (None on SQLite)
    op.create_table(
        "tether_workers",
        sa.Column("worker_id", sa.String(200), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.Text(), nullable=True),
        sa.Column("job_types", sa.Text(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("dispatcher", sa.String(64), nullable=False),
        sa.Column("heartbeat_interval", sa.Float(), nullable=False),
        sa.Column("started_at", _utc(), nullable=False),
        sa.Column("last_seen_at", _utc(), nullable=False),
        schema=schema,
    )


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

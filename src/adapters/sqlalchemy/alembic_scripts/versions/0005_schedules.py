"""tether_schedules: periodic schedules, one row per schedule name, with each one's tick mark.

Worker pools record the schedules they run (definition, fingerprint, next tick, which pool
declared it and until when) and advance ``last_tick_at`` by compare-and-set in the same
transaction as each tick's job.  Purge never touches this table, so a purged tick's job never
makes that tick run again.  A new table: the upgrade neither locks nor rewrites ``tether_jobs``.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    schema = op.get_context().version_table_schema  # the repository's schema (None on SQLite)
    op.create_table(
        "tether_schedules",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(64), nullable=True),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("tz", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("next_tick_at", _utc(), nullable=True),
        sa.Column("declared_by", sa.String(200), nullable=False),
        sa.Column("declared_at", _utc(), nullable=False),
        sa.Column("declared_until", _utc(), nullable=False),
        sa.Column("last_tick_at", _utc(), nullable=True),
        sa.Column("last_job_id", sa.BigInteger(), nullable=True),
        schema=schema,
    )


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

"""tether_queues: the queue controls, one row per queue ever paused or limited.

``paused`` stops every lease of the queue; ``max_running`` (NULL: no limit) caps how many of its
jobs run at once across every worker; ``rate_limit`` starts per ``rate_period_us`` microseconds
caps how many of its jobs start per fixed window, counted in ``window_starts`` for the window
that starts at ``window_start_us``.  The lease statement anti-joins this table on its primary
key.  A new table, so the upgrade neither locks nor rewrites ``tether_jobs``.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

MAX_RUNNING_CHECK = "max_running IS NULL OR max_running >= 1"
RATE_CHECK = "(rate_limit IS NULL) = (rate_period_us IS NULL) AND (rate_limit IS NULL OR (rate_limit >= 1 AND rate_period_us >= 1000))"


def upgrade() -> None:
    schema = op.get_context().version_table_schema  # the repository's schema (None on SQLite)
    op.create_table(
        "tether_queues",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("paused", sa.Boolean(create_constraint=False), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite"), nullable=False),
        sa.Column("rate_limit", sa.Integer(), nullable=True),
        sa.Column("rate_period_us", sa.BigInteger(), nullable=True),
        sa.Column("window_start_us", sa.BigInteger(), nullable=True),
        sa.Column("window_starts", sa.Integer(), nullable=False),
        sa.CheckConstraint(MAX_RUNNING_CHECK, name="ck_tether_queues_max_running"),
        sa.CheckConstraint(RATE_CHECK, name="ck_tether_queues_rate"),
        schema=schema,
    )


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

"""tether_queues: the queue controls, one row per queue ever paused or limited.

``paused`` stops every lease of the queue; ``max_running`` (NULL: no limit) caps how many of its
jobs run at once across every worker.  The lease statement anti-joins this table on its primary
key.  A new table, so the upgrade neither locks nor rewrites ``tether_jobs``.

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

MAX_RUNNING_CHECK = "max_running IS NULL OR max_running >= 1"


def upgrade() -> None:
    schema = op.get_context().version_table_schema  # the repository's schema (None on SQLite)
    op.create_table(
        "tether_queues",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("paused", sa.Boolean(create_constraint=False), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite"), nullable=False),
        sa.CheckConstraint(MAX_RUNNING_CHECK, name="ck_tether_queues_max_running"),
        schema=schema,
    )


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

"""Covering live indexes on PostgreSQL: the queue summaries read the live indexes alone.

- ``ix_tether_jobs_leasable_queue`` (``queue, priority DESC, scheduled_at, id`` over ``status IN
  ('queued', 'retrying')``) also carries ``status`` (``INCLUDE``), and ``ix_tether_jobs_running_expiry``
  (``lease_expires_at`` over ``status = 'running'``) also carries ``queue``: counting the live jobs
  per queue and status, the due ones and the oldest due time (the dashboard's overview and queues,
  ``/metrics``) is then an index-only scan, never a read of the table's pages, which the live rows
  share with the finished ones.  The keys, and so every lease and reap plan, are unchanged; the
  entries are a few bytes wider, and no write adds an index entry it did not add before (a row's
  status, queue and lease columns change only where the row enters or leaves these indexes).

PostgreSQL: each index is dropped and built again, under its name, in the upgrade's transaction (a
write lock on ``tether_jobs`` while it reads the live rows).  SQLite has no ``INCLUDE``: only the
version moves.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

LEASABLE_PREDICATE = "status IN ('queued', 'retrying')"
RUNNING_PREDICATE = "status = 'running'"


def upgrade() -> None:
    context = op.get_context()
    if context.dialect.name == "sqlite":
        return
    schema = context.version_table_schema
    op.drop_index("ix_tether_jobs_leasable_queue", table_name="tether_jobs", schema=schema)
    op.create_index(
        "ix_tether_jobs_leasable_queue", "tether_jobs",
        ["queue", sa.text("priority DESC"), "scheduled_at", "id"],
        schema=schema, postgresql_where=sa.text(LEASABLE_PREDICATE), postgresql_include=["status"],
    )
    op.drop_index("ix_tether_jobs_running_expiry", table_name="tether_jobs", schema=schema)
    op.create_index(
        "ix_tether_jobs_running_expiry", "tether_jobs", ["lease_expires_at"],
        schema=schema, postgresql_where=sa.text(RUNNING_PREDICATE), postgresql_include=["queue"],
    )


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

"""Attempt history: the ``history`` column.

- ``history``: a JSON array of the job's ended attempts (JSON text on PostgreSQL and
  SQLite), NULL for every existing row (no attempt recorded yet) and for new jobs until their
  first attempt ends; see :mod:`tether.adapters.sqlalchemy.history_sql`.

PostgreSQL adds the nullable column without a default, which changes only the catalog: no table
rewrite and no scan, the lock held for an instant.  SQLite adds it with ``ALTER TABLE ADD
COLUMN`` (no constraint changes, so no table rebuild).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    context = op.get_context()
    schema = context.version_table_schema  # the repository's schema (None on SQLite)
    op.add_column("tether_jobs", sa.Column("history", sa.Text(), nullable=True), schema=schema)


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

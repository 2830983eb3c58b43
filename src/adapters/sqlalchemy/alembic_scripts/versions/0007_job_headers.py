"""Job headers: the nullable ``headers`` column (JSON text of string headers, e.g. a trace context).

- ``headers`` (``text``, NULL for every existing row and for every job enqueued without tracing):
  the canonical JSON object of :func:`tether.domain.headers.encode_headers`.

Both dialects add the column in place: nullable with no default, it needs no table rewrite on
PostgreSQL and no rebuild on SQLite (``ALTER TABLE ... ADD COLUMN``).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = op.get_context().version_table_schema  # the repository's schema (None on SQLite)
    op.add_column("tether_jobs", sa.Column("headers", sa.Text(), nullable=True), schema=schema)


def downgrade() -> None:
    schema = op.get_context().version_table_schema
    op.drop_column("tether_jobs", "headers", schema=schema)

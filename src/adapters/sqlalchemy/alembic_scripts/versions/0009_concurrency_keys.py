"""Per-key running limits: ``tether_jobs.concurrency_key``, its running index, and ``tether_queues.max_running_per_key``.

- ``concurrency_key`` (``varchar(255)``, NULL for every existing row and for every job enqueued
  without one): the key a queue's per-key running limit counts the job under.
- ``ix_tether_jobs_running_key`` on ``(queue, concurrency_key, lease_expires_at)`` over ``status =
  'running' AND concurrency_key IS NOT NULL``: a per-key limited lease counts each key's running
  jobs from it; jobs without a key never enter it.
- ``max_running_per_key`` (NULL: no per-key limit) with ``ck_tether_queues_max_running_per_key``.

PostgreSQL: both columns are added without a table rewrite (nullable, no default); the index is
built in the upgrade's transaction (a write lock on ``tether_jobs`` while it reads the running
rows with a key: none before this revision).  SQLite adds the job column in place (``ALTER TABLE
... ADD COLUMN``) and, since it cannot add a CHECK constraint, rebuilds the tiny
``tether_queues`` as 0004 rebuilt ``tether_jobs``: created anew, rows copied, old table dropped,
new one renamed.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

MAX_RUNNING_CHECK = "max_running IS NULL OR max_running >= 1"
RATE_CHECK = "(rate_limit IS NULL) = (rate_period_us IS NULL) AND (rate_limit IS NULL OR (rate_limit >= 1 AND rate_period_us >= 1000))"
MAX_RUNNING_PER_KEY_CHECK = "max_running_per_key IS NULL OR max_running_per_key >= 1"
RUNNING_KEY_PREDICATE = "status = 'running' AND concurrency_key IS NOT NULL"
#: The columns of ``tether_queues`` at revision 0008, copied as they are by the SQLite rebuild.
QUEUE_COLUMNS = "name, paused, max_running, updated_at, rate_limit, rate_period_us, window_start_us, window_starts"


def upgrade() -> None:
    context = op.get_context()
    schema = context.version_table_schema  # the repository's schema (None on SQLite)
    sqlite = context.dialect.name == "sqlite"
    op.add_column("tether_jobs", sa.Column("concurrency_key", sa.String(255), nullable=True), schema=schema)
    predicate = sa.text(RUNNING_KEY_PREDICATE)
    op.create_index("ix_tether_jobs_running_key", "tether_jobs", ["queue", "concurrency_key", "lease_expires_at"],
                    schema=schema, postgresql_where=predicate, sqlite_where=predicate)
    if sqlite:
        _rebuild_sqlite_queues()
        return
    op.add_column("tether_queues", sa.Column("max_running_per_key", sa.Integer(), nullable=True), schema=schema)
    op.create_check_constraint(
        "ck_tether_queues_max_running_per_key", "tether_queues", sa.text(MAX_RUNNING_PER_KEY_CHECK), schema=schema
    )


def _rebuild_sqlite_queues() -> None:
    """SQLite's documented way to add a constraint: new table, copy, drop, rename."""
    op.create_table(
        "_tether_queues_0009",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("paused", sa.Boolean(create_constraint=False), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("rate_limit", sa.Integer(), nullable=True),
        sa.Column("rate_period_us", sa.BigInteger(), nullable=True),
        sa.Column("window_start_us", sa.BigInteger(), nullable=True),
        sa.Column("window_starts", sa.Integer(), nullable=False),
        sa.Column("max_running_per_key", sa.Integer(), nullable=True),
        sa.CheckConstraint(MAX_RUNNING_CHECK, name="ck_tether_queues_max_running"),
        sa.CheckConstraint(RATE_CHECK, name="ck_tether_queues_rate"),
        sa.CheckConstraint(MAX_RUNNING_PER_KEY_CHECK, name="ck_tether_queues_max_running_per_key"),
    )
    op.execute(f"INSERT INTO _tether_queues_0009 ({QUEUE_COLUMNS}) SELECT {QUEUE_COLUMNS} FROM tether_queues")
    op.drop_table("tether_queues")
    op.rename_table("_tether_queues_0009", "tether_queues")


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

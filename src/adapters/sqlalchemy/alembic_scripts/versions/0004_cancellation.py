"""Cancellation: the ``cancelled`` status and the ``cancel_requested_at`` column.

- ``cancel_requested_at`` (``timestamptz`` on PostgreSQL, integer microseconds on SQLite, NULL
  for every existing row): when an operator asked to cancel a running job; its holder's next
  outcome write, or the reaper, then records ``cancelled``.
- ``ck_tether_jobs_status`` admits ``cancelled``.
- ``ck_tether_jobs_cancel_request``: a request is stored only on a running or cancelled job.

PostgreSQL: the column is added without a table rewrite (nullable, no default); the two CHECKs
are (re)created in the upgrade's one transaction, which reads the table once to validate them
while holding a lock that blocks writes to ``tether_jobs``.  SQLite cannot change a CHECK
constraint, so the table is rebuilt as in 0002: created anew, rows copied, old table dropped, new
one renamed, indexes recreated, the AUTOINCREMENT counter carried over (ids of purged jobs are
never reused).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

STATUS_CHECK = "status IN ('queued', 'running', 'retrying', 'completed', 'dead', 'cancelled')"
CANCEL_REQUEST_CHECK = "cancel_requested_at IS NULL OR status IN ('running', 'cancelled')"
#: The columns of revision 0002, copied as they are by the SQLite rebuild.
COLUMNS = (
    "id, job_type, queue, payload, priority, status, attempts, max_attempts, scheduled_at, created_at, "
    "idempotency_key, lease_token, leased_by, leased_at, lease_expires_at, last_error, finished_at"
)


def upgrade() -> None:
    context = op.get_context()
    schema = context.version_table_schema  # the repository's schema (None on SQLite)
    if context.dialect.name == "sqlite":
        _rebuild_sqlite_table()
        return
    op.add_column("tether_jobs", sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True), schema=schema)
    op.drop_constraint("ck_tether_jobs_status", "tether_jobs", schema=schema, type_="check")
    op.create_check_constraint("ck_tether_jobs_status", "tether_jobs", sa.text(STATUS_CHECK), schema=schema)
    op.create_check_constraint("ck_tether_jobs_cancel_request", "tether_jobs", sa.text(CANCEL_REQUEST_CHECK), schema=schema)


def _rebuild_sqlite_table() -> None:
    """SQLite's documented way to change a constraint: new table, copy, drop, rename, re-index."""
    op.create_table(
        "_tether_jobs_0003",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("scheduled_at", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("leased_by", sa.String(200), nullable=True),
        sa.Column("leased_at", sa.BigInteger(), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("cancel_requested_at", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(STATUS_CHECK, name="ck_tether_jobs_status"),
        sa.CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="ck_tether_jobs_attempts"),
        sa.CheckConstraint("(status = 'running') = (lease_token IS NOT NULL)", name="ck_tether_jobs_lease_token"),
        sa.CheckConstraint(CANCEL_REQUEST_CHECK, name="ck_tether_jobs_cancel_request"),
        sqlite_autoincrement=True,
    )
    op.execute(f"INSERT INTO _tether_jobs_0003 ({COLUMNS}) SELECT {COLUMNS} FROM tether_jobs ORDER BY id")
    # carry the old table's AUTOINCREMENT counter (it counts purged ids too) before DROP loses it
    op.execute("DELETE FROM sqlite_sequence WHERE name = '_tether_jobs_0003'")
    op.execute(
        "INSERT INTO sqlite_sequence (name, seq) SELECT '_tether_jobs_0003', seq FROM sqlite_sequence WHERE name = 'tether_jobs'"
    )
    op.drop_table("tether_jobs")
    op.rename_table("_tether_jobs_0003", "tether_jobs")
    leasable = sa.text("status IN ('queued', 'retrying')")
    op.create_index("ix_tether_jobs_leasable_queue", "tether_jobs", ["queue", sa.text("priority DESC"), "scheduled_at", "id"],
                    sqlite_where=leasable)
    op.create_index("ix_tether_jobs_leasable", "tether_jobs", [sa.text("priority DESC"), "scheduled_at", "id"],
                    sqlite_where=leasable)
    op.create_index("ix_tether_jobs_running_expiry", "tether_jobs", ["lease_expires_at"],
                    sqlite_where=sa.text("status = 'running'"))
    op.create_index("ix_tether_jobs_finished", "tether_jobs", ["finished_at"], sqlite_where=sa.text("finished_at IS NOT NULL"))
    op.create_index("ux_tether_jobs_idempotency_key", "tether_jobs", ["idempotency_key"], unique=True,
                    sqlite_where=sa.text("idempotency_key IS NOT NULL"))


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

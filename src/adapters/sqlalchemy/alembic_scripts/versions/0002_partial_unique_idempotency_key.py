"""idempotency_key: a partial UNIQUE index over the keyed rows instead of a UNIQUE constraint.

Most jobs have no idempotency key; the full UNIQUE constraint still put each of them (a NULL)
into its index, one index insert per enqueued job for nothing.  ``ux_tether_jobs_idempotency_key``
is ``UNIQUE (idempotency_key) WHERE idempotency_key IS NOT NULL``: the same rule (a key is stored
at most once, any number of rows without one), an index only as large as the keyed rows.
Enqueue infers it with ``ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL``.

PostgreSQL: the index is built, then the constraint dropped, in the upgrade's one transaction (the
build holds a lock that blocks writes to ``tether_jobs`` while it reads the table).  SQLite
cannot drop a table's UNIQUE constraint, so the table is rebuilt: created anew without it, rows
copied, old table dropped, new one renamed, indexes recreated, and the AUTOINCREMENT counter
carried over so ids of purged jobs are still never reused.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

KEYED = "idempotency_key IS NOT NULL"
NEW_INDEX = "ux_tether_jobs_idempotency_key"
OLD_CONSTRAINT = "uq_tether_jobs_idempotency_key"
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
    op.create_index(NEW_INDEX, "tether_jobs", ["idempotency_key"], unique=True, schema=schema,
                    postgresql_where=sa.text(KEYED))
    op.drop_constraint(OLD_CONSTRAINT, "tether_jobs", schema=schema, type_="unique")


def _rebuild_sqlite_table() -> None:
    """SQLite's documented way to change a constraint: new table, copy, drop, rename, re-index."""
    op.create_table(
        "_tether_jobs_0002",
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
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'retrying', 'completed', 'dead')", name="ck_tether_jobs_status"
        ),
        sa.CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="ck_tether_jobs_attempts"),
        sa.CheckConstraint("(status = 'running') = (lease_token IS NOT NULL)", name="ck_tether_jobs_lease_token"),
        sqlite_autoincrement=True,
    )
    op.execute(f"INSERT INTO _tether_jobs_0002 ({COLUMNS}) SELECT {COLUMNS} FROM tether_jobs ORDER BY id")
    # carry the old table's AUTOINCREMENT counter (it counts purged ids too) before DROP loses it
    op.execute("DELETE FROM sqlite_sequence WHERE name = '_tether_jobs_0002'")
    op.execute(
        "INSERT INTO sqlite_sequence (name, seq) SELECT '_tether_jobs_0002', seq FROM sqlite_sequence WHERE name = 'tether_jobs'"
    )
    op.drop_table("tether_jobs")
    op.rename_table("_tether_jobs_0002", "tether_jobs")
    leasable = sa.text("status IN ('queued', 'retrying')")
    op.create_index("ix_tether_jobs_leasable_queue", "tether_jobs", ["queue", sa.text("priority DESC"), "scheduled_at", "id"],
                    sqlite_where=leasable)
    op.create_index("ix_tether_jobs_leasable", "tether_jobs", [sa.text("priority DESC"), "scheduled_at", "id"],
                    sqlite_where=leasable)
    op.create_index("ix_tether_jobs_running_expiry", "tether_jobs", ["lease_expires_at"],
                    sqlite_where=sa.text("status = 'running'"))
    op.create_index("ix_tether_jobs_finished", "tether_jobs", ["finished_at"], sqlite_where=sa.text("finished_at IS NOT NULL"))
    op.create_index(NEW_INDEX, "tether_jobs", ["idempotency_key"], unique=True, sqlite_where=sa.text(KEYED))


def downgrade() -> None:
    raise NotImplementedError("Tether schemas are upgraded, never downgraded")

"""The schema of Tether's runner before Alembic (``tether_schema_version`` = 1), as its DDL.

Written out literally (what that runner's ``metadata.create_all`` emitted) so the bridge from
such databases is tested against the real old shape, not against today's code.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

_JOBS = """CREATE TABLE {prefix}tether_jobs (
    id {id_type},
    job_type VARCHAR(200) NOT NULL,
    queue VARCHAR(64) NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL,
    status VARCHAR(16) NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    scheduled_at {time} NOT NULL,
    created_at {time} NOT NULL,
    idempotency_key VARCHAR(255),
    lease_token VARCHAR(64),
    leased_by VARCHAR(200),
    leased_at {time},
    lease_expires_at {time},
    last_error TEXT,
    finished_at {time},
    {pk}CONSTRAINT uq_tether_jobs_idempotency_key UNIQUE (idempotency_key),
    CONSTRAINT ck_tether_jobs_status CHECK (status IN ('queued', 'running', 'retrying', 'completed', 'dead')),
    CONSTRAINT ck_tether_jobs_attempts CHECK (attempts >= 0 AND attempts <= max_attempts),
    CONSTRAINT ck_tether_jobs_lease_token CHECK ((status = 'running') = (lease_token IS NOT NULL))
)"""

_INDEXES = [
    "CREATE INDEX ix_tether_jobs_finished ON {prefix}tether_jobs (finished_at) WHERE finished_at IS NOT NULL",
    (
        "CREATE INDEX ix_tether_jobs_leasable ON {prefix}tether_jobs (priority DESC, scheduled_at, id) "
        "WHERE status IN ('queued', 'retrying')"
    ),
    (
        "CREATE INDEX ix_tether_jobs_leasable_queue ON {prefix}tether_jobs (queue, priority DESC, scheduled_at, id) "
        "WHERE status IN ('queued', 'retrying')"
    ),
    "CREATE INDEX ix_tether_jobs_running_expiry ON {prefix}tether_jobs (lease_expires_at) WHERE status = 'running'",
]


def create_v1_schema(conn: Connection, schema: str | None = None, *, version_table: bool = True) -> None:
    """Create the old runner's tables in ``conn``'s database (``schema``: PostgreSQL only).

    ``version_table=False`` leaves out ``tether_schema_version`` (a table from before versioning).
    """
    sqlite = conn.dialect.name == "sqlite"
    prefix = f'"{schema}".' if schema else ""
    if schema:
        conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    conn.exec_driver_sql(
        _JOBS.format(
            prefix=prefix,
            id_type="INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT" if sqlite else "BIGSERIAL NOT NULL",
            time="BIGINT" if sqlite else "TIMESTAMP WITH TIME ZONE",
            pk="" if sqlite else "PRIMARY KEY (id),\n    ",
        )
    )
    for index in _INDEXES:
        conn.exec_driver_sql(index.format(prefix=prefix))
    if version_table:
        conn.exec_driver_sql(f"CREATE TABLE {prefix}tether_schema_version (version INTEGER NOT NULL)")
        conn.exec_driver_sql(f"INSERT INTO {prefix}tether_schema_version (version) VALUES (1)")

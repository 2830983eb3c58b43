"""Versioned schema migrations of the SQL repositories.

The schema's version is one row in ``tether_schema_version`` next to ``tether_jobs``.
:func:`upgrade` brings a database from whatever version it has to :data:`SCHEMA_VERSION` by
running the steps in :data:`MIGRATIONS` in order, inside the caller's transaction (on PostgreSQL
DDL is transactional, so a failed upgrade leaves nothing half-written; on SQLite it runs under
``BEGIN IMMEDIATE``).  A database from a newer Tether is refused, never "downgraded".

Each step receives the connection and the repository's ``tether_jobs`` Table; later steps may
use Alembic's operations (``alembic.operations.Operations``) for ALTERs.  A ``tether_jobs``
table created before versioning existed counts as version 1.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Column, Integer, MetaData, Table, delete, func, insert, inspect, select
from sqlalchemy.engine import Connection
from tether.domain.errors import ConfigurationError

#: The schema version this Tether writes and expects.
SCHEMA_VERSION = 1
VERSION_TABLE = "tether_schema_version"


def build_version_table(metadata: MetaData) -> Table:
    """Define ``tether_schema_version`` (one integer column) in ``metadata``'s schema."""
    return Table(VERSION_TABLE, metadata, Column("version", Integer(), nullable=False))


def _v1_jobs_table(conn: Connection, jobs: Table) -> None:
    """Version 1: ``tether_jobs`` with its constraints and partial indexes (see :mod:`.schema`)."""
    jobs.create(conn, checkfirst=True)


#: version -> the step that produces it from the version before.
MIGRATIONS: dict[int, Callable[[Connection, Table], None]] = {1: _v1_jobs_table}


def read_version(conn: Connection, jobs: Table, version: Table) -> int | None:
    """The schema version stored in the database, or None when Tether's tables are absent."""
    inspector = inspect(conn)
    if inspector.has_table(version.name, schema=version.schema):
        stored = conn.execute(select(func.max(version.c.version))).scalar()
        return int(stored) if stored is not None else 0
    if inspector.has_table(jobs.name, schema=jobs.schema):
        return 1
    return None


def newer_schema_error(where: str, found: int) -> ConfigurationError:
    return ConfigurationError(
        f"{where}: the Tether schema is version {found}, newer than this Tether's {SCHEMA_VERSION}; "
        "upgrade the tether-jobs package (pip install -U tether-jobs) instead of using an older one"
    )


def upgrade(conn: Connection, jobs: Table, version: Table, *, where: str) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` in ``conn``'s transaction; returns it.

    Raises:
        ConfigurationError: the database holds a newer schema version (``where`` names it).
    """
    current = read_version(conn, jobs, version) or 0
    if current > SCHEMA_VERSION:
        raise newer_schema_error(where, current)
    version.create(conn, checkfirst=True)
    for step in range(current + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[step](conn, jobs)
    if current != SCHEMA_VERSION or conn.execute(select(func.count()).select_from(version)).scalar() != 1:
        conn.execute(delete(version))
        conn.execute(insert(version).values(version=SCHEMA_VERSION))
    return SCHEMA_VERSION


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "VERSION_TABLE", "build_version_table", "read_version", "upgrade"]

"""Versioned schema migrations of the SQL repositories: Alembic revisions shipped in the package.

The revisions live in ``alembic_scripts/versions`` next to this module; Tether runs them itself on the
repository's connection, so users need no ``alembic.ini``.  Revision ids are zero-padded
sequence numbers (``0001``, ``0002``, ...): the *schema version* is that number, and
:data:`SCHEMA_VERSION` is the number of the newest revision this Tether ships.

- The applied revision is one row in ``tether_alembic_version`` (Alembic's version table under
  Tether's own name, in the repository's schema, so several applications and parallel test runs
  can each keep their tables in their own schema of one database).
- :func:`upgrade` brings a database from whatever revision it has to the head, inside the
  caller's transaction: on PostgreSQL DDL is transactional, so a failed upgrade leaves nothing
  half-written (the PostgreSQL repository also holds an advisory lock, so concurrent upgrades
  queue); on SQLite it runs under ``BEGIN IMMEDIATE``, and SQLite's DDL is transactional too.
- A revision this Tether does not ship means a newer Tether wrote the schema: refused, never
  "downgraded".
- Bridge from the runner before Alembic: a database with ``tether_schema_version`` (version 1) or
  a bare ``tether_jobs`` table, but no Alembic revision, is stamped ``0001`` (that runner's
  schema, exactly) and upgraded from there.  Its ``tether_schema_version`` row is then set to the
  new version, so a Tether from before Alembic refuses the database ("newer") instead of using a
  schema it does not know.

Alembic is imported only when an upgrade has work to do: opening a repository whose schema is
current costs one small read and no Alembic import.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, delete, insert, inspect, select
from sqlalchemy.engine import Connection
from tether.adapters.sqlalchemy.schema import QUEUES_TABLE_NAME, SCHEDULES_TABLE_NAME, TABLE_NAME, WORKERS_TABLE_NAME
from tether.domain.errors import ConfigurationError, ValidationError

#: The schema version this Tether writes and expects: the number of its newest revision.
SCHEMA_VERSION = 10
#: Alembic's version table, under Tether's name, in the repository's schema.
VERSION_TABLE = "tether_alembic_version"
#: The version table of the runner before Alembic (one integer row); kept up to date where it exists.
LEGACY_VERSION_TABLE = "tether_schema_version"
#: Alembic's script directory (env.py, script.py.mako, versions/), shipped as package data.
SCRIPT_LOCATION = Path(__file__).with_name("alembic_scripts")
#: The revision the runner before Alembic had produced (its version 1).
FIRST_REVISION = "0001"

log = logging.getLogger("tether.adapters.sqlalchemy")


def revision_id(version: int) -> str:
    """The Alembic revision id of schema ``version`` (``2`` -> ``"0002"``)."""
    return f"{version:04d}"


#: The head revision this Tether ships.
HEAD_REVISION = revision_id(SCHEMA_VERSION)


def is_tether_table(name: str | None) -> bool:
    """True for the tables Alembic's autogenerate compares (``tether_jobs``, ``tether_workers``,
    ``tether_schedules``, ``tether_queues``; version tables are Alembic's own)."""
    return name in (TABLE_NAME, WORKERS_TABLE_NAME, SCHEDULES_TABLE_NAME, QUEUES_TABLE_NAME)


def _version_tables(schema: str | None) -> tuple[Table, Table]:
    metadata = MetaData(schema=schema)
    return (
        Table(VERSION_TABLE, metadata, Column("version_num", String(32), primary_key=True)),
        Table(LEGACY_VERSION_TABLE, metadata, Column("version", Integer(), nullable=False)),
    )


@dataclass(frozen=True)
class StoredSchema:
    """What a database holds: the Alembic revision, the old runner's version, whether ``tether_jobs`` exists."""

    revision: str | None
    legacy_version: int | None
    has_jobs: bool

    def version(self, where: str) -> int | None:
        """The schema version (None: Tether's tables are absent).

        Raises:
            ConfigurationError: the version table holds a revision id that is not a Tether one.
        """
        if self.revision is not None:
            if not self.revision.isdigit():
                raise ConfigurationError(
                    f"{where}: {VERSION_TABLE} holds revision {self.revision!r}, which is not a Tether schema "
                    "revision (Tether's are numbered 0001, 0002, ...); was the table written by another tool?"
                )
            return int(self.revision)
        if self.legacy_version is not None and self.legacy_version > SCHEMA_VERSION:
            return self.legacy_version
        return 1 if self.has_jobs else None


def read_stored(conn: Connection, schema: str | None) -> StoredSchema:
    """Read what :class:`StoredSchema` describes (nothing is created or changed)."""
    alembic_table, legacy_table = _version_tables(schema)
    inspector = inspect(conn)
    revision: str | None = None
    if inspector.has_table(VERSION_TABLE, schema=schema):
        revisions = list(conn.execute(select(alembic_table.c.version_num)).scalars())
        # Tether's history is linear: one row, or several only if someone branched it (refused as unknown)
        revision = ",".join(sorted(revisions)) if revisions else None
    legacy: int | None = None
    if inspector.has_table(LEGACY_VERSION_TABLE, schema=schema):
        values = [int(v) for v in conn.execute(select(legacy_table.c.version)).scalars()]
        legacy = max(values) if values else 0
    return StoredSchema(revision, legacy, inspector.has_table(TABLE_NAME, schema=schema))


def read_version(conn: Connection, schema: str | None, *, where: str) -> int | None:
    """The schema version stored in the database, or None when Tether's tables are absent."""
    return read_stored(conn, schema).version(where)


def newer_schema_error(where: str, found: int | str) -> ConfigurationError:
    what = f"version {found}" if isinstance(found, int) else f"at revision {found!r}"
    return ConfigurationError(
        f"{where}: the Tether schema is {what}, newer than this Tether's {SCHEMA_VERSION}; "
        "upgrade the tether-jobs package (pip install -U tether-jobs) instead of using an older one"
    )


def alembic_config(schema: str | None, **attributes: Any) -> Any:
    """An in-memory :class:`alembic.config.Config` on the shipped script directory (no ini file).

    ``attributes`` go to ``config.attributes`` for ``env.py`` (``connection``, ``dialect_name``).
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.attributes["tether_schema"] = schema
    config.attributes.update(attributes)
    return config


def shipped_revisions() -> list[str]:
    """The revision ids in the shipped script directory, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(None))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def upgrade(conn: Connection, schema: str | None, *, where: str) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` in ``conn``'s transaction; returns it.

    ``conn`` must be in a transaction (the caller's, which commits or rolls back everything).

    Raises:
        ConfigurationError: the database holds a revision this Tether does not ship, i.e. a
            schema from a newer Tether (``where`` names the database, password hidden).
    """
    stored = read_stored(conn, schema)
    found = stored.version(where)
    if found is not None and found > SCHEMA_VERSION:
        raise newer_schema_error(where, found)
    if stored.revision != HEAD_REVISION:
        with _quiet_alembic():  # from the first import: alembic logs its plugin set-up at INFO too
            if stored.revision is not None and stored.revision not in shipped_revisions():
                raise newer_schema_error(where, stored.revision)
            from alembic import command

            config = alembic_config(schema, connection=conn)
            if stored.revision is None and stored.has_jobs:  # the bridge from the runner before Alembic
                command.stamp(config, FIRST_REVISION)
            command.upgrade(config, "head")
        log.info("%s: Tether schema %s version %s", where,
                 "created at" if found is None else f"upgraded from version {found} to", SCHEMA_VERSION)
    if stored.legacy_version is not None and stored.legacy_version != SCHEMA_VERSION:
        legacy = _version_tables(schema)[1]
        conn.execute(delete(legacy))
        conn.execute(insert(legacy).values(version=SCHEMA_VERSION))
    return SCHEMA_VERSION


@contextmanager
def _quiet_alembic() -> Iterator[None]:
    """Alembic's INFO lines ("Context impl ...", one per revision) stay out of the application's
    log; Tether logs one line per upgrade itself.  Warnings and errors still pass."""
    logger = logging.getLogger("alembic")
    before = logger.level
    if before == logging.NOTSET or before < logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(before)


def upgrade_sql(dialect_name: str, schema: str | None = None, *, from_version: int | None = None) -> str:
    """The SQL an upgrade to the head runs, without a database (Alembic's offline mode).

    Args:
        dialect_name: ``postgresql`` or ``sqlite``.
        schema: the PostgreSQL schema holding Tether's tables (None: the default one).
        from_version: the schema version the database is at (None: an empty database).

    Raises:
        ConfigurationError: an unknown dialect.
        ValidationError (field ``from_version``): a schema version this Tether does not ship.
    """
    if dialect_name not in ("postgresql", "sqlite"):
        raise ConfigurationError(f"dialect: {dialect_name!r} is not one of postgresql, sqlite")
    if from_version is not None and not 1 <= from_version <= SCHEMA_VERSION:
        raise ValidationError("from_version", f"{from_version} is not a schema version of this Tether (1-{SCHEMA_VERSION})")
    from alembic import command

    buffer = io.StringIO()
    config = alembic_config(schema, dialect_name=dialect_name)
    config.output_buffer = buffer
    target = "head" if from_version is None else f"{revision_id(from_version)}:head"
    command.upgrade(config, target, sql=True)
    return buffer.getvalue()


def drop_version_tables(conn: Connection, schema: str | None) -> None:
    """Drop ``tether_alembic_version`` and ``tether_schema_version`` if present (tear-down only)."""
    for table in _version_tables(schema):
        table.drop(conn, checkfirst=True)


__all__ = [
    "FIRST_REVISION",
    "HEAD_REVISION",
    "LEGACY_VERSION_TABLE",
    "SCHEMA_VERSION",
    "SCRIPT_LOCATION",
    "VERSION_TABLE",
    "StoredSchema",
    "alembic_config",
    "drop_version_tables",
    "is_tether_table",
    "newer_schema_error",
    "read_stored",
    "read_version",
    "revision_id",
    "shipped_revisions",
    "upgrade",
    "upgrade_sql",
]

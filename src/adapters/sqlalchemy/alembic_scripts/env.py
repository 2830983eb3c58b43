"""Alembic environment of Tether's schema: runs on the connection Tether hands over.

Tether calls Alembic itself (:mod:`tether.adapters.sqlalchemy.migrations`); users need no
``alembic.ini``.  The caller puts into ``config.attributes``:

- ``connection``: a SQLAlchemy Connection already inside the caller's transaction, so every
  revision of one upgrade is part of that one transaction (PostgreSQL: nothing half-written);
- ``tether_schema``: the PostgreSQL schema holding ``tether_jobs`` (None: the default one; always
  None on SQLite).  The version table ``tether_alembic_version`` lives in the same schema, and the
  revisions read the schema back from ``op.get_context().version_table_schema``.

Offline mode (``alembic upgrade --sql``, or :func:`~tether.adapters.sqlalchemy.migrations.upgrade_sql`)
renders the SQL for ``dialect_name`` from ``config.attributes`` instead of running it.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import MetaData
from tether.adapters.sqlalchemy.migrations import VERSION_TABLE, is_tether_table
from tether.adapters.sqlalchemy.schema import build_tables

config = context.config
schema = config.attributes.get("tether_schema")
target_metadata = build_tables(MetaData(schema=schema))[0].metadata


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Autogenerate looks at Tether's own tables in Tether's schema only (the database may hold an
    application's too)."""
    if type_ == "schema":
        return name == schema
    return type_ != "table" or is_tether_table(name)


options = {
    "target_metadata": target_metadata,
    "version_table": VERSION_TABLE,
    "version_table_schema": schema,
    "include_name": _include_name,
    "include_schemas": schema is not None,
}

if context.is_offline_mode():
    dialect_name = config.attributes.get("dialect_name", "postgresql")
    context.configure(dialect_name=dialect_name, literal_binds=True, render_as_batch=dialect_name == "sqlite", **options)
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes["connection"]
    context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite", **options)
    with context.begin_transaction():  # a no-op inside the caller's transaction
        context.run_migrations()

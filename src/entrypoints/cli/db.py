"""``tether db init``, ``tether db upgrade`` and ``tether db version``: Tether's tables and their schema version."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from tether.domain.errors import ValidationError
from tether.entrypoints.cli.options import AsJson, DatabaseUrl, Schema, load_settings, require_sqlite_file
from tether.entrypoints.cli.output import print_json, stdout
from tether.entrypoints.cli.values import FlagNamingCommand, integer
from tether.entrypoints.settings import Settings

db_app = typer.Typer(help="Create, upgrade and inspect the database tables.", no_args_is_help=True, rich_markup_mode=None)


def _db_target(settings: Settings) -> str:
    """``--database-url URL [--schema S]`` (password hidden), for messages that say what to run."""
    return f"--database-url {settings.safe_database_url}" + (f" --schema {settings.schema}" if settings.schema else "")


def _schema_versions(repository: Any) -> tuple[int | None, int]:
    """(stored schema version or None when the tables are absent, this Tether's schema version)."""
    from tether.adapters.sqlalchemy import SCHEMA_VERSION

    return repository.schema_version(), SCHEMA_VERSION


def _revision(version: int | None) -> str | None:
    """The Alembic revision id of a schema version (``2`` -> ``"0002"``)."""
    from tether.adapters.sqlalchemy.migrations import revision_id

    return None if version is None else revision_id(version)


def _upgrade_tables(database_url: str | None, schema: str | None, verb: str) -> None:
    """``db init`` and ``db upgrade``: create the tables, or bring them to this Tether's version."""
    from tether.entrypoints.container import open_sql_repository

    settings = load_settings(database_url=database_url, schema=schema)
    if settings.database_kind == "memory":
        stdout().print(f"memory:// keeps nothing; there is no schema to {verb}")
        return
    repository: Any = open_sql_repository(settings.database_url, schema=settings.schema, create=False, check=False)
    try:
        before, current = _schema_versions(repository)
        repository.create_schema()  # refuses (ConfigurationError) a schema from a newer Tether
    finally:
        repository.close()
    where = settings.safe_database_url + (f" (schema {settings.schema})" if settings.schema else "")
    if before is None:
        stdout().print(f"tables ready in {where}: created at schema version {current}")
    elif before < current:
        stdout().print(f"tables ready in {where}: upgraded from schema version {before} to {current}")
    else:
        stdout().print(f"tables ready in {where}: already at schema version {current}")


@db_app.command("init", cls=FlagNamingCommand)
def db_init(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
) -> None:
    """Create Tether's tables (and schema) if they are missing, or upgrade them; safe to run again."""
    _upgrade_tables(database_url, schema, "create")


@db_app.command("upgrade", cls=FlagNamingCommand)
def db_upgrade(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
    sql: Annotated[
        bool,
        typer.Option("--sql", help="Print the SQL of the upgrade for the URL's database kind instead of running it "
                                   "(connects to nothing)."),
    ] = False,
    from_version: Annotated[
        int | None,
        typer.Option("--from-version", parser=integer(), metavar="N",
                     help="With --sql: the schema version the database is at [default: none, an empty database]."),
    ] = None,
) -> None:
    """Bring Tether's tables to this Tether's schema version (creating them if missing).

    Runs the Alembic revisions shipped with Tether; the applied one is recorded in
    ``tether_alembic_version`` in the same schema.  One transaction on PostgreSQL (nothing
    half-written), safe to run from several processes at once; a schema written by a newer
    Tether is refused, never downgraded.
    """
    if sql:
        _print_upgrade_sql(database_url, schema, from_version)
        return
    if from_version is not None:
        raise ValidationError("from_version", "only with --sql")
    _upgrade_tables(database_url, schema, "upgrade")


def _print_upgrade_sql(database_url: str | None, schema: str | None, from_version: int | None) -> None:
    """``db upgrade --sql``: Alembic's offline mode for the URL's dialect; nothing is connected to."""
    from tether.adapters.sqlalchemy.migrations import upgrade_sql

    settings = load_settings(database_url=database_url, schema=schema)
    if settings.database_kind == "memory":
        stdout().print("memory:// keeps nothing; there is no schema to upgrade")
        return
    sys.stdout.write(upgrade_sql(settings.database_kind, settings.schema, from_version=from_version))


@db_app.command("version", cls=FlagNamingCommand)
def db_version(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 unless the stored schema is exactly this Tether's version.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Print the stored schema version, this Tether's version, and whether an upgrade is needed.

    Nothing is created or changed.  Status: ``current``, ``missing`` (run ``tether db init``),
    ``outdated`` (run ``tether db upgrade``) or ``newer`` (upgrade the tether-jobs package).
    """
    from tether import __version__
    from tether.entrypoints.container import open_sql_repository

    settings = load_settings(database_url=database_url, schema=schema)
    if settings.database_kind == "memory":
        stdout().print("memory:// keeps nothing; it has no schema version")
        return
    require_sqlite_file(settings)
    repository: Any = open_sql_repository(settings.database_url, schema=settings.schema, create=False, check=False)
    try:
        stored, expected = _schema_versions(repository)
    finally:
        repository.close()
    target = _db_target(settings)
    if stored is None:
        status, advice = "missing", f"run `tether db init {target}`"
    elif stored < expected:
        status, advice = "outdated", f"run `tether db upgrade {target}`"
    elif stored > expected:
        status, advice = "newer", "this Tether is older than the schema; upgrade it (pip install -U tether-jobs)"
    else:
        status, advice = "current", "no upgrade needed"
    if as_json:
        print_json(
            {
                "database_url": settings.safe_database_url,
                "schema": settings.schema,
                "stored_schema_version": stored,
                "stored_revision": _revision(stored),
                "schema_version": expected,
                "revision": _revision(expected),
                "tether_version": __version__,
                "status": status,
            }
        )
    else:
        out = stdout()
        out.print(f"database:           {settings.safe_database_url}" + (f" (schema {settings.schema})" if settings.schema else ""))
        shown = "none (no Tether tables)" if stored is None else f"version {stored} (revision {_revision(stored)})"
        out.print(f"stored schema:      {shown}")
        out.print(f"this Tether:        {__version__} (schema version {expected}, revision {_revision(expected)})")
        out.print(f"status:             {status}: {advice}")
    if check and status != "current":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``tether db`` group to ``app``."""
    app.add_typer(db_app, name="db")


__all__ = ["db_app", "db_init", "db_upgrade", "db_version", "register"]

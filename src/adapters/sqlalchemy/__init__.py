"""Repositories on SQLAlchemy Core: the shared schema, SQLite and PostgreSQL.

:func:`open_repository` picks the repository from the URL::

    repo = open_repository("sqlite:///tether.db")
    repo = open_repository("postgresql+psycopg://app:secret@db/app", schema="tether", pool_size=20)
"""

from __future__ import annotations

import re

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from tether.adapters.sqlalchemy.migrations import SCHEMA_VERSION
from tether.adapters.sqlalchemy.postgres import PostgresJobRepository, normalize_postgres_url
from tether.adapters.sqlalchemy.repository import SqlAlchemyJobRepository
from tether.adapters.sqlalchemy.sqlite import SqliteJobRepository, cannot_open_problem, is_memory_url
from tether.domain.errors import ConfigurationError, StorageUnavailable, TetherError
from tether.domain.redaction import redact_url

POSTGRES_SCHEMES = ("postgresql", "postgresql+psycopg", "postgres")


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


#: libpq's own advice after a refused connection ("Is the server running on that host and accepting
#: TCP/IP connections?", or "... locally and accepting connections on that socket?").
_DRIVER_HINT = re.compile(r"\s*Is the server running\b[^?]*\?")
REACH_HINT = "is the server running and reachable at that host and port?"
SOCKET_HINT = "is the server running locally and accepting connections on that socket?"


def unreachable_problem(driver_message: str) -> str:
    """``cannot connect (<the driver's words>); <one hint>`` for a connection that failed.

    The driver's own "Is the server running ...?" sentence and psycopg's ``connection failed:``
    prefix are dropped, so the hint is said once: libpq's socket advice for a Unix socket, else
    :data:`REACH_HINT`.
    """
    first = " ".join(driver_message.split())
    hints = _DRIVER_HINT.findall(first)
    detail = _DRIVER_HINT.sub("", first).strip()
    detail = detail.removeprefix("connection failed: ").strip() or first
    hint = SOCKET_HINT if any("socket" in found for found in hints) else REACH_HINT
    return f"cannot connect ({detail}); {hint}"


def _check_reachable(repository: SqlAlchemyJobRepository) -> None:
    """Connect once; turn failures into a message naming the URL (password hidden) and what to do."""
    safe = repository.safe_url
    try:
        with repository.engine.connect():
            pass
    except sa_exc.DBAPIError as error:
        message = str(getattr(error, "orig", error)).strip() or type(error).__name__
        password = repository.engine.url.password
        if password:
            message = message.replace(str(password), "***")
        first = " ".join(message.split())
        lowered = first.lower()
        if "password authentication failed" in lowered or ("role" in lowered and "does not exist" in lowered):
            raise ConfigurationError(
                f"{safe}: the server refused the credentials ({first}); check the user and password in the "
                "database URL"
            ) from None
        if "database" in lowered and "does not exist" in lowered:
            raise ConfigurationError(
                f"{safe}: the database does not exist ({first}); create it (e.g. `createdb`) or fix the URL"
            ) from None
        if "unable to open database file" in lowered:
            raise ConfigurationError(f"{safe}: {cannot_open_problem(repository.engine.url.database or '')}") from None
        raise StorageUnavailable(f"{safe}: {unreachable_problem(first)}") from None


def open_repository(
    url: str, *, schema: str | None = None, create: bool = True, pool_size: int | None = None, check: bool = True
) -> SqlAlchemyJobRepository:
    """Open the SQL job repository for ``url``.

    Args:
        url: ``sqlite:///path/to.db`` (relative), ``sqlite:////abs/path.db``, ``sqlite:///:memory:``,
            ``postgresql+psycopg://user:pw@host:5432/db`` (``postgresql://`` means psycopg 3 too).
        schema: PostgreSQL schema for ``tether_jobs`` (created if missing when ``create``);
            must be None for SQLite.
        create: create Tether's tables if missing, or upgrade them to the current schema version
            (idempotent); when False they must exist at the current version already.
        pool_size: connections kept in the pool (default 10); size it to the worker threads plus
            the application's own use.
        check: with ``create=False``, check that the tables exist at the current version
            (default); False opens the repository without looking (``tether db version`` reads
            the stored version itself).

    Raises:
        ConfigurationError: an unknown URL scheme, bad schema name, wrong credentials, unknown
            database, a schema from a newer Tether, or (``create=False``) missing or outdated tables;
            the message names the URL with its password hidden and says what to run.
        StorageUnavailable: the server cannot be reached.
    """
    if not isinstance(url, (str, URL)):
        raise ConfigurationError(f"database_url: must be a string, got {type(url).__name__}")
    text_url = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    scheme = _scheme(text_url)
    repository: SqlAlchemyJobRepository
    try:
        if scheme in ("sqlite", "sqlite+pysqlite"):
            if schema is not None:
                raise ConfigurationError("schema: SQLite has no schemas; leave it unset for sqlite:// URLs")
            repository = SqliteJobRepository.from_url(make_url(text_url), pool_size=pool_size)
        elif scheme in POSTGRES_SCHEMES:
            repository = PostgresJobRepository.from_url(normalize_postgres_url(text_url), schema=schema, pool_size=pool_size)
        else:
            shown = text_url
            try:
                shown = make_url(text_url).render_as_string(hide_password=True)
            except Exception:  # noqa: BLE001 - unparsable: show only the scheme
                shown = f"{scheme or '?'}://..."
            raise ConfigurationError(
                f"database_url: {shown!r} is not a supported database URL "
                "(use sqlite:///path.db, sqlite:///:memory: or postgresql+psycopg://user@host/db)"
            )
    except TetherError:
        raise
    except (sa_exc.ArgumentError, ValueError) as error:  # a bad port or host raises a bare ValueError
        problem = str(error).splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigurationError(f"database_url: cannot parse {redact_url(text_url)!r} ({problem})") from None
    except ModuleNotFoundError as error:
        raise ConfigurationError(f"database_url: the driver for {scheme!r} is not installed ({error.name})") from None
    try:
        _check_reachable(repository)
        if create:
            repository.create_schema()
        elif check:
            repository.check_schema()
    except BaseException:
        repository.close()
        raise
    return repository


__all__ = [
    "SCHEMA_VERSION",
    "PostgresJobRepository",
    "SqlAlchemyJobRepository",
    "SqliteJobRepository",
    "is_memory_url",
    "open_repository",
]

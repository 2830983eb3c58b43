"""PostgreSQL connections: the URL, the engine and its pool, the raw driver path, and what driver errors mean.

- URLs: ``postgresql://`` and ``postgres://`` mean psycopg 3 (:func:`normalize_postgres_url`);
  a ``schema=`` must be a plain identifier, as it is interpolated into SQL
  (:func:`validate_schema_name`).
- The pool (:func:`create_postgres_engine`) pings a connection on checkout when it sat idle for
  more than :data:`PING_IF_IDLE` s (busy connections skip the extra round trip).
- :class:`PgConnections` is the base of the PostgreSQL repository's parts: the schema-qualified
  table name their SQL text uses, one statement sent straight on a pooled psycopg connection
  (:mod:`.pg_driver`) under the repository's unknown-outcome rules, which errors are transient
  (a lost or refused connection: retried) and how a missing table or schema reads.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Engine, make_url
from tether.adapters.sqlalchemy.pg_driver import autocommit_connection
from tether.adapters.sqlalchemy.repository import SqlAlchemyJobRepository
from tether.domain.errors import ConfigurationError, StorageUnavailable, TetherError

SCHEMA_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
DEFAULT_POOL_SIZE = 10


def validate_schema_name(schema: str | None) -> str | None:
    """None, or a plain PostgreSQL identifier (letters, digits, ``_``; at most 63 characters).

    Raises:
        ConfigurationError: anything else (it is interpolated into DDL).
    """
    if schema is None:
        return None
    if not isinstance(schema, str) or not SCHEMA_PATTERN.fullmatch(schema):
        raise ConfigurationError(
            f"schema: {schema!r} is not a schema name (1-63 of letters, digits and '_', not starting with a digit)"
        )
    return schema


def normalize_postgres_url(url: str | URL) -> URL:
    """``postgresql://`` and ``postgres://`` become ``postgresql+psycopg://`` (psycopg 3)."""
    if isinstance(url, str) and url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    url = make_url(url)
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url


def create_postgres_engine(
    url: str | URL, *, pool_size: int | None = None, connect_timeout: float = 10.0, application_name: str = "tether"
) -> Engine:
    """An engine with a pool of ``pool_size`` connections (default 10) plus as many overflow.
    A connection that sat idle in the pool for more than :data:`PING_IF_IDLE` seconds is pinged
    on checkout, so one killed by the server meanwhile (restart, idle timeout) is replaced, not
    used; a connection back in use within that time is not pinged (no extra round trip per lease
    or completion on a busy worker) and a failure on it is handled by the retry and
    unknown-outcome rules of the repository.
    ``application_name`` shows in ``pg_stat_activity``; ``connect_timeout`` is in seconds.

    Raises:
        ConfigurationError: a bad pool size.
    """
    url = normalize_postgres_url(url)
    size = DEFAULT_POOL_SIZE if pool_size is None else pool_size
    if size < 1:
        raise ConfigurationError(f"pool_size: must be >= 1, got {size}")
    engine = create_engine(
        url,
        pool_size=size,
        max_overflow=size,
        pool_pre_ping=False,
        pool_timeout=30,
        connect_args={"connect_timeout": max(1, int(connect_timeout)), "application_name": application_name},
    )
    _ping_idle_connections(engine)
    utc_sessions(engine)
    return engine


def utc_sessions(engine: Engine) -> None:
    """Every new connection of ``engine`` sets its session time zone to UTC.  Stored instants do not
    change (``timestamptz`` is absolute); psycopg then returns ``timestamptz`` values in
    ``datetime.timezone.utc`` itself, so reading a row converts no datetime (under a server default
    such as ``Etc/UTC`` every value came back in a ``ZoneInfo`` and was converted again: about a
    microsecond per column of every row the drain reads).

    The same for an asyncio engine's ``sync_engine``: its connections are SQLAlchemy's adapters,
    whose cursor awaits the driver inside the connect's greenlet."""

    @event.listens_for(engine, "connect")
    def _connected(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SET TIME ZONE 'UTC'")
        finally:
            cursor.close()
        dbapi_connection.commit()


#: Seconds a pooled connection may sit idle before its next checkout pings it first.
PING_IF_IDLE = 1.0


def _ping_idle_connections(engine: Engine) -> None:
    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info["tether_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        idle_since = record.info.get("tether_idle_since")
        if idle_since is None or time.monotonic() - idle_since <= PING_IF_IDLE:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise sa_exc.DisconnectionError(f"idle connection failed its ping: {error}") from error


class PgConnections(SqlAlchemyJobRepository):
    """The connection and error handling of :class:`~tether.adapters.sqlalchemy.postgres.PostgresJobRepository`."""

    @property
    def _qualified_table(self) -> str:
        return self._qualified_name(self.table.name)

    def _qualified_name(self, name: str) -> str:
        """A table ``name`` of this repository's schema, as SQL."""
        return f'"{self.schema}".{name}' if self.schema else name

    def _driver_once(self, doing: str, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """Run the one statement ``sql`` (psycopg ``%s``/``%(name)s`` parameters, prepared) in
        autocommit on a pooled psycopg connection (:mod:`.pg_driver`); its rows, asked for in
        binary format (the server writes no timestamp as text and psycopg parses none: about
        4 us a job less on the lease and completion statements).  The rules of
        :meth:`_write_once` (raises :class:`_UnknownOutcome` once the statement may have been
        sent; StorageUnavailable past the retries or for a non-transient error)."""
        return self._write_once(
            doing, lambda driver: driver.execute(sql, params, prepare=True, binary=True).fetchall(),
            connect=self._driver_connection,
        )

    @contextmanager
    def _driver_connection(self) -> Iterator[Any]:
        """:func:`.pg_driver.autocommit_connection` on this repository's engine (StorageUnavailable once closed)."""
        if self._closed:
            raise StorageUnavailable(f"{self.safe_url}: the repository was closed")
        with autocommit_connection(self.engine) as driver:
            yield driver

    def _is_transient(self, error: BaseException) -> bool:
        return isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError)) or (
            isinstance(error, sa_exc.DBAPIError) and bool(error.connection_invalidated)
        )

    def _translate(self, error: sa_exc.DBAPIError, doing: str) -> TetherError:
        message = str(getattr(error, "orig", error)).strip()
        if "does not exist" in message and ("relation" in message or "schema" in message):
            where = f"schema {self.schema!r}" if self.schema else "the default schema"
            return ConfigurationError(
                f"{self.safe_url}: the Tether table is missing in {where} ({message.splitlines()[0]}); "
                f"run `tether db init --database-url {self.safe_url}`"
                + (f" --schema {self.schema}" if self.schema else "")
            )
        return super()._translate(error, doing)


__all__ = [
    "DEFAULT_POOL_SIZE",
    "PING_IF_IDLE",
    "PgConnections",
    "create_postgres_engine",
    "normalize_postgres_url",
    "utc_sessions",
    "validate_schema_name",
]

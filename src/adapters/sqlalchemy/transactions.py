"""The SQL repository's transactions: its own unit of work, retries, unknown outcomes, the caller's transactions.

:class:`SqlTransactions` is the base of every part of
:class:`~tether.adapters.sqlalchemy.repository.SqlAlchemyJobRepository`: it holds the state they
share (engine, table, the cache of hot-path statements) and runs their work:

- :meth:`~SqlTransactions._read` and :meth:`~SqlTransactions._write` run one transaction and run it
  again on a transient error (lock timeout, lost connection), with backoff: for work that is safe
  to repeat;
- :meth:`~SqlTransactions._write_once` retries only what surely rolled back; when the connection
  dies while the COMMIT (or a one-statement write in autocommit) is under way, it raises
  :class:`_UnknownOutcome` and the caller reads the row back to learn what happened;
- ``connection=`` arguments join the caller's own transaction (a SQLAlchemy ``Connection``,
  ``Session`` or ``scoped_session``, or a driver connection: psycopg 3 or sqlite3, see
  :mod:`.driver_connections`) on the same database, never retried there, and
  :meth:`~SqlTransactions.on_commit` runs callbacks after it commits (:mod:`.commit_hooks`; a
  driver connection has no such hook, see :meth:`~SqlTransactions.on_commit`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, TypeVar

from sqlalchemy import MetaData, Table
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, scoped_session
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.sqlalchemy.commit_hooks import on_connection_commit, on_session_commit, run_safely
from tether.adapters.sqlalchemy.driver_connections import DriverConnections, driver_of
from tether.adapters.sqlalchemy.row_faults import SkippedRows
from tether.domain.errors import StorageRowError, StorageUnavailable, TetherError, ValidationError
from tether.domain.redaction import redact_url

log = logging.getLogger("tether.adapters.sqlalchemy")

#: Transient-error warnings are logged at most once per this many seconds (the rest at DEBUG),
#: so an outage costs a bounded number of log lines however many threads retry.
TRANSIENT_LOG_PERIOD = 1.0
_transient_limit = RateLimitedLog(log, TRANSIENT_LOG_PERIOD)


def _log_transient(message: str, *args: object) -> None:
    """Log a retried transient error: WARNING at most once per :data:`TRANSIENT_LOG_PERIOD`, else DEBUG."""
    loud = _transient_limit.admit() is not None
    log.log(logging.WARNING if loud else logging.DEBUG, message, *args)


T = TypeVar("T")



class _UnknownOutcome(Exception):
    """A statement's transaction may or may not have committed (the connection died mid-way)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


#: The connection every statement of the repository runs on while set, and where its after-commit
#: callbacks go (None: the connection's own commit) (see :func:`run_bound`).
_bound: ContextVar[tuple[Connection, list[Callable[[], None]] | None] | None] = ContextVar(
    "tether_bound_connection", default=None
)


def run_bound(conn: Connection, work: Callable[[], T], after_commit: list[Callable[[], None]] | None = None) -> T:
    """Run ``work`` with every statement of every SQL repository on ``conn``, in its transaction:
    the repository opens no connection of its own, joins ``conn`` as it joins a caller's
    (``connection=``) and never retries (the transaction is not its own to repeat).  Its
    after-commit callbacks run when ``conn`` commits, or, with ``after_commit`` (a connection the
    caller opened for this work alone and commits itself), are appended to that list for the
    caller to run once it committed.  The async API runs the sync statements so, on the sync face
    of an ``AsyncConnection`` (``AsyncConnection.run_sync``)."""
    token = _bound.set((conn, after_commit))
    try:
        return work()
    finally:
        _bound.reset(token)


def bound_connection() -> Connection | None:
    """The connection of the enclosing :func:`run_bound`, or None."""
    bound = _bound.get()
    return None if bound is None else bound[0]
#: SQLSTATE classes (first two characters) and codes of errors a row causes, not the connection or
#: the statement: data exceptions, constraints, triggered actions and data changes, routines
#: (a user's trigger raising), PL/pgSQL's RAISE, data and index corruption.
ROW_ERROR_CLASSES = frozenset({"09", "22", "23", "27", "2F", "38", "39", "44", "P0"})
ROW_ERROR_CODES = frozenset({"XX001", "XX002"})


def _row_caused(error: sa_exc.DBAPIError) -> bool:
    """True for an error a row caused (see :data:`ROW_ERROR_CLASSES`; without a SQLSTATE, as on
    SQLite: an integrity or data error, which a trigger's ``RAISE(ABORT, ...)`` is)."""
    sqlstate = getattr(getattr(error, "orig", None), "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate[:2] in ROW_ERROR_CLASSES or sqlstate in ROW_ERROR_CODES
    return isinstance(error, (sa_exc.IntegrityError, sa_exc.DataError))


class SqlTransactions:
    """The state every part of the SQL repository shares, and the transactions its work runs in.

    Attributes:
        engine: the SQLAlchemy engine (callers may use it for their own transactions).
        schema: PostgreSQL schema holding ``tether_jobs`` (None: the default search path).
        table: the ``tether_jobs`` :class:`Table` bound to this repository's schema.
    """

    engine: Engine
    schema: str | None
    metadata: MetaData
    table: Table
    #: Serialises use of a single shared connection (``sqlite:///:memory:``); None elsewhere.
    _serial: AbstractContextManager[Any] | None
    #: Hot-path statements built once, run with parameters.
    _statements: dict[Any, Any]
    _skipped: SkippedRows
    _closed: bool
    #: Lends callers' driver connections (psycopg, sqlite3) to this repository's statements.
    _drivers: DriverConnections

    #: Attempts of an operation hit by a transient storage error before StorageUnavailable.
    retry_attempts: int = 6
    #: First backoff between those attempts (seconds); doubles up to :attr:`retry_max_delay`.
    retry_base_delay: float = 0.02
    retry_max_delay: float = 1.0
    #: Run one-statement writes as their own transaction (no BEGIN/COMMIT round trips).
    single_statement_autocommit: bool = False

    @property
    def safe_url(self) -> str:
        """The database URL with its passwords hidden (the authority's and a ``password=`` query
        parameter's), for messages and logs."""
        return redact_url(self.engine.url.render_as_string(hide_password=True))

    # -- our own transactions and retries --------------------------------------------------------
    def _guard(self) -> AbstractContextManager[Any]:
        """Serialises use of a single shared connection (``sqlite:///:memory:``); else a no-op."""
        return self._serial if self._serial is not None else nullcontext()

    def _write_guard(self) -> AbstractContextManager[Any]:
        """Held around each write transaction (SQLite: an in-process lock per database file)."""
        return self._guard()

    @contextmanager
    def _begin(self, *, write: bool, single: bool = False) -> Iterator[Connection]:
        """A connection in a new transaction of this repository's own (write: the store's write lock).

        ``single``: the work is one statement (atomic by itself); where
        :attr:`single_statement_autocommit` is set it runs without BEGIN/COMMIT round trips.
        """
        if self._closed:
            raise StorageUnavailable(f"{self.safe_url}: the repository was closed")
        bound = _bound.get()
        if bound is not None:
            yield bound[0]
            return
        with self._write_guard() if write else self._guard(), self.engine.connect() as conn:
            if single and self.single_statement_autocommit:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn
                return
            conn.execution_options(tether_write=write)
            with conn.begin():
                yield conn

    def _is_transient(self, error: BaseException) -> bool:
        """True when ``error`` is worth retrying (lock timeout, lost connection)."""
        return isinstance(error, sa_exc.OperationalError) or (
            isinstance(error, sa_exc.DBAPIError) and bool(error.connection_invalidated)
        )

    def _unavailable(self, error: BaseException, doing: str) -> StorageUnavailable:
        reason = getattr(error, "orig", None) or error
        first = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
        return StorageUnavailable(
            f"{self.safe_url}: could not {doing}: {first} (retried; check that the database is reachable "
            "and not locked by a long transaction)"
        )

    def _backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based): doubling from
        :attr:`retry_base_delay` up to :attr:`retry_max_delay`, times 0.5-1.5 at random."""
        return min(self.retry_base_delay * (2**attempt), self.retry_max_delay) * (0.5 + random.random())

    def _sleep(self, attempt: int) -> None:
        time.sleep(self._backoff(attempt))

    def _retrying(self, doing: str, work: Callable[[], T]) -> T:
        """Run ``work`` (one whole transaction) again on transient errors, with backoff.

        Only for work that is safe to repeat: its transaction either committed or did nothing,
        and running it again after a commit is harmless (reads, idempotent writes).  Never
        repeated on a bound connection (:func:`run_bound`).
        """
        for attempt in range(1 if _bound.get() is not None else self.retry_attempts):
            try:
                return work()
            except sa_exc.DBAPIError as error:
                if not self._is_transient(error):
                    raise self._translate(error, doing) from error
                if attempt + 1 >= self.retry_attempts:
                    raise self._unavailable(error, doing) from error
                _log_transient(
                    "%s: transient error while trying to %s (attempt %d): %s", self.safe_url, doing, attempt + 1,
                    str(getattr(error, "orig", error)).splitlines()[0] if str(error) else type(error).__name__,
                )
                self._sleep(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _translate(self, error: sa_exc.DBAPIError, doing: str) -> TetherError:
        """A non-transient database error as a TetherError (the message never shows a password):
        :class:`StorageRowError` when a row caused it (a constraint, a trigger's exception, bad
        data), else StorageUnavailable."""
        if _row_caused(error):
            reason = str(getattr(error, "orig", None) or error).strip()
            first = reason.splitlines()[0] if reason else type(error).__name__
            return StorageRowError(f"{self.safe_url}: could not {doing}: a row was refused: {first}")
        return self._unavailable(error, doing)

    def _read(self, doing: str, work: Callable[[Connection], T], *, single: bool = True) -> T:
        """Read-only work, retried on transient errors (one-statement reads need no transaction
        where :attr:`single_statement_autocommit` is set; ``single=False``: a transaction of its
        own all the same, for a read that sets ``SET LOCAL`` options first)."""

        def once() -> T:
            with self._begin(write=False, single=single) as conn:
                return work(conn)

        return self._retrying(doing, once)

    def _write(self, doing: str, work: Callable[[Connection], T], *, single: bool = False) -> T:
        """One write transaction, retried on transient errors: only for work that is safe to
        repeat (idempotent, or whose outcome a repeat cannot double)."""

        def once() -> T:
            with self._begin(write=True, single=single) as conn:
                return work(conn)

        return self._retrying(doing, once)

    def _write_once(
        self,
        doing: str,
        work: Callable[[Any], T],
        *,
        single: bool = False,
        connect: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> T:
        """One write transaction that must not be repeated blindly.

        An error before the COMMIT was sent means the transaction rolled back: it is retried with
        backoff.  An error while committing (or during a ``single`` statement run as its own
        transaction) leaves the outcome unknown and raises :class:`_UnknownOutcome` for the
        caller to resolve by reading the row.  ``connect``, when given, opens the connection
        ``work`` runs on instead of :meth:`_begin`, as one statement in autocommit (e.g. a pooled
        driver connection); failing to open it is retried like a failure before COMMIT.
        """
        for attempt in range(1 if _bound.get() is not None else self.retry_attempts):
            unknown = False
            try:
                with self._begin(write=True, single=single) if connect is None else connect() as conn:
                    unknown = connect is not None or (single and self.single_statement_autocommit)
                    result = work(conn)
                    unknown = True  # leaving the block sends COMMIT
                return result
            except sa_exc.DBAPIError as error:
                if not self._is_transient(error):
                    raise self._translate(error, doing) from error
                if unknown:
                    raise _UnknownOutcome(error) from error
                if attempt + 1 >= self.retry_attempts:
                    raise self._unavailable(error, doing) from error
                self._sleep(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """This repository's own unit of work: a :class:`Connection` in a write transaction.

        ``with repo.transaction() as tx: repo.enqueue(..., connection=tx)`` commits on normal
        exit and rolls back if the block raises; :meth:`on_commit` callbacks run after commit.
        """
        try:
            with self._begin(write=True) as conn:
                yield conn
        except sa_exc.DBAPIError as error:
            raise self._unavailable(error, "run the transaction") from error

    # -- the caller's transactions ---------------------------------------------------------------
    def _same_database(self, conn: Connection) -> bool:
        ours, theirs = self.engine.url, conn.engine.url
        if conn.engine is self.engine or conn.engine.pool is self.engine.pool:
            return True
        if conn.dialect.name != self.engine.dialect.name:
            return False
        return (ours.host, ours.port, ours.database) == (theirs.host, theirs.port, theirs.database)

    def _caller_connection(self, connection: Any) -> AbstractContextManager[Connection] | None:
        """The Connection to run on for ``connection=`` (None: use our own transaction; the
        bound connection of :func:`run_bound` counts as the caller's), as a context manager: a
        driver connection is lent for the block's length only."""
        if connection is None:
            bound = bound_connection()
            return None if bound is None else nullcontext(bound)
        if isinstance(connection, scoped_session):
            connection = connection()  # the Session of the current scope (Flask-SQLAlchemy's db.session)
        if isinstance(connection, Session):
            conn = connection.connection()
        elif isinstance(connection, Connection):
            conn = connection
        elif type(connection).__name__ in ("AsyncConnection", "AsyncSession"):
            raise ValidationError(
                "connection", f"an {type(connection).__name__} joins through the async API (await app.aenqueue(...))"
            )
        elif driver_of(connection) is not None:
            return self._drivers.borrow(connection)
        else:
            raise ValidationError(
                "connection",
                "must be a SQLAlchemy Connection, Session or scoped_session, a psycopg Connection or a "
                f"sqlite3.Connection (or repository.transaction()), got {type(connection).__name__}",
            )
        if conn.closed or conn.invalidated:
            raise ValidationError("connection", "that connection is closed or invalidated")
        if not self._same_database(conn):
            raise ValidationError(
                "connection",
                f"is on {conn.engine.url.render_as_string(hide_password=True)}, not on this repository's database "
                f"{self.safe_url}",
            )
        return nullcontext(conn)

    def _on_caller(self, joined: AbstractContextManager[Connection], doing: str, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in the caller's transaction: no retries (the transaction is theirs)."""
        try:
            with joined as conn:
                return work(conn)
        except sa_exc.DBAPIError as error:
            raise self._unavailable(error, doing) from error

    def on_commit(self, connection: Any, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``connection``'s transaction commits; never after a rollback.

        ``connection`` is None (run at once, or at the commit of the bound connection of
        :func:`run_bound`), a Session, a scoped_session, a Connection, or the handle of
        :meth:`transaction`.  A callback that raises is logged and ignored.  A driver connection
        (psycopg, sqlite3) has no hook after its COMMIT: the callback is dropped (never run before
        the commit, when the job could not be seen yet), and the next poll or sweep finds the job.
        """
        if isinstance(connection, scoped_session):
            connection = connection()
        bound = _bound.get() if connection is None else None
        if bound is not None:
            connection, after_commit = bound
            if after_commit is not None:
                after_commit.append(callback)
                return
        if connection is None:
            run_safely(callback)
        elif driver_of(connection) is not None:
            log.debug("no commit hook on a %s connection: the next poll or sweep finds the job", driver_of(connection))
        elif isinstance(connection, Session):
            on_session_commit(connection, callback)
        elif isinstance(connection, Connection):
            on_connection_commit(connection, callback)
        else:
            raise ValidationError(
                "connection",
                "must be a SQLAlchemy Connection, Session or scoped_session, a psycopg Connection or a "
                f"sqlite3.Connection, got {type(connection).__name__}",
            )


__all__ = ["TRANSIENT_LOG_PERIOD", "SqlTransactions", "bound_connection", "run_bound"]

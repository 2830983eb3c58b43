"""``SqliteJobRepository``: the job repository on an SQLite file (or ``:memory:``).

Set-up (see :func:`create_sqlite_engine`):

- WAL journal, so readers never block the writer; ``synchronous=FULL`` by default, so a
  committed enqueue survives a power cut (``NORMAL`` is faster and survives a process crash);
- ``busy_timeout``: a connection waits this long for the write lock before SQLite says
  "database is locked";
- pysqlite's own transaction handling is switched off (``isolation_level = None``) and every
  transaction starts with an explicit ``BEGIN``: ``BEGIN IMMEDIATE`` for the repository's own
  write transactions (leases, completions, enqueues, ``transaction()``), so a write holds the
  write lock from its first statement and a lease's read and write are one atomic step that never
  fails half-way with ``SQLITE_BUSY_SNAPSHOT``; a plain (deferred) ``BEGIN`` for everything else:
  the repository's reads, and any connection a caller takes from :attr:`engine` (a handler's
  report query, a ``Session``), which therefore takes no write lock until it writes and never
  holds up the queue's own writes.  A caller's transaction whose first statement is a write takes
  the lock at that statement, waiting as a write does; one that reads first and writes later can
  ask for the lock up front with ``engine.connect().execution_options(tether_write=True)`` (else a
  write committed by another connection in between makes its own write fail with "database is
  locked");
- no foreign keys.

A "database is locked" that outlasts the busy timeout is retried with exponential backoff and,
if it persists, raised as :class:`~tether.domain.errors.StorageUnavailable`; it is never read as
"queue empty".  A locked write is always safe to retry: its transaction rolled back.

``sqlite:///:memory:`` uses one shared connection (StaticPool) guarded by a lock, for quick use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Integer, bindparam, create_engine, event, func, text, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection, Engine, Row, make_url
from sqlalchemy.pool import StaticPool
from tether.adapters.sqlalchemy.repository import SqlAlchemyJobRepository
from tether.adapters.sqlalchemy.schema import KEYED_PREDICATE
from tether.domain.errors import ConfigurationError, StorageUnavailable, TetherError
from tether.domain.lease import new_lease_token

DEFAULT_BUSY_TIMEOUT = 5.0
_file_locks: dict[str, threading.RLock] = {}
_file_locks_guard = threading.Lock()
#: id(file lock) -> ident of the thread whose write transaction holds it (set while held).
_write_owners: dict[int, int] = {}


def _file_lock(path: str) -> threading.RLock:
    """The in-process write lock of the database file at ``path`` (shared by its repositories)."""
    with _file_locks_guard:
        lock = _file_locks.get(path)
        if lock is None:
            lock = _file_locks[path] = threading.RLock()
        return lock


#: Seconds a thread waits for its process's write lock on a file before StorageUnavailable.
LOCAL_LOCK_WAIT = 30.0

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def describe_sqlite_path(path: str) -> str:
    """A database file ``path`` for a message: as written, plus where it lands when it is relative,
    plus the four-slash URL when the relative path reads like a mistyped absolute one
    (``tmp/x.db`` while a ``/tmp`` directory exists)."""
    if os.path.isabs(path):
        return path
    where = f"{path} (relative to the current directory: {os.path.abspath(path)}"
    top = path.split("/", 1)[0]
    if "/" in path and os.path.isdir(os.sep + top):
        where += f"; for /{path} write sqlite:////{path}"
    return where + ")"


def cannot_open_problem(path: str) -> str:
    """Why SQLite said "unable to open database file" for ``path``, as far as can be told."""
    directory = os.path.dirname(os.path.abspath(path))
    why = f"its directory {directory} does not exist" if not os.path.isdir(directory) else "is it writable?"
    return f"cannot open the SQLite file {describe_sqlite_path(path)}: {why}"


def is_memory_url(url: URL) -> bool:
    """True for ``sqlite://`` and ``sqlite:///:memory:``."""
    return url.database in (None, "", ":memory:")


def create_sqlite_engine(
    url: str | URL,
    *,
    pool_size: int | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    synchronous: str = "FULL",
) -> Engine:
    """An engine for the SQLite database at ``url`` set up as described in the module docstring.

    Args:
        url: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``.
        pool_size: connections kept open (default 10); a worker thread uses one at a time.
        busy_timeout: seconds to wait for the write lock before "database is locked".
        synchronous: SQLite's ``synchronous`` pragma (FULL, NORMAL, OFF, EXTRA).

    Raises:
        ConfigurationError: a bad ``synchronous`` value or pool size.
    """
    url = make_url(url)
    if synchronous.upper() not in SYNCHRONOUS_MODES:
        raise ConfigurationError(f"synchronous: {synchronous!r} is not one of {', '.join(SYNCHRONOUS_MODES)}")
    if pool_size is not None and pool_size < 1:
        raise ConfigurationError(f"pool_size: must be >= 1, got {pool_size}")
    memory = is_memory_url(url)
    connect_args: dict[str, Any] = {"check_same_thread": False, "timeout": busy_timeout}
    if memory:
        engine = create_engine(url, connect_args=connect_args, poolclass=StaticPool)
    else:
        size = pool_size or 10
        engine = create_engine(url, connect_args=connect_args, pool_size=size, max_overflow=2 * size, pool_timeout=60)
    sync = synchronous.upper()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        try:
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            cursor.execute(f"PRAGMA synchronous={sync}")
        finally:
            cursor.close()
        dbapi_connection.create_function("tether_lease_token", 0, new_lease_token)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Only the repository's write transactions (and callers who ask) take the write lock up
        # front: a read holding it would stop every enqueue, lease and completion meanwhile.
        write = conn.get_execution_options().get("tether_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


class SqliteJobRepository(SqlAlchemyJobRepository):
    """A :class:`~tether.ports.repository.JobRepository` on an SQLite database file.

    Several processes may share one file (each with its own repository); every write holds the
    database's write lock for one short transaction.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, schema=None)
        if is_memory_url(engine.url):
            self._serial = threading.RLock()
            self._file_lock = self._serial
        else:
            self._file_lock = _file_lock(os.path.abspath(engine.url.database or ""))

    @contextmanager
    def _write_guard(self) -> Iterator[None]:
        """Threads of one process queue on a lock for the file's write lock instead of polling it
        through SQLite's busy handler (which sleeps in steps of up to 100 ms); other processes
        still meet ``busy_timeout``.  Waiting longer than :data:`LOCAL_LOCK_WAIT` seconds raises
        StorageUnavailable (a thread holding ``transaction()`` open too long), never a hang."""
        key = id(self._file_lock)
        if self._serial is None and _write_owners.get(key) == threading.get_ident():
            # This thread's own open write transaction holds the file: SQLite would make the new
            # one wait out its busy timeout on every retry (about 30 s) and then say "locked".
            raise StorageUnavailable(
                f"{self.safe_url}: this thread already has a write transaction open on this SQLite file "
                "(inside `with app.transaction() as tx:`); pass connection=tx to enqueue in it"
            )
        if not self._file_lock.acquire(timeout=LOCAL_LOCK_WAIT):
            raise StorageUnavailable(
                f"{self.safe_url}: database is locked: another thread of this process held the write "
                f"lock for more than {LOCAL_LOCK_WAIT:.0f} s (a long transaction() block?)"
            )
        owner = _write_owners.get(key)
        _write_owners[key] = threading.get_ident()
        try:
            yield
        finally:
            if owner is None:
                _write_owners.pop(key, None)
            else:
                _write_owners[key] = owner
            self._file_lock.release()

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        pool_size: int | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: str = "FULL",
    ) -> SqliteJobRepository:
        """A repository on ``url`` (see :func:`create_sqlite_engine`); does not create the table."""
        return cls(create_sqlite_engine(url, pool_size=pool_size, busy_timeout=busy_timeout, synchronous=synchronous))

    @property
    def path(self) -> str | None:
        """The database file's absolute path (None for ``:memory:``)."""
        database = self.engine.url.database
        return None if is_memory_url(self.engine.url) or database is None else os.path.abspath(database)

    def _is_transient(self, error: BaseException) -> bool:
        if not isinstance(error, sa_exc.OperationalError):
            return False
        message = str(getattr(error, "orig", error)).lower()
        return "locked" in message or "busy" in message

    def _translate(self, error: sa_exc.DBAPIError, doing: str) -> TetherError:
        message = str(getattr(error, "orig", error))
        if "no such table" in message:
            return ConfigurationError(
                f"{self.safe_url}: the Tether table is missing ({message}); run `tether db init --database-url {self.safe_url}`"
            )
        if "unable to open database file" in message:
            return ConfigurationError(f"{self.safe_url}: {cannot_open_problem(self.engine.url.database or '')}")
        return super()._translate(error, doing)

    def _insert_ignoring_key_conflicts(self) -> Any:
        return sqlite_insert(self.table).on_conflict_do_nothing(
            index_elements=[self.table.c.idempotency_key], index_where=text(KEYED_PREDICATE)
        )

    def _lease_rows(
        self, conn: Connection, *, queues: Any, worker_id: str, now: Any, lease_timeout: float, limit: int,
        skip: Sequence[int] = (), job_types: Sequence[str] | None = None, limited: bool = True,
    ) -> list[Row[Any]]:
        shape = self._queue_shape(queues)
        typed = job_types is not None
        key = ("lease", shape, bool(skip), "typed") if typed else ("lease", shape, bool(skip))
        stmt = self._statements.get(key)
        if stmt is None:
            t = self.table
            chosen = (
                t.select()
                .with_only_columns(t.c.id)
                .where(*self._due_filter_params(shape, skip=bool(skip), typed=typed))
                .order_by(*self._lease_order())
                .limit(bindparam("p_limit", type_=Integer()))
                .scalar_subquery()
            )
            stmt = (
                update(t)
                .where(t.c.id.in_(chosen))
                .values(**self._lease_values_params(func.tether_lease_token()))
                .returning(*t.c)
            )
            self._statements[key] = stmt
        params = self._lease_params(queues, worker_id, now, lease_timeout, limit)
        if skip:
            params["p_skip"] = list(skip)
        if job_types is not None:
            params["p_types"] = list(job_types)
        rows = list(conn.execute(stmt, params))
        if limited:  # the limited queues, in this same write transaction (SQLite has one writer at a time)
            rows += self._limited_rows(
                conn, queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit - len(rows),
                skip=skip, job_types=job_types,
            )
        return rows

    def _lease_token_expression(self) -> Any:
        return func.tether_lease_token()


__all__ = ["DEFAULT_BUSY_TIMEOUT", "SqliteJobRepository", "create_sqlite_engine", "is_memory_url"]

"""One statement straight on a pooled psycopg connection, and jobs from its raw rows: PostgreSQL's latency path.

SQLAlchemy's execution machinery (compiled-statement cache lookup, parameter processing, result
set-up, autocommit switching on the Connection) costs about half a millisecond per statement on
an idle worker whose caches went cold between two jobs, which is as much as the round trip
itself.  The hottest single statements (an enqueue without an idempotency key, the lease) are
therefore sent through :func:`autocommit_connection`: the connection comes from the engine's own
pool (so pool size, the idle-connection ping and invalidation rules stay one), runs in autocommit
for that one statement (a single statement is atomic by itself), and errors come back wrapped as
SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError` so the repository's retry and unknown-outcome
rules apply unchanged.  The SQL itself is still ours and fixed; only the plumbing is thinner.
The rows come back as plain tuples, and :func:`job_from_tuple` reads a job from them by position.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from tether.adapters.sqlalchemy.history_sql import fold_kept_attempt, history_from_json
from tether.domain.job import Job, JobStatus
from tether.domain.timeutil import UTC


@contextmanager
def autocommit_connection(engine: Engine) -> Iterator[psycopg.Connection[Any]]:
    """A psycopg connection from ``engine``'s pool, in autocommit mode until the block ends.

    A psycopg error raised in the block is re-raised as the matching
    :class:`sqlalchemy.exc.DBAPIError` subclass (``OperationalError`` …) with
    ``connection_invalidated`` set when the connection is broken; a broken connection is
    invalidated in the pool (never handed out again), a healthy one goes back in transaction mode.

    Raises:
        sqlalchemy.exc.DBAPIError: checking out a connection failed, or the block raised a
            psycopg error.
    """
    try:
        fairy = engine.raw_connection()
    except psycopg.Error as error:  # the pool's connect (unlike Engine.connect) does not wrap driver errors
        raise sa_exc.DBAPIError.instance(None, None, error, psycopg.Error) from error
    driver: psycopg.Connection[Any] = fairy.driver_connection  # type: ignore[assignment]
    broken = False
    try:
        driver.autocommit = True
        yield driver
    except psycopg.Error as error:
        broken = bool(driver.closed or driver.broken)
        if broken:
            fairy.invalidate(error)
        raise sa_exc.DBAPIError.instance(None, None, error, psycopg.Error, connection_invalidated=broken) from error
    finally:
        if not broken:
            try:
                driver.autocommit = False
            except psycopg.Error as error:  # the connection died after the statement: drop it
                fairy.invalidate(error)
        fairy.close()


_STATUSES = {status.value: status for status in JobStatus}
#: The columns :func:`job_from_tuple` reads, in its order (statements list them explicitly).
JOB_COLUMNS = (
    "id", "job_type", "queue", "payload", "priority", "status", "attempts", "max_attempts", "scheduled_at",
    "created_at", "idempotency_key", "lease_token", "leased_by", "leased_at", "lease_expires_at", "last_error",
    "finished_at", "cancel_requested_at", "history", "headers", "concurrency_key",
)


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is UTC:
        return value
    return value.astimezone(UTC)  # timestamptz comes back in the session's zone


def job_from_tuple(row: Sequence[Any]) -> Job:
    """The :class:`Job` of the first 21 columns of a raw row, in :data:`JOB_COLUMNS` order
    (what :func:`~tether.adapters.sqlalchemy.mapping.row_to_job` gives, without SQLAlchemy's
    per-column result processing: psycopg already returns ``int``/``str``/aware datetimes)."""
    status = _STATUSES[row[5]]
    leased_by, leased_at, finished_at = row[12], _utc(row[13]), _utc(row[16])
    history = history_from_json(row[18])
    if leased_at is not None and row[11] is None:  # no token: a completed attempt kept in the lease columns
        leased_by, leased_at, history = fold_kept_attempt(status, row[6], leased_by, leased_at, finished_at, history)
    return Job(
        id=row[0], job_type=row[1], queue=row[2], payload_json=row[3], priority=row[4], status=status,
        attempts=row[6], max_attempts=row[7], scheduled_at=_utc(row[8]), created_at=_utc(row[9]),  # type: ignore[arg-type]
        idempotency_key=row[10], lease_token=row[11], leased_by=leased_by, leased_at=leased_at,
        lease_expires_at=_utc(row[14]), last_error=row[15], finished_at=finished_at,
        cancel_requested_at=_utc(row[17]), history=history, headers_json=row[19],
        concurrency_key=row[20],
    )


__all__ = ["JOB_COLUMNS", "autocommit_connection", "job_from_tuple"]

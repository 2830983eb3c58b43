"""One statement straight on a pooled psycopg connection: the latency path of PostgreSQL.

SQLAlchemy's execution machinery (compiled-statement cache lookup, parameter processing, result
set-up, autocommit switching on the Connection) costs about half a millisecond per statement on
an idle worker whose caches went cold between two jobs, which is as much as the round trip
itself.  The hottest single statements (an enqueue without an idempotency key, the lease) are
therefore sent through :func:`autocommit_connection`: the connection comes from the engine's own
pool (so pool size, the idle-connection ping and invalidation rules stay one), runs in autocommit
for that one statement (a single statement is atomic by itself), and errors come back wrapped as
SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError` so the repository's retry and unknown-outcome
rules apply unchanged.  The SQL itself is still ours and fixed; only the plumbing is thinner.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine


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


__all__ = ["autocommit_connection"]

"""Run callbacks after the caller's transaction commits, never after it rolls back.

Used by :meth:`SqlAlchemyJobRepository.on_commit` so that a dispatcher hears of a job only once
the transaction that inserted it has committed (case C09).

- ORM ``Session``: the ``after_commit`` event of the outermost transaction runs the callbacks (it
  fires after the database COMMIT).  A savepoint released (``begin_nested`` committed) hands its
  callbacks to the enclosing transaction; a savepoint or transaction rolled back drops them
  (``after_soft_rollback``); the end of the outermost transaction drops any left over.
- Core ``Connection``: SQLAlchemy's ``commit`` event fires *before* the driver's COMMIT, so it
  only marks the callbacks as committing; they run at the first point known to follow a
  successful COMMIT: the connection's next ``begin`` or its return to the pool (``checkin``,
  which ``with engine.begin():`` reaches at once).  A failed COMMIT (``handle_error``) or a
  rollback drops them; so does a rolled-back savepoint they were registered in.

A callback that raises is logged and ignored: the commit already happened.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, SessionTransaction

log = logging.getLogger("tether.adapters.sqlalchemy")

_SESSION_KEY = "tether.on_commit"
_PENDING_KEY = "tether.on_commit.pending"
_COMMITTING_KEY = "tether.on_commit.committing"

Callback = Callable[[], None]


def run_safely(callback: Callback) -> None:
    """Call ``callback``; log (never raise) whatever it raises."""
    try:
        callback()
    except Exception:
        log.exception("an after-commit callback raised; ignored (the transaction is committed)")


# -- ORM Session -----------------------------------------------------------------------------
def _session_entries(session: Session) -> list[list[Any]]:
    entries = session.info.get(_SESSION_KEY)
    if entries is None:
        entries = []
        session.info[_SESSION_KEY] = entries
        event.listen(session, "after_commit", _session_after_commit)
        event.listen(session, "after_soft_rollback", _session_after_soft_rollback)
        event.listen(session, "after_transaction_end", _session_after_transaction_end)
    return entries  # type: ignore[no-any-return]


def _session_after_commit(session: Session) -> None:
    entries: list[list[Any]] = session.info.get(_SESSION_KEY, [])
    if session.in_nested_transaction():
        nested = session.get_nested_transaction()
        for entry in entries:
            if entry[0] is nested and nested is not None:
                entry[0] = nested.parent
        return
    ready = [entry[1] for entry in entries]
    entries.clear()
    for callback in ready:
        run_safely(callback)


def _session_after_soft_rollback(session: Session, previous: SessionTransaction) -> None:
    entries: list[list[Any]] = session.info.get(_SESSION_KEY, [])
    if previous.parent is None:
        entries.clear()
    else:
        entries[:] = [e for e in entries if e[0] is not previous]


def _session_after_transaction_end(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:
        session.info.get(_SESSION_KEY, []).clear()


def on_session_commit(session: Session, callback: Callback) -> None:
    """Run ``callback`` after ``session``'s current transaction commits (at once if none)."""
    owner = session.get_nested_transaction() or session.get_transaction()
    if owner is None:
        run_safely(callback)
        return
    _session_entries(session).append([owner, callback])


# -- Core Connection -------------------------------------------------------------------------
_hooked_engines: weakref.WeakSet[Engine] = weakref.WeakSet()


def _savepoint_names(connection: Connection) -> frozenset[str]:
    names = set()
    nested = connection.get_nested_transaction()
    while nested is not None:
        name = getattr(nested, "_savepoint", None)
        if name:
            names.add(name)
        nested = getattr(nested, "_previous_nested", None)
    return frozenset(names)


def _info(connection: Any) -> dict[Any, Any]:
    return connection.info  # type: ignore[no-any-return]


def _on_commit_event(connection: Connection) -> None:
    info = _info(connection)
    pending = info.pop(_PENDING_KEY, None)
    if pending:
        info.setdefault(_COMMITTING_KEY, []).extend(cb for _, cb in pending)


def _flush_committed(info: dict[Any, Any]) -> None:
    ready = info.pop(_COMMITTING_KEY, None)
    info.pop(_PENDING_KEY, None)
    for callback in ready or ():
        run_safely(callback)


def _on_begin_event(connection: Connection) -> None:
    _flush_committed(_info(connection))


def _on_rollback_event(connection: Connection) -> None:
    _info(connection).pop(_PENDING_KEY, None)


def _on_rollback_savepoint(connection: Connection, name: str, context: Any) -> None:
    info = _info(connection)
    pending = info.get(_PENDING_KEY)
    if pending:
        info[_PENDING_KEY] = [(names, cb) for names, cb in pending if name not in names]


def _on_handle_error(context: Any) -> None:
    connection = context.connection
    if connection is not None:
        with contextlib.suppress(Exception):  # an invalidated connection may have no info left
            _info(connection).pop(_COMMITTING_KEY, None)


def _on_checkin(dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        _flush_committed(record.info)


def _hook_engine(engine: Engine) -> None:
    if engine in _hooked_engines:
        return
    _hooked_engines.add(engine)
    event.listen(engine, "commit", _on_commit_event)
    event.listen(engine, "begin", _on_begin_event)
    event.listen(engine, "rollback", _on_rollback_event)
    event.listen(engine, "rollback_savepoint", _on_rollback_savepoint)
    event.listen(engine, "handle_error", _on_handle_error)
    event.listen(engine.pool, "checkin", _on_checkin)


def on_connection_commit(connection: Connection, callback: Callback) -> None:
    """Run ``callback`` after ``connection``'s current transaction commits (at once if none)."""
    if not connection.in_transaction():
        run_safely(callback)
        return
    _hook_engine(connection.engine)
    _info(connection).setdefault(_PENDING_KEY, []).append((_savepoint_names(connection), callback))


__all__ = ["on_connection_commit", "on_session_commit", "run_safely"]

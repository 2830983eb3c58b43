"""The reaper on PostgreSQL as one statement: :func:`tether.domain.transitions.reap` in SQL.

One pass takes back up to ``p_limit`` expired leases with one ``UPDATE``, whatever their number::

    WITH expired AS (
        SELECT id, lease_token, lease_expires_at FROM tether_jobs
        WHERE status = 'running' AND lease_expires_at <= :now
        ORDER BY lease_expires_at, id LIMIT :limit
        FOR UPDATE SKIP LOCKED)
    UPDATE tether_jobs AS j SET status = 'cancelled' | 'retrying' | 'dead', ... , lease columns = NULL
    FROM expired
    WHERE j.id = expired.id AND j.lease_token = expired.lease_token
      AND j.lease_expires_at = expired.lease_expires_at
    RETURNING j.*, expired.lease_expires_at

Fencing: ``expired`` locks each row it returns, so nothing can write the row between the read and
the write.  A row another transaction holds (a heartbeat, a completion, another reaper) is skipped,
not waited for, and one changed and committed after the statement's snapshot is re-checked on its
newest version (a renewed lease no longer qualifies).  The outer ``WHERE`` is besides a
compare-and-set on the lease that was read (token and expiry; a token is only ever set on a
running row), as every reaper write is (DESIGN "Leases and fencing"): the statement stays correct
even without the lock, a concurrent writer's change then fails it.  It names no ``status`` on
purpose: that would let the planner walk the running-expiry index for the outer row instead of the
primary key, once per expired row, when its statistics are stale.

The row written is exactly what :func:`~tether.domain.transitions.reap` makes of it, decided on the
locked row: ``cancelled`` finished at ``now`` when a cancellation was requested; else ``retrying``
due at ``now`` while ``attempts < max_attempts`` (``finished_at`` kept, NULL on a running row),
else ``dead`` finished at ``now`` (``scheduled_at`` kept; the same for ``cancelled``); ``attempts``
unchanged; the lease cleared; ``last_error`` the (plain) text of
:func:`~tether.domain.transitions.reap_error`, rendered by :data:`REAP_ERROR_SQL`; the attempt
appended to ``history`` as ``lease_lost`` (or ``cancelled``) with that error
(:data:`REAP_HISTORY_SQL`).  The contract
suite compares every reaped row with the domain function's result, so the two cannot drift apart
unnoticed.
"""

from __future__ import annotations

from tether.adapters.sqlalchemy.history_sql import append_sql, or_cancelled

#: ``j.lease_expires_at.isoformat(timespec="microseconds")`` of an aware UTC datetime.
_EXPIRY_ISO_SQL = "to_char(j.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || '+00:00'"

#: :func:`tether.domain.transitions.reap_error` of the row ``j`` (its values before the update).
REAP_ERROR_SQL = (
    f"'LeaseExpired: lease of worker ' || coalesce(j.leased_by, '?') || ' expired at ' || {_EXPIRY_ISO_SQL} "
    "|| ' without a heartbeat; the worker was lost (attempt ' || CAST(j.attempts AS text) "
    "|| ' of ' || CAST(j.max_attempts AS text) || ')'"
)


#: The row ``j``'s history with its attempt appended as ended at ``%(p_now)s``: ``lease_lost``
#: (``cancelled`` when a cancellation was requested), the error :data:`REAP_ERROR_SQL`.
REAP_HISTORY_SQL = append_sql(
    "postgresql", outcome=or_cancelled("'lease_lost'", "j"), error=REAP_ERROR_SQL, ended="CAST(%(p_now)s AS timestamptz)",
    row="j",
)


def reap_statement(table: str, columns: tuple[str, ...]) -> str:
    """The reap statement on ``table`` (a quoted, schema-qualified name), with psycopg parameters
    ``%(p_now)s`` (aware UTC datetime) and ``%(p_limit)s`` (int).

    Rows come back as ``columns`` of the written row (in that order), then the expiry of the lease
    that was taken back (the order of a pass: ``lease_expires_at``, then id).
    """
    returning = ", ".join(f"j.{name}" for name in columns)
    retry = "j.cancel_requested_at IS NULL AND j.attempts < j.max_attempts"
    return (
        f"WITH expired AS (SELECT id, lease_token, lease_expires_at FROM {table} "
        "WHERE status = 'running' AND lease_expires_at <= %(p_now)s "
        "ORDER BY lease_expires_at, id LIMIT %(p_limit)s FOR UPDATE SKIP LOCKED) "
        f"UPDATE {table} AS j SET "
        f"status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' WHEN {retry} THEN 'retrying' "
        "ELSE 'dead' END, "
        f"scheduled_at = CASE WHEN {retry} THEN %(p_now)s ELSE j.scheduled_at END, "
        f"finished_at = CASE WHEN {retry} THEN j.finished_at ELSE %(p_now)s END, "
        f"last_error = {REAP_ERROR_SQL}, "
        f"history = {REAP_HISTORY_SQL}, "
        "lease_token = NULL, leased_by = NULL, leased_at = NULL, lease_expires_at = NULL "
        "FROM expired WHERE j.id = expired.id AND j.lease_token = expired.lease_token "
        "AND j.lease_expires_at = expired.lease_expires_at "
        f"RETURNING {returning}, expired.lease_expires_at"
    )


__all__ = ["REAP_ERROR_SQL", "REAP_HISTORY_SQL", "reap_statement"]

"""The per-key running limit in PostgreSQL's limited-queue lease: the SQL fragments :mod:`.pg_leases` puts in shape ``limited_key``.

A queue with ``max_running_per_key`` (as the list of limited queues last read says) is leased with
them (its row locked, then this statement); the other limited queues keep the statement without
them (which leases nothing from a queue whose per-key limit was set since that list was read, so
the limit is never overshot while the list is stale).  Cleared since, they change nothing: no key
is ever full, every row passes.

- :func:`room`: the queue's room under ``max_running`` and its rate limit, or ``p_limit`` when it
  has neither (the key rule then cuts the rows);

- :func:`ranked_chosen`: first ``held``, the queue's running jobs with unexpired leases per key,
  read once from ``ix_tether_jobs_running_key`` (keyed running rows only); then, around the due
  scan's rows (at most ``p_limit``, locked), each key's rows numbered in lease order, kept while
  that number plus the key's ``held`` count stays within the limit (so the lease's own jobs
  count), then cut to the queue's free slots;
- :func:`key_filter`, in the due scan: a job whose key already has ``max_running_per_key`` in
  ``held`` is passed over, so it never hides the jobs behind it (a hashed subplan).

Parameters: ``p_queue``, ``p_now`` (as the rest of the lease statement).
"""

from __future__ import annotations

#: The per-key limit of a queue without one: larger than any count.
_NO_KEY_LIMIT = 2_147_483_647


def _per_key(controls: str) -> str:
    return f"(SELECT kc.max_running_per_key FROM {controls} AS kc WHERE kc.name = %(p_queue)s)"


def _running_keyed(table: str) -> str:
    """The queue's keyed running rows with unexpired leases (alias ``r``), as a FROM ... WHERE."""
    return (
        f"FROM {table} AS r WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL "
        "AND r.queue = %(p_queue)s AND r.lease_expires_at > %(p_now)s"
    )


def room(controls: str, least: str) -> str:
    """The queue's room: ``least`` (the smaller of its running limit's and rate limit's rooms,
    NULL for neither) or ``p_limit``, never below 0; none when it is paused or not limited."""
    return (
        f"SELECT GREATEST(COALESCE({least}, %(p_limit)s), 0) "
        f"FROM {controls} AS c WHERE c.name = %(p_queue)s AND NOT c.paused "
        "AND (c.max_running IS NOT NULL OR c.rate_limit IS NOT NULL OR c.max_running_per_key IS NOT NULL)"
    )


def key_filter(table: str, controls: str) -> str:
    """`` AND (...)``: the due rows whose key (if any) is not at the queue's per-key limit (the
    keys of ``held``, the CTE of :func:`ranked_chosen`)."""
    return (
        " AND (concurrency_key IS NULL OR concurrency_key NOT IN "
        f"(SELECT h.concurrency_key FROM held AS h WHERE h.n >= {_per_key(controls)}))"
    )


def ranked_chosen(table: str, controls: str, due: str, free_slots: str) -> str:
    """The ids to lease: the rows of ``due`` (``FROM ... LIMIT ... FOR UPDATE SKIP LOCKED``)
    within each key's remaining room, in lease order, at most ``free_slots``.  ``held``, the
    queue's running jobs per key, is read once (one range of ``ix_tether_jobs_running_key``) for
    both the full keys and each key's room."""
    order = "priority DESC, {0}scheduled_at, {0}id"
    held = f"SELECT r.concurrency_key, count(*) AS n {_running_keyed(table)} GROUP BY r.concurrency_key"
    return (
        f"WITH held AS MATERIALIZED ({held}) "
        "SELECT ranked.id FROM (SELECT picked.id, picked.priority, picked.scheduled_at, picked.concurrency_key, "
        f"row_number() OVER (PARTITION BY picked.concurrency_key ORDER BY picked.{order.format('picked.')}) AS rn "
        f"FROM (SELECT id, priority, scheduled_at, concurrency_key {due}) AS picked) AS ranked "
        "LEFT JOIN held ON held.concurrency_key = ranked.concurrency_key "
        "WHERE ranked.concurrency_key IS NULL "
        f"OR ranked.rn + COALESCE(held.n, 0) <= COALESCE({_per_key(controls)}, {_NO_KEY_LIMIT}) "
        f"ORDER BY ranked.{order.format('ranked.')} LIMIT {free_slots}"
    )


__all__ = ["key_filter", "ranked_chosen", "room"]

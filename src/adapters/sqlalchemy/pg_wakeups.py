"""Wake-ups on PostgreSQL: the ``NOTIFY`` sent with each write that makes a job leasable, when enabled.

With wake-ups enabled (:meth:`PgWakeups.enable_wakeups`, which ``tether.connect(..., listen=True)``
calls), every statement or transaction that makes a job ``queued`` or ``retrying`` also sends
``pg_notify(channel, payload)``, so listening workers (:mod:`tether.adapters.pg_notify`) learn of
it the moment it commits, and never before: a notification is delivered only when its transaction
commits, and a rolled-back enqueue sends nothing.

- **Channel**: one per schema, ``tether_`` plus 40 hex digits of SHA-256 of the schema name
  (:func:`channel_name`, 47 bytes, within PostgreSQL's 63-byte identifier limit), so two
  applications on one database, each in its schema, do not wake each other.
- **Payload**: ``"<due time as Unix seconds> <queue>"`` (:func:`wakeup_payload`), so a worker can
  keep a timer for a job due later and skip queues it does not serve.
- **Where**: the single enqueue without a key and outside a caller's transaction sends it in its
  one statement (a CTE around the ``INSERT``, :func:`notifying_insert`); an enqueue in a caller's
  transaction, a keyed one and a bulk one send one ``SELECT pg_notify`` per queue (the earliest due
  time) in the same transaction, on the same connection (:meth:`PgWakeups._send_wakeups`); a
  retry, a snooze and a release wrap their fenced ``UPDATE`` in a CTE that notifies for the row it
  wrote (:meth:`PgWakeups._fenced_statement`).
- A queue's controls: a write that lets a queue start jobs again (resume, a limit set, changed or
  cleared) notifies the queue as due now in its upsert's transaction
  (:meth:`PgWakeups._upsert_queue`), so listening workers of every process lease its due jobs
  at once instead of at their next poll; a pause sends nothing.
- **Cost**: nothing when disabled (the statements are the plain ones).  When enabled, PostgreSQL
  serialises the commits of notifying transactions on one lock, which lowers the rate of many
  concurrent single enqueues (see docs/operations.md for the figures).

The reaper, an operator's retry and cancellations send nothing: workers find those jobs at their
next poll, which stays on as the safety net.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Text, cast, extract, func, literal, select
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy.pg_connections import PgConnections
from tether.domain.job import Job

#: The fenced writes that make a job leasable again (retry: ``retrying``; snooze and release: ``queued``).
NOTIFYING_FENCED_KINDS = frozenset({"retry", "snooze"})


def channel_name(schema: str | None) -> str:
    """The ``LISTEN``/``NOTIFY`` channel of the jobs table in ``schema`` (None: the search path's),
    47 bytes of lowercase ASCII: ``tether_`` + the first 40 hex digits of SHA-256 of the name."""
    digest = hashlib.sha256(f"tether.jobs:{schema or ''}".encode()).hexdigest()
    return f"tether_{digest[:40]}"


def wakeup_payload(queue: str, due: datetime) -> str:
    """``"<due as Unix seconds, microseconds> <queue>"`` for a job of ``queue`` due at ``due`` (aware)."""
    return f"{due.timestamp():.6f} {queue}"


def notifying_insert(insert_sql: str) -> str:
    """``insert_sql`` (an ``INSERT ... RETURNING id`` with ``%s`` parameters) as one statement that
    also notifies: ``WITH ins AS (<insert> , queue, scheduled_at) SELECT id, pg_notify(%s, ...)``.
    The channel is its last parameter."""
    returning = insert_sql.rsplit(" RETURNING id", 1)[0] + " RETURNING id, queue, scheduled_at"
    return (
        f"WITH ins AS ({returning}) "
        "SELECT id, pg_notify(%s, extract(epoch FROM scheduled_at)::text || ' ' || queue) FROM ins"
    )


class PgWakeups(PgConnections):
    """The switch and the statements of wake-ups (see the module docstring)."""

    #: The channel notified by writes that make a job leasable; None while wake-ups are off.
    wakeup_channel: str | None = None

    def enable_wakeups(self) -> str:
        """Make every enqueue, retry, snooze and release of this repository ``NOTIFY`` the schema's
        channel in its own transaction; returns the channel name (see :func:`channel_name`)."""
        self.wakeup_channel = channel_name(self.schema)
        return self.wakeup_channel

    def _send_wakeups(self, conn: Connection, jobs: Iterable[Job]) -> None:
        """In ``conn``'s open transaction, one ``pg_notify`` per queue of ``jobs`` with its earliest
        due time (nothing when wake-ups are off or ``jobs`` is empty)."""
        channel = self.wakeup_channel
        if channel is None:
            return
        earliest: dict[str, datetime] = {}
        for job in jobs:
            due = earliest.get(job.queue)
            if due is None or job.scheduled_at < due:
                earliest[job.queue] = job.scheduled_at
        for queue, due in earliest.items():
            conn.exec_driver_sql("SELECT pg_notify(%(c)s, %(p)s)", {"c": channel, "p": wakeup_payload(queue, due)})

    def _upsert_queue(self, conn: Connection, name: str, now: datetime, changes: dict[str, Any]) -> Row[Any]:
        """As the base class; with wake-ups on and the queue not paused after the write, also
        ``pg_notify`` the queue as due at ``now`` in the same transaction."""
        row = super()._upsert_queue(conn, name, now, changes)
        channel = self.wakeup_channel
        if channel is not None and not row.paused:
            conn.exec_driver_sql("SELECT pg_notify(%(c)s, %(p)s)", {"c": channel, "p": wakeup_payload(name, now)})
        return row

    def _fenced_statement(self, kind: str) -> Any:
        """As the base class; with wake-ups on, a retry or snooze (release) statement is wrapped
        as ``WITH w AS (UPDATE ... RETURNING *) SELECT w.*, pg_notify(...) FROM w``: the row
        written, and a notification for it in the same statement (none when no row matched)."""
        base = super()._fenced_statement(kind)
        channel = self.wakeup_channel
        if channel is None or kind not in NOTIFYING_FENCED_KINDS:
            return base
        key = ("fenced_notify", kind, channel)
        stmt = self._statements.get(key)
        if stmt is None:
            written = base.cte("w")
            payload = cast(extract("epoch", written.c.scheduled_at), Text) + literal(" ") + written.c.queue
            stmt = self._statements[key] = select(
                *written.c, func.pg_notify(literal(channel), payload).label("notified")
            )
        return stmt


__all__ = ["NOTIFYING_FENCED_KINDS", "PgWakeups", "channel_name", "notifying_insert", "wakeup_payload"]
